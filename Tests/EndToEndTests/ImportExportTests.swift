import Foundation
import Glibc
import KVStore
import KVTestSupport
import Testing

/// `kvsfs export` and `kvsfs import` on real mounts: what a user reads back, what a refused
/// import leaves (nothing), what another mount and its watchers see, and what a crash keeps.
@Suite("kvsfs export and import on real mounts", .serialized)
struct ImportExportTests {
    private func export(_ mountpoint: String, _ arguments: [String] = []) throws -> PropertyListValue {
        let result = try run(kvsfsBinary, ["export"] + arguments + [mountpoint])
        #expect(result.status == 0, "\(result)")
        return try PropertyListCodec.decode(Array(result.standardOutput.utf8))
    }

    private func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: false, encoding: .utf8)
    }

    @Test("export prints every key as one sorted XML dictionary (or bplist00), without registered defaults")
    func exportPrintsTheStore() throws {
        let dir = TemporaryDirectory("kvsfs-export")
        defer { dir.remove() }
        try write("<plist version=\"1.0\"><dict><key>theme</key><string>dark</string></dict></plist>", to: dir.path + "/defaults.plist")
        let daemon = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                                     extraArguments: ["--remote", "none", "--defaults", dir.path + "/defaults.plist"])
        defer { daemon.stop() }
        let written = try shell("""
            echo hello > \(daemon.path("greeting")) && printf '<plist><array><integer>1</integer></array></plist>' > \(daemon.path("list")) || exit 1
            cat \(daemon.path("theme")) | grep -q dark
            """)
        #expect(written.status == 0, "\(written)")
        let xml = try run(kvsfsBinary, ["export", daemon.mountpoint])
        #expect(xml.status == 0, "\(xml)")
        #expect(xml.standardOutput.contains("<dict>\n\t<key>greeting</key>\n\t<string>hello</string>\n\t<key>list</key>\n"), "\(xml)")
        #expect(try export(daemon.mountpoint) == .dictionary(["greeting": .string("hello"), "list": .array([.integer(1)])]),
                "the registered default theme is not the store's")
        let binary = try shell("\(kvsfsBinary) export --format binary \(daemon.mountpoint) | head -c 8")
        #expect(binary.standardOutput == "bplist00", "\(binary)")

        let notMount = try run(kvsfsBinary, ["export", dir.path])
        #expect(notMount.status == 1 && notMount.standardError.contains("is not a kvsfs mount"), "\(notMount)")
        #expect(notMount.standardError.split(separator: "\n").count == 1, "one line: \(notMount)")
        let badFormat = try run(kvsfsBinary, ["export", "--format", "yaml", daemon.mountpoint])
        #expect(badFormat.status != 0 && badFormat.standardError.contains("--format must be xml, binary or json"), "\(badFormat)")
        let json = try run(kvsfsBinary, ["export", "--format", "json", daemon.mountpoint])
        #expect(json.standardOutput == "{\n  \"greeting\" : \"hello\",\n  \"list\" : [\n    1\n  ]\n}\n", "\(json)")
    }

    @Test("import sets, changes and with --replace removes keys as one change; files read back the new values at once")
    func importShowsInTheMount() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { (daemon, dir) throws in
            try write("""
                <plist version="1.0"><dict>
                <key>greeting</key><string>hello</string>
                <key>kept</key><string>same</string>
                <key>new</key><integer>5</integer>
                </dict></plist>
                """, to: dir.path + "/import.plist")
            // Read every file first, so that the kernel holds its name, attributes and pages.
            let result = try shell("""
                cd \(daemon.mountpoint) && echo hi > greeting && echo same > kept && echo old > gone || exit 1
                cat greeting kept gone > /dev/null; ls -l > /dev/null; test -e new && exit 2
                \(kvsfsBinary) import --dry-run --replace \(daemon.mountpoint) \(dir.path)/import.plist || exit 3
                echo "after-dry-run=$(ls | tr '\\n' ' ')"
                \(kvsfsBinary) import --replace \(daemon.mountpoint) \(dir.path)/import.plist || exit 4
                echo "ls=$(ls | tr '\\n' ' ')"
                echo "greeting=$(\(kvsfsBinary) get greeting) new=$(\(kvsfsBinary) get new) kept=$(\(kvsfsBinary) get kept)"
                echo "size=$(stat -c %s greeting) bytes=$(wc -c < greeting)"
                cat gone 2>&1 | sed 's/^/gone: /'
                \(kvsfsBinary) status --json \(daemon.mountpoint)
                """)
            #expect(result.status == 0, "\(result)")
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            #expect(Array(lines.prefix(4)) == ["add new", "change greeting", "remove gone",
                                               "dry run, nothing changed: 1 added, 1 changed, 1 removed, 1 unchanged"], "\(result)")
            #expect(lines.contains("after-dry-run=gone greeting kept "), "\(result)")
            #expect(lines.contains("imported: 1 added, 1 changed, 1 removed, 1 unchanged"), "\(result)")
            #expect(lines.contains("ls=greeting kept new "), "\(result)")
            #expect(lines.contains("greeting=hello new=5 kept=same"), "\(result)")
            #expect(lines.contains { $0.hasPrefix("size=") && $0.split(separator: " ").map { $0.split(separator: "=")[1] }.allEqual }, "stat agrees with the bytes read: \(result)")
            #expect(lines.contains("gone: cat: gone: No such file or directory"), "\(result)")
            #expect(result.standardOutput.contains(#""pending":4"#), "3 writes then 3 import changes, on 4 keys: \(result)")
        }
    }

    @Test("an import over a quota changes nothing and names the first key that does not fit; bad input is refused in one line")
    func refusedImports() throws {
        try withDaemon(extraArguments: ["--remote", "none", "--quota-keys", "3", "--quota-value", "300"]) { (daemon, dir) throws in
            #expect(try shell("echo z > \(daemon.path("z"))").status == 0)
            let before = try run(kvsfsBinary, ["export", daemon.mountpoint]).standardOutput
            let cases: [(name: String, content: String, error: String)] = [
                ("keys", "<plist><dict><key>a</key><integer>1</integer><key>b</key><integer>2</integer><key>c</key><integer>3</integer></dict></plist>",
                 #""c": the store already holds its limit of 3 keys"#),
                ("value", "<plist><dict><key>a</key><integer>1</integer><key>big</key><string>\(String(repeating: "x", count: 400))</string></dict></plist>",
                 #""big": value of"#),
                ("root", "<plist><array><integer>1</integer></array></plist>", "the property list's root is not a dictionary"),
                ("garbage", "not a plist at all \u{1}\u{2}", "not a property list the store accepts"),
                ("deep", "<plist><dict><key>k</key>" + String(repeating: "<array>", count: 200) + String(repeating: "</array>", count: 200) + "</dict></plist>",
                 "not a property list the store accepts"),
            ]
            for refused in cases {
                try write(refused.content, to: dir.path + "/\(refused.name).plist")
                let result = try run(kvsfsBinary, ["import", daemon.mountpoint, dir.path + "/\(refused.name).plist"])
                #expect(result.status == 1, "\(refused.name): \(result)")
                #expect(result.standardError.contains(refused.error), "\(refused.name): \(result)")
                #expect(result.standardError.split(separator: "\n").count == 1, "one line: \(result)")
                #expect(try run(kvsfsBinary, ["export", daemon.mountpoint]).standardOutput == before, "\(refused.name) changed nothing")
            }
            let missing = try run(kvsfsBinary, ["import", daemon.mountpoint, dir.path + "/missing.plist"])
            #expect(missing.status == 1 && missing.standardError.contains("cannot read"), "\(missing)")
            // With --replace, the removal of z makes room: the same keys fit.
            let replaced = try run(kvsfsBinary, ["import", "--replace", daemon.mountpoint, dir.path + "/keys.plist"])
            #expect(replaced.status == 0, "\(replaced)")
            #expect(try export(daemon.mountpoint) == .dictionary(["a": .integer(1), "b": .integer(2), "c": .integer(3)]))
        }
    }

    @Test("an import of a key an editor's save hides makes it a key again: the file shows it and removing the editor file keeps it")
    func importUnhidesAKey() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { (daemon, dir) throws in
            try write("<plist><dict><key>hk</key><string>imported</string></dict></plist>", to: dir.path + "/hk.plist")
            let result = try shell("""
                cd \(daemon.mountpoint) && printf '<plist version="1.0"><string>orig</string></plist>' > hk && mv hk hk~ || exit 1
                \(kvsfsBinary) import \(daemon.mountpoint) \(dir.path)/hk.plist > /dev/null || exit 2
                echo "ls=$(ls | tr '\\n' ' ')"
                echo "hk=$(\(kvsfsBinary) get hk)"
                rm hk~ && echo "after-rm=$(\(kvsfsBinary) get hk)"
                """)
            #expect(result.status == 0, "\(result)")
            #expect(result.standardOutput.contains("ls=hk hk~ \n"), "\(result)")
            #expect(result.standardOutput.contains("hk=imported\n"), "\(result)")
            #expect(result.standardOutput.contains("after-rm=imported\n"), "\(result)")
        }
    }

    @Test("a key XML cannot carry: export in XML names it and says to export in binary, which works")
    func exportNamesTheKeyXMLCannotCarry() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { (daemon, dir) throws in
            let plist = try PropertyListCodec.encodeBinary(.dictionary(["a\u{1}b": .integer(1), "plain": .integer(2)]))
            #expect(FileManager.default.createFile(atPath: dir.path + "/control.plist", contents: Data(plist)))
            #expect(try run(kvsfsBinary, ["import", daemon.mountpoint, dir.path + "/control.plist"]).status == 0)
            let xml = try run(kvsfsBinary, ["export", daemon.mountpoint])
            #expect(xml.status == 1 && xml.standardError.contains(#"the key "a\u{01}b" or its value holds a character an XML 1.0 property list cannot carry: export in binary"#), "\(xml)")
            #expect(try shell("\(kvsfsBinary) export --format binary \(daemon.mountpoint) > \(dir.path)/export.bplist").status == 0)
            let binary = try #require(FileManager.default.contents(atPath: dir.path + "/export.bplist"))
            #expect(try PropertyListCodec.decode(Array(binary)) == .dictionary(["a\u{1}b": .integer(1), "plain": .integer(2)]))
        }
    }

    @Test("a directory that only carries a mount's attributes (setfattr, cp -a) is refused: nothing is exported or imported through it")
    func borrowedAttributesAreRefused() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { (daemon, dir) throws in
            let fake = dir.subdirectory("fake")
            let result = try shell("""
                echo kept > \(daemon.path("kept")) || exit 1
                setfattr -n user.kvsfs.data-directory -v \(daemon.dataDirectory) \(fake) && setfattr -n user.kvsfs.store -v default \(fake) || exit 2
                echo '<plist><dict/></plist>' | \(kvsfsBinary) import --replace \(fake) -; echo "import=$?"
                \(kvsfsBinary) export \(fake); echo "export=$?"
                """)
            #expect(result.standardOutput.contains("import=1") && result.standardOutput.contains("export=1"), "\(result)")
            #expect(result.standardError.contains("is not a kvsfs mount"), "\(result)")
            #expect(try export(daemon.mountpoint) == .dictionary(["kept": .string("kept")]))
        }
    }

    @Test("a client that sends a byte now and then is cut off at the 10 s deadline, and an export waiting behind it is answered")
    func slowClientIsCutOff() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { (daemon, _) throws in
            #expect(try shell("echo v > \(daemon.path("k"))").status == 0)
            let socketPath = daemon.dataDirectory + "/default.control"
            let slow = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(slow) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(socketPath.utf8)) }
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(slow, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            #expect(connected == 0)
            // A request frame that says 4 KiB follow (within the 64 KiB a request may be), then
            // one byte each second for 24 s.
            let started = Date()
            let cutOff = DispatchSemaphore(value: 0)
            Thread {
                var bytes: [UInt8] = [0, 0, 0x10, 0]
                for _ in 0..<24 {
                    if send(slow, &bytes, bytes.count, Int32(MSG_NOSIGNAL)) < 0 { break }
                    bytes = [0x20]
                    sleep(1)
                }
                cutOff.signal()
            }.start()
            let exported = try run(kvsfsBinary, ["export", daemon.mountpoint])
            #expect(exported.status == 0, "\(exported)")
            #expect(Date().timeIntervalSince(started) < 18, "answered once the slow client's 10 s were up")
            cutOff.wait()
            #expect(Date().timeIntervalSince(started) < 18, "the daemon closed the slow connection")
        }
    }

    @Test("a read-only mount refuses an import but answers its dry run; standard input works as the file")
    func readOnlyMount() throws {
        try withDaemon(extraArguments: ["--remote", "none", "--read-only"]) { (daemon, _) throws in
            let plist = "<plist><dict><key>a</key><integer>1</integer></dict></plist>"
            let refused = try shell("printf '\(plist)' | \(kvsfsBinary) import \(daemon.mountpoint) -")
            #expect(refused.status == 1 && refused.standardError.contains("the mount is read-only"), "\(refused)")
            let dryRun = try shell("printf '\(plist)' | \(kvsfsBinary) import --dry-run \(daemon.mountpoint) -")
            #expect(dryRun.status == 0 && dryRun.standardOutput.hasPrefix("add a\n"), "\(dryRun)")
        }
    }

    @Test("an import on A reaches B through a file remote: B's watchers see every key change and B exports the same store")
    func importReachesAnotherMount() throws {
        let dir = TemporaryDirectory("kvsfs-import-sync")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        try checkImportReaches(b, from: a, in: dir)
    }

    @Test("an import on A reaches B through kvsfs serve, with B's inotify events", arguments: ServerBackend.allCases)
    func importThroughServer(backend: ServerBackend) throws {
        try withTestServer(backend) { fixture in
            let a = try fixture.mount("a")
            defer { a.stop() }
            let b = try fixture.mount("b")
            defer { b.stop() }
            try checkImportReaches(b, from: a, in: fixture.directory)
        }
    }

    /// Imports 30 keys on `a`, replacing its one key, and checks what `b` shows after a sync:
    /// a create and a close-write for each key, a delete for the replaced one, the same export.
    private func checkImportReaches(_ b: DaemonMount, from a: DaemonMount, in dir: TemporaryDirectory) throws {
        let keys = (0..<30).map { String(format: "key%02d", $0) }
        let plist = "<plist><dict>" + keys.map { "<key>\($0)</key><string>value of \($0)</string>" }.joined() + "</dict></plist>"
        try write(plist, to: dir.path + "/import.plist")
        let result = try shell("""
            echo old > \(a.path("old")) && \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 1
            test -e \(b.path("old")) || exit 2
            \(shellWatch(b.mountpoint, events: "create,close_write,delete", into: "\(dir.path)/inotify", seconds: 30))
            \(kvsfsBinary) import --replace \(a.mountpoint) \(dir.path)/import.plist > /dev/null || exit 3
            \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 4
            \(shellWait(until: "test $(grep -c CLOSE_WRITE \(dir.path)/inotify) -ge 30 && grep -q 'DELETE old' \(dir.path)/inotify"))
            kill $watcher; wait
            cat \(dir.path)/inotify
            """, timeout: 90)
        #expect(result.status == 0, "\(result)")
        let events = result.standardOutput.split(separator: "\n").map(String.init)
        for key in keys { #expect(events.contains("CREATE \(key)") && events.contains("CLOSE_WRITE,CLOSE \(key)"), "\(key): \(result)") }
        #expect(events.contains("DELETE old"), "\(result)")
        #expect(try export(b.mountpoint) == export(a.mountpoint))
        #expect(try export(b.mountpoint) == .dictionary(Dictionary(uniqueKeysWithValues: keys.map { ($0, .string("value of \($0)")) })))
    }

    @Test("a daemon killed right after an import comes back with all of it")
    func importSurvivesACrash() throws {
        let dir = TemporaryDirectory("kvsfs-import-crash")
        defer { dir.remove() }
        let arguments = ["--remote", "none"]
        let first = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"), extraArguments: arguments)
        let keys = (0..<100).map { "k\($0)" }
        try write("<plist><dict>" + keys.map { "<key>\($0)</key><integer>\($0.dropFirst())</integer>" }.joined() + "</dict></plist>",
                  to: dir.path + "/import.plist")
        let imported = try run(kvsfsBinary, ["import", first.mountpoint, dir.path + "/import.plist"])
        #expect(imported.status == 0, "\(imported)")
        first.crash()
        let second = try DaemonMount(mountpoint: first.mountpoint, dataDirectory: first.dataDirectory, extraArguments: arguments)
        defer { second.stop() }
        #expect(try export(second.mountpoint) == .dictionary(Dictionary(uniqueKeysWithValues: keys.map { ($0, .integer(Int($0.dropFirst())!)) })))
    }
}

private extension Array where Element: Equatable {
    var allEqual: Bool { allSatisfy { $0 == first } }
}
