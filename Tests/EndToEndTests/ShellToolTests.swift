import Foundation
import KVTestSupport
import Testing

/// The built `kvsfs` binary, mounted for real, used with the programs people use.
@Suite("Shell tools on a mounted store", .serialized)
struct ShellToolTests {
    @Test("echo, /bin/echo, printf and cat: write and read a key")
    func writeAndRead() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo hello > a && /bin/echo world > b && printf '(1, 2)' > c
                cat a b c
                """)
            #expect(result.status == 0, "\(result)")
            #expect(result.standardOutput.contains("<string>hello</string>"))
            #expect(result.standardOutput.contains("<string>world</string>"))
            #expect(result.standardOutput.contains("<array>\n\t<string>1</string>\n\t<string>2</string>\n</array>"))
        }
    }

    @Test("an invalid value: /bin/echo and tee report EINVAL, and the old value stays")
    func invalidValueReported() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo good > k
                /bin/echo 'bad ( value' > k; echo "echo=$?"
                echo 'bad ( value' | tee k > /dev/null; echo "tee=$?"
                \(kvsfsBinary) get k
                """)
            #expect(result.standardOutput.contains("echo=1"), "\(result)")
            #expect(result.standardOutput.contains("tee=1"))
            #expect(result.standardError.contains("Invalid argument"))
            #expect(result.standardOutput.hasSuffix("good\n"))
        }
    }

    @Test("bash's builtin echo of a value over 1 MB fails at write() with 'File too large', value unchanged")
    func oversizeWithBuiltinEcho() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo small > k
                big=$(head -c 1100000 /dev/zero | tr '\\0' x)
                echo "$big" > k; echo "status=$?"
                \(kvsfsBinary) get k
                """)
            #expect(result.standardError.contains("File too large"), "\(result)")
            #expect(result.standardOutput.contains("status=1"))
            #expect(result.standardOutput.hasSuffix("small\n"))
        }
    }

    @Test("the byte quota: a write past it fails with 'Disk quota exceeded' at write()")
    func totalQuotaWithEcho() throws {
        try withDaemon(extraArguments: ["--quota-total", "4000"]) { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo "$(head -c 2500 /dev/zero | tr '\\0' a)" > a; echo "a=$?"
                echo "$(head -c 2500 /dev/zero | tr '\\0' b)" > b; echo "b=$?"
                ls
                """)
            #expect(result.standardOutput.contains("a=0"), "\(result)")
            #expect(result.standardOutput.contains("b=1"))
            #expect(result.standardError.contains("Disk quota exceeded"))
        }
    }

    @Test("one key too many: 'No space left on device'; a long name: 'File name too long'")
    func keyQuotas() throws {
        try withDaemon(extraArguments: ["--quota-keys", "2"]) { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo 1 > a; echo 2 > b; echo 3 > c; echo "c=$?"
                echo 4 > \(String(repeating: "n", count: 65)); echo "long=$?"
                ls
                """)
            #expect(result.standardError.contains("No space left on device"), "\(result)")
            #expect(result.standardError.contains("File name too long"))
            #expect(result.standardOutput.contains("c=1") && result.standardOutput.contains("long=1"))
            #expect(result.standardOutput.hasSuffix("a\nb\n"))
        }
    }

    @Test("cp, mv, rm, ls -l, stat and touch")
    func fileTools() throws {
        try withDaemon { (m, dir) throws in
            let result = try shell("""
                set -e
                cd \(m.mountpoint)
                printf '{answer = 42;}' > \(dir.path)/source.plist
                cp \(dir.path)/source.plist conf
                cp conf conf2
                mv conf2 moved
                touch newkey conf
                ls -l
                stat -c '%n %s' conf moved
                wc -c < conf
                rm moved newkey
                ls
                """)
            #expect(result.status == 0, "\(result)")
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            let size = try #require(lines.first { $0.hasPrefix("conf ") }?.split(separator: " ").last)
            #expect(lines.contains { $0.trimmingCharacters(in: .whitespaces) == size }, "ls, stat and wc agree on the size")
            #expect(lines.contains { $0.contains(" 0 ") && $0.hasSuffix("newkey") }, "touch made an empty placeholder")
            #expect(result.standardOutput.hasSuffix("conf\n"))
        }
    }

    @Test("a file unlinked or renamed over while a descriptor holds it opens again through /proc/self/fd, as on any file system")
    func reopenThroughProc() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo hello > u1; exec 3<u1; rm u1; cat /proc/self/fd/3 || echo "read=$?"
                echo hello > u2; exec 4<>u2; rm u2; echo w > /proc/self/fd/4; echo "write=$?"
                echo one > r1; exec 5<r1; echo two > t; mv t r1; cat /proc/self/fd/5 || echo "renamed=$?"
                """)
            let out = result.standardOutput
            #expect(out.contains("<string>hello</string>") && out.contains("write=0\n") && out.contains("<string>one</string>"), "\(result)")
            #expect(!out.contains("read=") && !out.contains("renamed="), "\(result)")
            #expect(result.standardError.isEmpty, "\(result)")
        }
    }

    @Test("sed -i edits a key in place and leaves no temporary file")
    func sedInPlace() throws {
        try withDaemon { (m, _) throws in
            let result = try editKey(in: m, holding: "hello world", with: "sed -i 's/world/there/'")
            #expect(result.standardOutput.contains("status=0"), "\(result)")
            #expect(result.standardOutput.contains("hello there\n"))
            #expect(result.standardOutput.hasSuffix(".\n..\nk\n"))
        }
    }

    @Test("sed -i making the value invalid fails, and the key keeps its value")
    func sedInvalid() throws {
        try withDaemon { (m, _) throws in
            let result = try editKey(in: m, holding: "hello", with: "sed -i 's/<string>/(/'")
            #expect(!result.standardOutput.contains("status=0"), "\(result)")
            #expect(result.standardOutput.contains("hello\n"))
        }
    }

    @Test("vim saves a key (default settings and backupcopy=yes) with nothing left behind", arguments: ["", "set backupcopy=yes"])
    func vimSaves(setting: String) throws {
        try withDaemon { (m, _) throws in
            let result = try editKey(in: m, holding: "before",
                                     with: "vim -es -u NONE -i NONE -c '\(setting.isEmpty ? "set nocompatible" : setting)' -c '%s/before/after/' -c 'wq'")
            #expect(result.standardOutput.contains("status=0"), "\(result)")
            #expect(result.standardOutput.contains("after\n"))
            #expect(result.standardOutput.hasSuffix(".\n..\nk\n"))
        }
    }

    @Test("vim with its swap file: default vimrc-free settings plus swap, backup and undo files")
    func vimWithSwap() throws {
        try withDaemon { (m, _) throws in
            let result = try editKey(in: m, holding: "before",
                                     with: "vim -es -i NONE -c 'set swapfile directory=. backup writebackup' -c '%s/before/after/' -c 'wq'",
                                     then: "df -i . | awk 'NR == 2 { print \"keys\", $3, $4 }'")
            #expect(result.standardOutput.contains("status=0"), "\(result)")
            #expect(result.standardOutput.contains("after\n"))
            // With 'backup' set vim keeps k~: an editor file, never a key.
            #expect(!result.standardOutput.contains(".k.swp"))
            #expect(result.standardOutput.contains("keys 1 1023"), "one key in use whatever files vim leaves")
        }
    }

    @Test("vim writing an invalid value fails with an error and the key keeps its value")
    func vimInvalid() throws {
        try withDaemon { (m, _) throws in
            let result = try editKey(in: m, holding: "before", with: "vim -es -u NONE -i NONE -c '%d' -c 'normal! i(broken' -c 'wq'")
            #expect(!result.standardOutput.contains("status=0"), "\(result)")
            #expect(result.standardOutput.contains("before\n"))
            #expect(result.standardOutput.hasSuffix(".\n..\nk\n"))
        }
    }

    @Test("nano edits and saves a key")
    func nanoSaves() throws {
        try withDaemon { (m, _) throws in
            let session = "kvsfs-nano-\(getpid())"
            defer { _ = try? shell("tmux kill-session -t \(session) 2>/dev/null") }
            let result = try shell("""
                \(kvsfsBinary) set \(m.path("k")) -string before
                tmux new-session -d -s \(session) -x 120 -y 30 "TERM=xterm nano --ignorercfiles \(m.path("k"))"
                sleep 1
                for i in 1 2 3 4 5 6; do tmux send-keys -t \(session) C-k; done
                tmux send-keys -t \(session) -l '"from nano"'
                tmux send-keys -t \(session) C-o; sleep 0.5; tmux send-keys -t \(session) Enter; sleep 0.5
                tmux capture-pane -p -t \(session) | grep -o 'Wrote [0-9]* line'
                tmux send-keys -t \(session) C-x; sleep 0.5
                \(kvsfsBinary) get \(m.path("k"))
                """)
            #expect(result.standardOutput.contains("Wrote 1 line"), "\(result)")
            #expect(result.standardOutput.hasSuffix("from nano\n"))
        }
    }

    @Test("df shows the byte quota and its use; df -i the keys")
    func df() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo a > a; echo b > b
                df -B1 . | awk 'NR == 2 { print $2, $3 }'
                df -i . | awk 'NR == 2 { print $2, $3, $4 }'
                cat a b | wc -c
                """)
            let lines = result.standardOutput.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            try #require(lines.count == 3 && lines[2].count == 1, "\(result)")
            #expect(lines[0] == ["1048576", lines[2][0]], "used bytes are the files' sizes added up")
            #expect(lines[1] == ["1024", "2", "1022"])
        }
    }

    @Test("inotifywait sees a key created, written and removed in the mount")
    func inotify() throws {
        try withDaemon { (m, dir) throws in
            let events = dir.path + "/events"
            // The watcher ends by itself and holds none of this shell's pipes.
            let result = try shell("""
                \(shellWatch(m.mountpoint, events: "create,close_write,delete", into: "\(events)", seconds: 10))
                echo hello > \(m.path("k"))
                rm \(m.path("k"))
                sleep 0.5
                kill $watcher
                wait
                cat \(events)
                """, timeout: 30)
            #expect(result.standardOutput == "CREATE k\nCLOSE_WRITE,CLOSE k\nDELETE k\n", "\(result)")
        }
    }

    @Test("getfattr shows user.kvsfs.type")
    func typeAttribute() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                \(kvsfsBinary) set n -int 3
                getfattr --only-values -n user.kvsfs.type n
                """)
            #expect(result.standardOutput == "integer", "\(result)")
        }
    }

    /// Sets key `k` to the string `value`, runs `editor` on it in the mount (HOME in the data
    /// directory, so no user vimrc), then prints `status=N`, the key's value, `ls -a`, and `then`.
    private func editKey(in m: DaemonMount, holding value: String, with editor: String, then extra: String = "") throws -> CommandResult {
        try shell("""
            cd \(m.mountpoint)
            \(kvsfsBinary) set k -string '\(value)'
            \(editor) k; echo "status=$?"
            \(kvsfsBinary) get k
            ls -a
            \(extra)
            """, environment: ["HOME": m.dataDirectory])
    }
}
