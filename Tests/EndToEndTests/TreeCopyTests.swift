import Foundation
import KVTestSupport
import Testing

/// Copying a directory of values onto a mount and back with the tools people copy trees with:
/// `rsync -a`, `cp -a` and `tar`. They set modes, owners and times on what they write, and
/// rsync writes through a temporary `.NAME.XXXXXX` file renamed over the key.
@Suite("rsync, cp -a and tar on a mounted store", .serialized, .hangGuard)
struct TreeCopyTests {
    /// Keys and their values, each file in the mount's canonical XML (so sizes agree and a
    /// second rsync has nothing to send): a plain name, dotted names whose rsync temporary
    /// name ends in a lower-case word (`..config.sample.XXXXXX` is scratch, `.config.sample`
    /// is a key), and an array.
    static let files: [(name: String, value: String)] = [
        ("greeting", "<string>hello</string>"),
        (".config.sample", "<string>sample</string>"),
        (".profile", "<string>profile</string>"),
        ("list", "<array>\n\t<string>a</string>\n\t<string>b</string>\n</array>"),
    ]

    static let time = "2021-03-04 05:06:07.123456789 +0000"

    static func canonical(_ value: String) -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        \(value)
        </plist>

        """
    }

    /// A source tree of the values, mode 0644, all with one mtime to the nanosecond.
    static func makeSource(in dir: TemporaryDirectory) throws -> String {
        let source = dir.path + "/src"
        // 0755, as a tree to share is: rsync -a gives the mount's directory the source's mode, and
        // on an --allow-other mount others' bits must stay those shown.
        #expect(mkdir(source, 0o755) == 0 && chmod(source, 0o755) == 0)
        for (name, value) in files {
            let path = source + "/" + name
            try Data(canonical(value).utf8).write(to: URL(fileURLWithPath: path))
            #expect(chmod(path, 0o644) == 0)
        }
        let names = files.map { "'\(source)/\($0.name)'" }.joined(separator: " ")
        #expect(try shell("touch -d '\(time)' \(names)").status == 0)
        return source
    }

    /// Shell lines that print `same NAME` for each key whose bytes and mtime in `directory`
    /// equal the source's.
    static func compare(_ directory: String, with source: String) -> String {
        files.map { name, _ in
            """
            cmp -s '\(source)/\(name)' '\(directory)/\(name)' && echo 'bytes \(name)'
            [ "$(stat -c %y '\(directory)/\(name)')" = '\(time)' ] && echo 'time \(name)'
            """
        }.joined(separator: "\n")
    }

    static func expectSame(_ result: CommandResult, _ label: String) {
        for (name, _) in files {
            #expect(result.standardOutput.contains("bytes \(name)\n"), "\(label): \(name)'s bytes: \(result)")
            #expect(result.standardOutput.contains("time \(name)\n"), "\(label): \(name)'s mtime: \(result)")
        }
    }

    @Test("rsync -a onto the mount exits 0, a second run sends nothing, and rsync -a back out gives the tree",
          arguments: [[], ["--allow-other"]])
    func rsyncBothWays(options: [String]) throws {
        try withDaemon(extraArguments: options) { (m, dir) throws in
            let source = try Self.makeSource(in: dir)
            let out = dir.path + "/out"
            let result = try shell("""
                export TZ=UTC
                rsync -a '\(source)/' '\(m.mountpoint)/'; echo "rsync=$?"
                \(Self.compare(m.mountpoint, with: source))
                rsync -a --stats '\(source)/' '\(m.mountpoint)/' | grep 'Number of regular files transferred'; echo "again=${PIPESTATUS[0]}"
                rsync -a '\(m.mountpoint)/' '\(out)/'; echo "back=$?"
                diff -r '\(source)' '\(out)' && echo "out-equal"
                ls -A '\(m.mountpoint)'
                """)
            #expect(result.standardOutput.contains("rsync=0\n"), "\(result)")
            Self.expectSame(result, "after rsync -a")
            #expect(result.standardOutput.contains("Number of regular files transferred: 0\n"), "\(result)")
            #expect(result.standardOutput.contains("again=0\n"), "\(result)")
            #expect(result.standardOutput.contains("back=0\n"), "\(result)")
            #expect(result.standardOutput.contains("out-equal\n"), "\(result)")
            #expect(result.standardOutput.hasSuffix(".config.sample\n.profile\ngreeting\nlist\n"), "no temporary file is left: \(result)")
            let keys = try run(kvsfsBinary, ["export", m.mountpoint])
            #expect(!keys.standardOutput.contains("<key>..config"), "no temporary file became a key: \(keys)")
        }
    }

    @Test("cp -a onto the mount exits 0 and keeps values and times")
    func copyArchive() throws {
        try withDaemon { (m, dir) throws in
            let source = try Self.makeSource(in: dir)
            let result = try shell("""
                export TZ=UTC
                cp -a '\(source)/.' '\(m.mountpoint)/'; echo "cp=$?"
                \(Self.compare(m.mountpoint, with: source))
                """)
            #expect(result.standardOutput.contains("cp=0\n"), "\(result)")
            Self.expectSame(result, "after cp -a")
        }
    }

    @Test("tar x into the mount exits 0 and keeps values and times (a pax archive holds nanoseconds)")
    func tarExtract() throws {
        try withDaemon { (m, dir) throws in
            let source = try Self.makeSource(in: dir)
            let archive = dir.path + "/tree.tar"
            let result = try shell("""
                export TZ=UTC
                tar c --format=posix -f '\(archive)' -C '\(source)' .; echo "tar-c=$?"
                tar x -f '\(archive)' -C '\(m.mountpoint)'; echo "tar-x=$?"
                \(Self.compare(m.mountpoint, with: source))
                """)
            #expect(result.standardOutput.contains("tar-c=0\n"), "\(result)")
            #expect(result.standardOutput.contains("tar-x=0\n"), "\(result)")
            Self.expectSame(result, "after tar x")
        }
    }
}
