import Foundation
import KVTestSupport
import Testing

/// `kvsfs watch`: every change to a mount's keys, made there or synced from elsewhere, one line
/// each, resumable from a cursor.
@Suite("kvsfs watch", .serialized, .hangGuard)
struct WatchCommandTests {
    /// Mounts A and B of one store on one file remote, with A's and B's device names set.
    private func withTwoMounts(_ body: (DaemonMount, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-watch")
        defer { dir.remove() }
        let remote = "file://\(dir.subdirectory("cloud"))/cloud.sqlite"
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"),
                                extraArguments: ["--remote", remote, "--device-name", "alpha"])
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"),
                                extraArguments: ["--remote", remote, "--device-name", "beta"])
        defer { b.stop() }
        try body(a, b, dir)
    }

    @Test("local and synced changes as they happen, with their values; a resumed watch starts after its cursor")
    func localAndSynced() throws {
        try withTwoMounts { (a, b, dir) throws in
            let result = try shell("""
                timeout 60 \(kvsfsBinary) watch --values --count 4 \(b.mountpoint) > \(dir.path)/watch &
                watcher=$!
                sleep 1
                echo '{"port": 8080}' > \(a.path("server"))
                \(shellWait(until: "test -e \(b.path("server"))"))
                \(kvsfsBinary) set \(b.path("volume")) -int 3 || exit 7
                rm \(a.path("server"))
                \(shellWait(until: "! test -e \(b.path("server"))"))
                \(kvsfsBinary) set \(b.path("when")) -date 2026-11-22T10:00:00Z || exit 8
                wait $watcher || exit 9
                cat \(dir.path)/watch
                """, timeout: 90)
            #expect(result.status == 0, "\(result)")
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            #expect(lines.map { $0.split(separator: " ").dropFirst().joined(separator: " ") } == [
                #"server-change server alpha = {"port":8080}"#,
                "local volume beta = 3",
                "server-change server alpha deleted",
                "local when beta = 2026-11-22T10:00:00Z",
            ], "\(result)")
            let cursors = lines.compactMap { $0.split(separator: " ").first.flatMap { Int64($0) } }
            #expect(cursors == cursors.sorted() && Swift.Set(cursors).count == 4, "\(lines)")

            // Resumed after the second line: the keys changed since, each with its latest change.
            let resumed = try run(kvsfsBinary, ["watch", "--json", "--since", String(cursors[1]), "--count", "2", b.mountpoint], timeout: 30)
            #expect(resumed.status == 0, "\(resumed)")
            let objects = try resumed.standardOutput.split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
            #expect(objects.map { $0["key"] as? String } == ["server", "when"])
            #expect(objects.map { $0["deleted"] as? Bool } == [true, false])
            #expect(objects.map { $0["reason"] as? String } == ["server-change", "local"])
            #expect(objects.map { $0["device"] as? String } == ["alpha", "beta"])
        }
    }

    @Test("key files watch those keys only; a path outside a mount is refused, and nothing is touched")
    func someKeys() throws {
        try withTwoMounts { (a, _, dir) throws in
            let result = try shell("""
                timeout 60 \(kvsfsBinary) watch --count 1 \(a.path("watched")) > \(dir.path)/watch &
                watcher=$!
                sleep 1
                echo one > \(a.path("other"))
                echo two > \(a.path("watched"))
                wait $watcher || exit 9
                cat \(dir.path)/watch
                """, timeout: 90)
            #expect(result.status == 0, "\(result)")
            #expect(result.standardOutput.hasSuffix(" local watched alpha\n"), "\(result)")

            let outside = try run(kvsfsBinary, ["watch", dir.path + "/plain-file"])
            #expect(outside.status == 1, "\(outside)")
            #expect(outside.standardError.contains("is not in a kvsfs mount"), "\(outside)")
        }
    }
}
