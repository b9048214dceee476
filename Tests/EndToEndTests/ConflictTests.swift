import Foundation
import KVTestSupport
import Testing

/// Kept conflicts on real mounts: B writes two keys while it is offline, C one of them, A
/// writes them too; once B and C come back, each key has a winner by stamp and its other
/// changes kept, on every mount (the attribute, `kvsfs conflicts`, the status, the event log),
/// until `kvsfs resolve` settles it on every mount. Through the file remote and through
/// `kvsfs serve` on SQLite and PostgreSQL.
@Suite("Kept conflicts on real mounts", .serialized)
struct ConflictTests {
    @Test("through the file remote: both mounts show the kept change; resolve settles it everywhere")
    func fileRemote() throws {
        let dir = TemporaryDirectory("kvsfs-conflicts")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
        try scenario(
            mountA: { try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote) },
            mountOther: { name, offline in
                try DaemonMount(mountpoint: dir.subdirectory(name), dataDirectory: dir.subdirectory("data-\(name)"),
                                extraArguments: offline ? ["--remote", "none"] : remote)
            })
    }

    @Test("through kvsfs serve: both mounts show the kept change; resolve settles it everywhere", arguments: ServerBackend.allCases)
    func server(backend: ServerBackend) throws {
        try withTestServer(backend) { fixture in
            try scenario(
                mountA: { try fixture.mount("a") },
                mountOther: { name, offline in
                    offline ? try DaemonMount(mountpoint: fixture.directory.subdirectory(name), dataDirectory: fixture.directory.subdirectory("data-\(name)"),
                                              extraArguments: ["--remote", "none"])
                            : try fixture.mount(name)
                })
        }
    }

    @Test("resolve while the remote cannot be reached settles the conflict here and says the resolution is pending")
    func resolvePending() throws {
        let dir = TemporaryDirectory("kvsfs-conflicts")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        try writeTokenFile(try server.admin(["account", "create", "alice"]), to: dir.path + "/token")
        let remote = ["--remote", server.url, "--token-file", dir.path + "/token"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        do {
            let offline = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"),
                                          extraArguments: ["--remote", "none"])
            defer { offline.stop() }
            try #require(try run(kvsfsBinary, ["set", offline.path("theme"), "-string", "laptop"]).status == 0)
        }
        let written = try shell("\(kvsfsBinary) set \(a.path("theme")) -string phone && \(kvsfsBinary) sync \(a.mountpoint)")
        try #require(written.status == 0, "\(written)")
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        try #require(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
        #expect(server.stop() == 0)
        #expect(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 1, "the remote cannot be reached now")
        let resolved = try run(kvsfsBinary, ["resolve", b.path("theme"), "--keep-local"])
        #expect(resolved.status == 0, "\(resolved)")
        #expect(resolved.standardError == "kvsfs: the conflict of \"theme\" is settled on this mount, but the resolution is pending: "
                + "the remote cannot be reached: connection refused by 127.0.0.1:\(server.port); it is pushed when the remote answers\n",
                "\(resolved)")
        #expect(try run(kvsfsBinary, ["get", b.path("theme")]).standardOutput == "laptop\n")
    }

    /// theme: B's and C's changes, made first, lose to A's; font: A's, made first, loses to B's.
    private func scenario(mountA: () throws -> DaemonMount, mountOther: (_ name: String, _ offline: Bool) throws -> DaemonMount) throws {
        let a = try mountA()
        defer { a.stop() }
        do {
            let offline = try mountOther("b", true)
            defer { offline.stop() }
            let offlineC = try mountOther("c", true)
            defer { offlineC.stop() }
            let written = try shell("""
                \(kvsfsBinary) set \(offline.path("theme")) -string laptop || exit 1
                \(kvsfsBinary) set \(offlineC.path("theme")) -string tablet || exit 1
                \(kvsfsBinary) set \(a.path("theme")) -string phone && \(kvsfsBinary) set \(a.path("font")) -string serif || exit 2
                \(kvsfsBinary) sync \(a.mountpoint) || exit 3
                sleep 0.01
                \(kvsfsBinary) set \(offline.path("font")) -string mono || exit 4
                """)
            try #require(written.status == 0, "\(written)")
        }
        let b = try mountOther("b", false)
        defer { b.stop() }
        let c = try mountOther("c", false)
        defer { c.stop() }
        let synced = try shell("\(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(c.mountpoint) && \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint)")
        try #require(synced.status == 0, "\(synced)")

        for mount in [a, b, c] {
            #expect(try run(kvsfsBinary, ["get", mount.path("theme")]).standardOutput == "phone\n", "the greater stamp wins, as always")
            #expect(try run(kvsfsBinary, ["get", mount.path("font")]).standardOutput == "mono\n")
            let attribute = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.conflict", mount.path("theme")])
            #expect(attribute.status == 0, "\(attribute)")
            let sides = attribute.standardOutput.split(separator: ";").map { $0.split(separator: " ").map(String.init) }
            #expect(sides.map(\.first) == ["lost", "lost", "won"], "newest first, then the winner: \(attribute)")
            #expect(sides.first?.suffix(2) == ["string", "\(xmlSize("tablet"))"] && sides[1].suffix(2) == ["string", "\(xmlSize("laptop"))"]
                    && sides.last?.suffix(2) == ["string", "\(xmlSize("phone"))"], "\(attribute)")
            let listed = try run("/usr/bin/getfattr", ["-d", "-m", "user.kvsfs.", mount.path("theme")])
            #expect(listed.standardOutput.contains("user.kvsfs.conflict="), "listed while open: \(listed)")

            let conflicts = try run(kvsfsBinary, ["conflicts", mount.mountpoint])
            #expect(conflicts.status == 0, "\(conflicts)")
            let text = conflicts.standardOutput
            #expect(text.hasPrefix("font\n  lost  ") && text.contains("\ntheme\n  lost  "), "\(text)")
            #expect(text.components(separatedBy: "\n  lost  ").count == 4, "one line for each change that lost: \(text)")
            for value in ["serif", "mono", "laptop", "tablet", "phone"] { #expect(text.contains("\n        \(value)\n"), "\(value): \(text)") }

            let json = try run(kvsfsBinary, ["conflicts", "--json", mount.mountpoint])
            let array = try #require(try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [[String: Any]], "\(json)")
            #expect(array.compactMap { $0["key"] as? String } == ["font", "theme"])
            let lost = try #require(array.last?["lost"] as? [[String: Any]])
            #expect(lost.compactMap { $0["value"] as? String }.map { $0.contains("<string>tablet</string>") } == [true, false])
            #expect((lost.last?["value"] as? String)?.contains("<string>laptop</string>") == true && lost.last?["type"] as? String == "string")
            #expect((lost.last?["time"] as? String)?.hasSuffix("Z") == true && (lost.last?["device"] as? String)?.isEmpty == false)

            let status = try run(kvsfsBinary, ["status", "--json", mount.mountpoint])
            let fields = try #require(try JSONSerialization.jsonObject(with: Data(status.standardOutput.utf8)) as? [String: Any])
            #expect(fields["conflicts"] as? Int == 2, "\(status)")
            let keptBytes = ["tablet", "laptop", "phone", "serif", "mono"].map(xmlSize).reduce(0, +)
            #expect(fields["conflictBytes"] as? Int == keptBytes, "what the database keeps beside the values: \(status)")
            let root = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.conflicts", mount.mountpoint])
            #expect(root.standardOutput == "2", "\(root)")
            let events = try String(contentsOfFile: mount.dataDirectory + "/default.events.jsonl", encoding: .utf8)
            #expect(events.contains(#""reason":"conflict""#), "the event log says so: \(events)")
        }

        let usage = try run(kvsfsBinary, ["resolve", b.path("theme")])
        #expect(usage.status != 0 && usage.standardError.contains("name one of --keep-local and --keep-remote"), "\(usage)")
        let none = try run(kvsfsBinary, ["resolve", b.path("never"), "--keep-local"])
        #expect(none.status != 0 && none.standardError == "Error: \"never\" has no open conflict\n", "\(none)")
        let which = try run(kvsfsBinary, ["resolve", a.path("theme"), "--keep-local"])
        #expect(which.status != 0 && which.standardError.contains("name one with --device"), "A lost no theme: \(which)")
        let unknownDevice = try run(kvsfsBinary, ["resolve", a.path("theme"), "--keep-local", "--device", "nowhere"])
        #expect(unknownDevice.status != 0 && unknownDevice.standardError.contains("no change of device \"nowhere\""), "\(unknownDevice)")

        // B keeps its own theme, which lost (C's is let go); A keeps B's font, which won: both
        // are new writes.
        let resolved = try shell("""
            \(shellWatch(a.mountpoint, events: "close_write", into: "\(a.dataDirectory)/inotify", seconds: 20))
            \(kvsfsBinary) resolve \(b.path("theme")) --keep-local && \(kvsfsBinary) sync \(b.mountpoint) || exit 1
            \(kvsfsBinary) resolve \(a.path("font")) --keep-remote && \(kvsfsBinary) sync \(a.mountpoint) || exit 2
            \(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(c.mountpoint) || exit 3
            \(shellWait(until: "grep -q 'CLOSE_WRITE,CLOSE theme' \(a.dataDirectory)/inotify"))
            kill $watcher; wait
            """)
        #expect(resolved.status == 0, "\(resolved)")
        for mount in [a, b, c] {
            #expect(try run(kvsfsBinary, ["get", mount.path("theme")]).standardOutput == "laptop\n", "the kept change is the value")
            #expect(try run(kvsfsBinary, ["get", mount.path("font")]).standardOutput == "mono\n")
            let conflicts = try run(kvsfsBinary, ["conflicts", mount.mountpoint])
            #expect(conflicts.status == 0 && conflicts.standardOutput.isEmpty, "settled on every mount: \(conflicts)")
            let attribute = try run("/usr/bin/getfattr", ["-n", "user.kvsfs.conflict", mount.path("theme")])
            #expect(attribute.status != 0 && attribute.standardError.contains("No such attribute"), "\(attribute)")
        }
    }

    /// The size of a string's canonical XML, as the store keeps it.
    private func xmlSize(_ text: String) -> Int {
        #"<?xml version="1.0" encoding="UTF-8"?>"#.utf8.count + 1
            + #"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#.utf8.count + 1
            + #"<plist version="1.0">"#.utf8.count + 1 + "<string>\(text)</string>".utf8.count + 1 + "</plist>".utf8.count + 1
    }
}
