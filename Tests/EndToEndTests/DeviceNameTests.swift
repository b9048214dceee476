import Foundation
import KVTestSupport
import Testing

/// Devices people can recognise: each mount has a name (the host name at its first mount, or
/// `--device-name`), sends it with its changes, and every view shows it beside the id: `kvsfs
/// conflicts` (and `--json`), `user.kvsfs.conflict` and `kvsfs history`, on the other mount too.
@Suite("Device names", .serialized)
struct DeviceNameTests {
    enum Remote: String, CaseIterable, Sendable {
        case file, serverOnSQLite, serverOnPostgres
    }

    @Test("a change's device shows with its name in conflicts, the xattr and history, on both mounts", arguments: Remote.allCases)
    func namedEverywhere(remote: Remote) throws {
        switch remote {
        case .file:
            let dir = TemporaryDirectory("kvsfs-names")
            defer { dir.remove() }
            let url = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
            try scenario(mount: { name, online, extra in
                try DaemonMount(mountpoint: dir.subdirectory(name), dataDirectory: dir.subdirectory("data-\(name)"),
                                extraArguments: (online ? url : ["--remote", "none"]) + extra)
            })
        case .serverOnSQLite, .serverOnPostgres:
            try withTestServer(remote == .serverOnSQLite ? .sqlite : .postgres) { fixture in
                try scenario(mount: { name, online, extra in
                    online ? try fixture.mount(name, extraArguments: extra)
                           : try DaemonMount(mountpoint: fixture.directory.subdirectory(name),
                                             dataDirectory: fixture.directory.subdirectory("data-\(name)"),
                                             extraArguments: ["--remote", "none"] + extra)
                })
            }
        }
    }

    /// B, offline and named "laptop of ann", writes theme; A, named "phone", writes it later and
    /// syncs; B comes back without naming itself again (its name was kept) and its change loses.
    private func scenario(mount: (_ name: String, _ online: Bool, _ extra: [String]) throws -> DaemonMount) throws {
        let a = try mount("a", true, ["--device-name", "phone"])
        defer { a.stop() }
        do {
            let offline = try mount("b", false, ["--device-name", "laptop of ann"])
            defer { offline.stop() }
            try #require(try run(kvsfsBinary, ["set", offline.path("theme"), "-string", "dark"]).status == 0)
        }
        let written = try shell("\(kvsfsBinary) set \(a.path("theme")) -string light && \(kvsfsBinary) sync \(a.mountpoint)")
        try #require(written.status == 0, "\(written)")
        let b = try mount("b", true, [])
        defer { b.stop() }
        let synced = try shell("\(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(a.mountpoint)")
        try #require(synced.status == 0, "\(synced)")
        #expect(b.logText().contains("(laptop of ann)"), "the start line names the device: \(b.logText())")

        for mount in [a, b] {
            let conflicts = try run(kvsfsBinary, ["conflicts", mount.mountpoint])
            let lines = conflicts.standardOutput.split(separator: "\n")
            #expect(lines.contains { $0.hasPrefix("  lost  ") && $0.contains(" (laptop of ann)  string,") }, "\(conflicts)")
            #expect(lines.contains { $0.hasPrefix("  won   ") && $0.contains(" (phone)  string,") }, "\(conflicts)")

            let json = try run(kvsfsBinary, ["conflicts", "--json", mount.mountpoint])
            let array = try #require(try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [[String: Any]], "\(json)")
            let lost = try #require((array.first?["lost"] as? [[String: Any]])?.first)
            #expect(lost["deviceName"] as? String == "laptop of ann" && (lost["device"] as? String)?.isEmpty == false, "\(json)")
            #expect((array.first?["won"] as? [String: Any])?["deviceName"] as? String == "phone", "\(json)")

            let attribute = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.conflict", mount.path("theme")])
            #expect(attribute.standardOutput.hasPrefix("lost ") && attribute.standardOutput.contains(" (laptop of ann) string ")
                    && attribute.standardOutput.contains("; won ") && attribute.standardOutput.contains(" (phone) string "), "\(attribute)")
        }

        // B keeps its own: a new change of B's, which history lists above A's.
        let resolved = try shell("""
            \(kvsfsBinary) resolve \(b.path("theme")) --keep-local && \(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(a.mountpoint)
            """)
        try #require(resolved.status == 0, "\(resolved)")
        for mount in [a, b] {
            let history = try run(kvsfsBinary, ["history", mount.path("theme")])
            let rows = history.standardOutput.split(separator: "\n")
            #expect(rows.count == 3 && rows[1].contains(" (laptop of ann)  ") && rows[2].contains(" (phone)  "), "\(history.standardOutput)")
        }
    }

    @Test("without --device-name a mount takes the host name; a name outside the rule is refused, and nothing is mounted")
    func defaultAndRefused() throws {
        let dir = TemporaryDirectory("kvsfs-names")
        defer { dir.remove() }
        let host = ProcessInfo.processInfo.hostName
        do {
            let mount = try DaemonMount(mountpoint: dir.subdirectory("m"), dataDirectory: dir.subdirectory("data"), extraArguments: ["--remote", "none"])
            defer { mount.stop() }
            #expect(mount.logText().contains(" (\(host)); remote none"), "\(mount.logText())")
        }
        for (name, reason) in [("", "it is 0 bytes (1 to 64 allowed)"), (String(repeating: "x", count: 65), "it is 65 bytes (1 to 64 allowed)"),
                               ("evil\u{1B}[31m", "it holds the control character U+001B"), (" padded", "it starts or ends with a space")] {
            let refused = try run(kvsfsBinary, ["mount", dir.subdirectory("m"), "--data-dir", dir.subdirectory("data"), "--remote", "none",
                                                "--device-name", name])
            #expect(refused.status != 0 && refused.standardError.contains("--device-name") && refused.standardError.contains(reason),
                    "\(name.debugDescription): \(refused)")
            #expect(!(try String(contentsOfFile: "/proc/mounts", encoding: .utf8)).contains(dir.path + "/m "), "nothing mounted")
        }
    }
}
