import Foundation
import KVTestSupport
import Testing

@Suite("The kvsfs command", .serialized)
struct CommandLineTests {
    @Test("set with each type option, and get printing it plainly", arguments: [
        (["-string", "hello"], "hello\n", "string"), (["-int", "3"], "3\n", "integer"), (["-real", "2.5"], "2.5\n", "real"),
        (["-bool", "yes"], "true\n", "boolean"), (["-date", "2026-01-02T03:04:05Z"], "2026-01-02T03:04:05Z\n", "date"),
        (["-data", "AAEC"], "AAEC\n", "data"),
    ])
    func setAndGet(arguments: [String], printed: String, type: String) throws {
        try withDaemon { (m, _) throws in
            let set = try run(kvsfsBinary, ["set", m.path("k")] + arguments)
            #expect(set.status == 0, "\(set)")
            let get = try run(kvsfsBinary, ["get", m.path("k")])
            #expect(get.standardOutput == printed)
            let attribute = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.type", m.path("k")])
            #expect(attribute.standardOutput == type)
        }
    }

    @Test("containers print as XML property lists, and kvsfs's output can be written back")
    func containers() throws {
        try withDaemon { (m, dir) throws in
            #expect(try run(kvsfsBinary, ["set", m.path("list"), "-array", "a", "b"]).status == 0)
            #expect(try run(kvsfsBinary, ["set", m.path("map"), "-dict", "k1", "v1", "k2", "v2"]).status == 0)
            let list = try run(kvsfsBinary, ["get", m.path("list")])
            #expect(list.standardOutput.contains("<array>\n\t<string>a</string>\n\t<string>b</string>\n</array>"))
            let saved = dir.path + "/map.plist"
            #expect(try shell("\(kvsfsBinary) get \(m.path("map")) > \(saved)").status == 0)
            #expect(try run(kvsfsBinary, ["set", m.path("copy"), "-plist", saved]).status == 0)
            #expect(try shell("cat \(saved) > \(m.path("copy2"))").status == 0)
            let copy = try run(kvsfsBinary, ["get", m.path("copy2")])
            #expect(copy.standardOutput == (try String(contentsOfFile: saved, encoding: .utf8)))
        }
    }

    @Test("errors are one line on stderr and a non-zero exit", arguments: [
        (["set", "MNT/k", "-int", "x"], "Error"),
        (["set", "MNT/\(String(repeating: "k", count: 70))", "-int", "1"], "File name too long"),
        (["get", "MNT/missing"], "No such file or directory"),
        (["delete", "MNT/missing"], "No such file or directory"),
        (["set", "MNT/k"], "exactly one value option"),
    ])
    func errors(arguments: [String], message: String) throws {
        try withDaemon { (m, _) throws in
            let result = try run(kvsfsBinary, arguments.map { $0.replacingOccurrences(of: "MNT", with: m.mountpoint) })
            #expect(result.status != 0)
            #expect(result.standardError.contains(message), "\(result)")
        }
    }

    @Test("a command on a path outside a kvsfs mount is refused in one line, exit 1, and touches nothing",
          arguments: [["get", "FILE"], ["set", "FILE", "-int", "1"], ["set", "NEW", "-int", "1"], ["delete", "FILE"],
                      ["history", "FILE"], ["revert", "FILE", "1"], ["resolve", "FILE", "--keep-local"]])
    func outsideAMount(arguments: [String]) throws {
        let dir = TemporaryDirectory("kvsfs-outside")
        defer { dir.remove() }
        let file = dir.path + "/plain.txt"
        #expect(FileManager.default.createFile(atPath: file, contents: Data("keep me\n".utf8)))
        let result = try run(kvsfsBinary, arguments.map { $0 == "FILE" ? file : $0 == "NEW" ? dir.path + "/new" : $0 })
        #expect(result.status == 1, "\(result)")
        #expect(result.standardError.contains("is not in a kvsfs mount"), "\(result)")
        #expect(result.standardError.split(separator: "\n").count == 1, "one line: \(result)")
        #expect(FileManager.default.contents(atPath: file) == Data("keep me\n".utf8), "the file is untouched")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/new"), "nothing is created")
    }

    @Test("set over the per-value quota says so", arguments: [0])
    func setTooLarge(_: Int) throws {
        try withDaemon(extraArguments: ["--quota-value", "1000"]) { (m, _) throws in
            let result = try run(kvsfsBinary, ["set", m.path("k"), "-string", String(repeating: "x", count: 2000)])
            #expect(result.status != 0)
            #expect(result.standardError.contains("File too large: the value is over the per-value quota"), "\(result)")
        }
    }

    @Test("delete removes a key")
    func delete() throws {
        try withDaemon { (m, _) throws in
            #expect(try run(kvsfsBinary, ["set", m.path("k"), "-int", "1"]).status == 0)
            #expect(try run(kvsfsBinary, ["delete", m.path("k")]).status == 0)
            #expect(!FileManager.default.fileExists(atPath: m.path("k")))
        }
    }
}

@Suite("Mounting", .serialized)
struct MountingTests {
    @Test("a bad mountpoint gets a clear message, a non-zero exit, and nothing mounted", arguments: ["missing", "notempty", "file"])
    func badMountpoint(kind: String) throws {
        try withTemporaryDirectory { (dir) throws in
            let path: String
            switch kind {
            case "missing": path = dir.path + "/missing"
            case "notempty":
                path = dir.subdirectory("full")
                FileManager.default.createFile(atPath: path + "/x", contents: Data())
            default:
                path = dir.path + "/file"
                FileManager.default.createFile(atPath: path, contents: Data())
            }
            let result = try run(kvsfsBinary, ["mount", path, "--data-dir", dir.path + "/data"], timeout: 20)
            #expect(result.status != 0)
            #expect(["does not exist", "not empty", "not a directory"].contains { result.standardError.contains($0) }, "\(result)")
            #expect(!DaemonMount.isMounted(path))
        }
    }

    @Test("a mountpoint that is already a mount is refused")
    func alreadyMounted() throws {
        try withDaemon { (m, dir) throws in
            let result = try run(kvsfsBinary, ["mount", m.mountpoint, "--data-dir", dir.path + "/other"], timeout: 20)
            #expect(result.status != 0)
            #expect(result.standardError.contains("already a mount point"), "\(result)")
        }
    }

    @Test("a second mount of the same store and data dir is refused while the first is up")
    func secondMountOfStore() throws {
        try withDaemon { (m, dir) throws in
            let result = try run(kvsfsBinary, ["mount", dir.subdirectory("mnt2"), "--data-dir", m.dataDirectory], timeout: 20)
            #expect(result.status != 0)
            #expect(result.standardError.contains("is already mounted by kvsfs process \(m.process.processIdentifier)"), "\(result)")
            #expect(!DaemonMount.isMounted(dir.path + "/mnt2"))
        }
    }

    @Test("fusermount3 -u ends the daemon with status 0")
    func unmountExitsZero() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let daemon = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"))
        defer { daemon.stop() }
        #expect(try shell("echo v > \(daemon.path("k"))").status == 0)
        #expect(daemon.stop() == 0)
        #expect(!DaemonMount.isMounted(daemon.mountpoint))
    }

    @Test("SIGTERM unmounts and ends the daemon with status 0, every write kept", arguments: [SIGTERM, SIGINT])
    func signalExitsZero(signal: Int32) throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let mnt = dir.subdirectory("mnt")
        var daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.subdirectory("data"))
        defer { daemon.stop() }
        #expect(try shell("echo kept > \(daemon.path("k"))").status == 0)
        kill(daemon.process.processIdentifier, signal)
        daemon.process.waitUntilExit()
        #expect(daemon.process.terminationStatus == 0)
        #expect(!DaemonMount.isMounted(mnt))
        daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.path + "/data")
        #expect(try run(kvsfsBinary, ["get", daemon.path("k")]).standardOutput == "kept\n")
    }

    @Test("every write, rm and mv that returned success survives kill -9 of the daemon")
    func survivesCrash() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let mnt = dir.subdirectory("mnt")
        var daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.subdirectory("data"))
        defer { daemon.stop() }
        // More changes than the journal takes before a batch goes to the database: some are in
        // the database, the rest only in the journal when the daemon dies.
        let writes = try shell("""
            cd \(mnt)
            for i in $(seq 1 300); do echo "value$i" > "key$((i % 100))" || exit 1; done
            rm key7 && mv key8 moved
            echo lead > %00lead && echo middle > mid%00dle   # keys holding NUL
            /bin/echo last > last
            """)
        #expect(writes.status == 0, "\(writes)")
        daemon.crash()
        daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.path + "/data")
        let read = try shell("""
            cd \(mnt)
            for key in key0 key1 key99 moved %00lead mid%00dle last; do \(kvsfsBinary) get $key; done
            ls key7 key8 2>&1 | sed 's/.*cannot access/gone/'
            ls | wc -l
            """)
        let expected = ["value300", "value201", "value299", "value208", "lead", "middle", "last",
                        "gone 'key7': No such file or directory", "gone 'key8': No such file or directory", "102"]
        #expect(read.standardOutput == expected.map { $0 + "\n" }.joined(), "\(read)")
    }

    @Test("quota options are kept with the store across mounts")
    func quotaOptionsPersist() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let mnt = dir.subdirectory("mnt")
        var daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.subdirectory("data"), extraArguments: ["--quota-keys", "5"])
        daemon.stop()
        daemon = try DaemonMount(mountpoint: mnt, dataDirectory: dir.path + "/data")
        defer { daemon.stop() }
        #expect(try shell("df -i \(mnt) | awk 'NR == 2 { print $2 }'").standardOutput == "5\n")
    }
}

@Suite("Documentation")
struct DocumentationTests {
    @Test("the manual renders without warnings")
    func manualRenders() throws {
        let manual = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../man/kvsfs.1").standardizedFileURL.path
        let result = try shell("LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l \(manual)")
        #expect(result.status == 0, "\(result)")
        #expect(result.standardError.isEmpty, "\(result.standardError)")
        #expect(result.standardOutput.contains("user.kvsfs.type"))
    }

    @Test("every command and option the binary knows is in the manual")
    func manualCoversCommandLine() throws {
        let manual = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../man/kvsfs.1").standardizedFileURL.path
        let rendered = try shell("LC_ALL=C.UTF-8 MANWIDTH=200 man -l \(manual)").standardOutput
        for command in ["mount", "get", "set", "delete", "sync", "status", "events", "serve", "account create", "token create", "token revoke", "token list"] {
            #expect(rendered.contains("kvsfs \(command)"), "kvsfs \(command)")
            let help = try run(kvsfsBinary, command.split(separator: " ").map(String.init) + ["--help"]).standardOutput
            let options = Set(help.split(whereSeparator: { " ,.;()\n[]<>|=".contains($0) }).filter {
                $0.hasPrefix("--") && $0.count > 2 && $0 != "--help" && $0 != "--version"
            })
            for option in options {
                #expect(rendered.contains(option), "kvsfs \(command) \(option)")
            }
        }
    }
}
