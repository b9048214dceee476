import Foundation
import KVTestSupport
import Testing

/// What chmod, chown, a create's mode and utimensat do to a key (`ModeRule`, `SetTime`).
@Suite("Modes, owners and set times on a mounted store", .serialized, .hangGuard)
struct ModesAndTimesTests {
    static let time = "2021-05-06 07:08:09.123456789 +0000"

    @Test("touch -d keeps the time to the nanosecond until the value changes; a refused value does not take it")
    func setTimes() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                export TZ=UTC
                cd \(m.mountpoint)
                echo one > k
                touch -d '\(Self.time)' k; echo "touch=$?"
                echo "set=$(stat -c %y k)"
                cat k > /dev/null
                mv k moved; echo "moved=$(stat -c %y moved)"
                echo one > moved; echo "same-value=$(stat -c %y moved)"
                echo two > moved; echo "rewritten=$(stat -c %y moved)"
                # A time set through a descriptor holding a value that is then refused, at close or
                # at write(): it stays on neither the old value nor the next.
                echo three > r
                python3 - <<'EOF'
                import os
                for text in (b"(a, ", b"bad ( value"):
                    fd = os.open("r", os.O_WRONLY | os.O_TRUNC)
                    try:
                        os.write(fd, text)
                    except OSError as error:
                        print("write refused:", error.strerror)
                    os.utime(fd, ns=(1620284889123456789, 1620284889123456789))
                    try:
                        os.close(fd)
                    except OSError as error:
                        print("close refused:", error.strerror)
                EOF
                echo "after-refusal=$(stat -c %y r)"
                """)
            #expect(result.standardOutput.contains("touch=0\n"), "\(result)")
            #expect(result.standardOutput.contains("set=\(Self.time)\n"), "\(result)")
            #expect(result.standardOutput.contains("moved=\(Self.time)\n"), "mv keeps mtime: \(result)")
            #expect(result.standardOutput.contains("same-value=\(Self.time)\n"), "an equal value is no change: \(result)")
            #expect(!result.standardOutput.contains("rewritten=2021-"), "a new value drops the set time: \(result)")
            #expect(result.standardOutput.contains("close refused: Invalid argument"), "\(result)")
            #expect(result.standardOutput.contains("write refused: Invalid argument"), "\(result)")
            #expect(result.standardOutput.contains("after-refusal=20"), "\(result)")
            #expect(!result.standardOutput.contains("after-refusal=2021-"), "a refused value's time is not kept: \(result)")
        }
    }

    @Test("chmod succeeds when 0644 gives what it asks; set-id bits and another owner are EPERM")
    func modesWithoutAllowOther() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo one > k
                chmod 644 k; echo "644=$?"
                chmod 444 k; echo "444=$?"
                chmod 600 k; echo "600=$?"
                chmod 666 k; echo "666=$?"
                chmod 755 k; echo "755=$?"
                chmod u+s k; echo "u+s=$?"
                chmod +t k; echo "sticky=$?"
                chown \(getuid()) k; echo "chown-owner=$?"
                chown 65534 k; echo "chown-other=$?"
                chmod 700 .; echo "dir-700=$?"
                echo "mode=$(stat -c %a k) dir=$(stat -c %a .)"
                (umask 077; echo x > private); cat private > /dev/null; echo "umask-077=$?"
                """)
            for ok in ["644", "444", "600", "666", "chown-owner", "dir-700", "umask-077"] {
                #expect(result.standardOutput.contains("\(ok)=0\n"), "\(ok): \(result)")
            }
            for refused in ["755", "u+s", "sticky", "chown-other"] {
                #expect(result.standardOutput.contains("\(refused)=1\n"), "\(refused): \(result)")
            }
            #expect(result.standardError.contains("Operation not permitted"), "\(result)")
            #expect(result.standardOutput.contains("mode=644 dir=755\n"), "nothing of a mode is kept: \(result)")
        }
    }

    @Test("on an --allow-other mount group and other bits count: 0600 is refused at chmod and at create alike")
    func modesWithAllowOther() throws {
        try withDaemon(extraArguments: ["--allow-other"]) { (m, dir) throws in
            let source = dir.path + "/source"
            #expect(mkdir(source, 0o700) == 0 && chmod(source, 0o700) == 0)
            let result = try shell("""
                cd \(m.mountpoint)
                echo one > k; echo "umask-022=$?"
                chmod 644 k; echo "644=$?"
                chmod 444 k; echo "444=$?"
                chmod 600 k; echo "600=$?"
                chmod 664 k; echo "664=$?"
                (umask 077; echo x > private)
                cat private; echo "private=$?"
                # cp -a and tar create 0600 and chmod to the file's mode before they close.
                (umask 022; echo '<string>copied</string>' > \(source)/copied; chmod 644 \(source)/copied)
                cp -a \(source)/copied copied; echo "cp-a=$?"
                tar c -f \(dir.path)/t.tar -C \(source) copied && mv copied was-copied && tar x -f \(dir.path)/t.tar; echo "tar-x=$?"
                # An executable copied in asks more than is shown at create: not given, not refused.
                (umask 022; echo '<string>run</string>' > \(source)/tool; chmod 755 \(source)/tool)
                cp \(source)/tool tool; echo "cp-executable=$?"
                stat -c 'tool-mode=%a' tool
                ls
                """)
            #expect(result.standardOutput.contains("tool-mode=644\n"), "\(result)")
            for ok in ["umask-022", "644", "444", "cp-a", "tar-x", "cp-executable"] {
                #expect(result.standardOutput.contains("\(ok)=0\n"), "\(ok): \(result)")
            }
            for refused in ["600", "664", "private"] {
                #expect(result.standardOutput.contains("\(refused)=1\n"), "\(refused): \(result)")
            }
            #expect(!result.standardOutput.contains("private\n"), "no key others could read was made: \(result)")
            #expect(result.standardOutput.contains("copied\n"), "\(result)")
        }
    }
}
