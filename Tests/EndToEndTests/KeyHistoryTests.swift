import Foundation
import KVTestSupport
import Testing

/// `kvsfs history` and `kvsfs revert` on real mounts: what the remote kept, what a revert
/// writes (a change like any other: quotas, watchers, other mounts), and every refusal in one
/// line.
@Suite("Per-key history on real mounts", .serialized)
struct KeyHistoryTests {
    /// `kvsfs history PATH` as its lines' columns, the heading left out.
    private func history(_ path: String) throws -> [[String]] {
        let result = try run(kvsfsBinary, ["history", path])
        #expect(result.status == 0, "\(result)")
        let lines = result.standardOutput.split(separator: "\n")
        // Columns are two spaces apart or more; a device's name, in its column, may hold one.
        #expect(lines.first?.split(separator: #/ {2,}/#) == ["VERSION", "TIME", "DEVICE", "TYPE", "SIZE"])
        return lines.dropFirst().map { $0.split(separator: #/ {2,}/#).map(String.init) }
    }

    /// Expects `arguments` to fail with one line of standard error that holds `message` (an
    /// argument refused before the command runs is followed by the usage).
    private func expectRefusal(_ arguments: [String], _ message: String, usage: Bool = false,
                               sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try run(kvsfsBinary, arguments)
        #expect(result.status != 0 && result.standardError.contains(message), "\(result)", sourceLocation: sourceLocation)
        let lines = result.standardError.split(separator: "\n")
        #expect(usage ? lines.first?.contains(message) == true : lines.count == 1, "one line: \(result)", sourceLocation: sourceLocation)
    }

    @Test("history lists a key's versions newest first, --show prints one, revert writes it back with its events")
    func historyAndRevert() throws {
        try withDaemon { (daemon, dir) throws in
            let k = daemon.path("k")
            let written = try shell("""
                \(kvsfsBinary) set \(k) -string one && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 1
                \(kvsfsBinary) set \(k) -int 2 && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 2
                rm \(k) && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 3
                """)
            #expect(written.status == 0, "\(written)")
            let versions = try history(k)
            try #require(versions.count == 3, "\(versions)")
            #expect(versions.map { $0[3] } == ["removed", "integer", "string"])
            #expect(versions.map { $0[4] }.first == "0")
            #expect(versions.allSatisfy { $0[1].hasSuffix("Z") && $0[1].count == 24 }, "ISO 8601 times in UTC: \(versions)")
            #expect(Set(versions.map { $0[2] }).count == 1, "one device made every change: \(versions)")
            let (removal, integer, string) = (versions[0][0], versions[1][0], versions[2][0])

            let shown = try run(kvsfsBinary, ["history", "--show", string, k])
            #expect(shown.status == 0 && shown.standardOutput == "one\n", "\(shown)")
            #expect(try run(kvsfsBinary, ["history", "--show", integer, k]).standardOutput == "2\n")
            try expectRefusal(["history", "--show", removal, k], "is its removal: it has no value")
            try expectRefusal(["history", "--show", "999999", k], "the remote keeps no version 999999 of \"k\"")
            try expectRefusal(["history", daemon.path("never")], "the remote keeps no history of \"never\"")
            try expectRefusal(["history", dir.path + "/k"], "is not in a kvsfs mount")
            try expectRefusal(["revert", k, "0"], "the version number must be 1 or more", usage: true)

            let reverted = try shell("""
                \(shellWatch(daemon.mountpoint, events: "create,close_write,delete", into: "\(dir.path)/inotify", seconds: 20))
                \(kvsfsBinary) revert \(k) \(string) && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 1
                echo "value=$(\(kvsfsBinary) get \(k))"
                \(kvsfsBinary) revert \(k) \(removal) && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 2
                test -e \(k) && exit 3
                \(kvsfsBinary) revert \(k) \(integer) && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 4
                echo "value=$(\(kvsfsBinary) get \(k))"
                \(shellWait(until: "test $(grep -c 'CLOSE_WRITE,CLOSE k' \(dir.path)/inotify) -ge 2"))
                kill $watcher; wait
                cat \(dir.path)/inotify
                """)
            #expect(reverted.status == 0, "\(reverted)")
            #expect(reverted.standardOutput.contains("value=one\n") && reverted.standardOutput.contains("value=2\n"), "\(reverted)")
            for event in ["CREATE k", "CLOSE_WRITE,CLOSE k", "DELETE k"] {
                #expect(reverted.standardOutput.contains(event), "the revert's \(event): \(reverted)")
            }
            let after = try history(k)
            #expect(after.count == 6 && after.prefix(3).map { $0[3] } == ["integer", "removed", "string"],
                    "each revert is a new version: \(after)")
        }
    }

    @Test("--history-versions bounds what the file remote keeps; a revert is refused by the quota like any write")
    func policyAndQuota() throws {
        let dir = TemporaryDirectory("kvsfs-history-policy")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
        let invalid = try run(kvsfsBinary, ["mount", dir.subdirectory("bad"), "--history-versions", "0"] + remote)
        #expect(invalid.status != 0 && invalid.standardError.contains("a history of 0 versions per key (1 to 1000 allowed)"), "\(invalid)")
        let onServer = try run(kvsfsBinary, ["mount", dir.subdirectory("bad"), "--history-days", "3", "--remote", "http://127.0.0.1:9"])
        #expect(onServer.status != 0 && onServer.standardError.contains("kvsfs account history"), "\(onServer)")
        let noRemote = try run(kvsfsBinary, ["mount", dir.subdirectory("bad"), "--history-days", "3", "--remote", "none"])
        #expect(noRemote.status != 0 && noRemote.standardError.contains("need a remote: history is kept by the remote"), "\(noRemote)")
        do {
            let local = try DaemonMount(mountpoint: dir.subdirectory("local"), dataDirectory: dir.subdirectory("data-local"),
                                        extraArguments: ["--remote", "none"])
            defer { local.stop() }
            #expect(try shell("echo v > \(local.path("k"))").status == 0)
            try expectRefusal(["history", local.path("k")], "this mount has no remote, and history is kept by a remote")
        }

        let bigVersion: String
        do {
            let first = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                                        extraArguments: remote + ["--history-versions", "3"])
            defer { first.stop() }
            let big = String(repeating: "x", count: 300)
            let written = try shell("""
                for value in \(big) a b c \(big)y d; do \(kvsfsBinary) set \(first.path("k")) -string $value && \(kvsfsBinary) sync \(first.mountpoint) || exit 1; done
                """)
            #expect(written.status == 0, "\(written)")
            let versions = try history(first.path("k"))
            #expect(versions.count == 3, "the last 3 of 6: \(versions)")
            bigVersion = try #require(versions.first { Int($0[4]) ?? 0 > 300 }?[0], "\(versions)")
        }

        // The store's value quota now refuses what the old version holds.
        let daemon = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                                     extraArguments: remote + ["--quota-value", "200"])
        defer { daemon.stop() }
        try expectRefusal(["revert", daemon.path("k"), bigVersion], "the value is over the per-value quota")
        #expect(try run(kvsfsBinary, ["get", daemon.path("k")]).standardOutput == "d\n", "the refused revert changed nothing")
        #expect(try history(daemon.path("k")).count == 3, "the store's policy was kept without the option")
    }

    @Test("through kvsfs serve: B lists and reverts what A wrote, A reads the revert, a read-only token reads history, the admin sets the policy",
          arguments: ServerBackend.allCases)
    func historyThroughServer(backend: ServerBackend) throws {
        try withTestServer(backend) { fixture in
            let a = try fixture.mount("a")
            defer { a.stop() }
            let b = try fixture.mount("b")
            defer { b.stop() }
            let written = try shell("""
                \(kvsfsBinary) set \(a.path("theme")) -string light && \(kvsfsBinary) sync \(a.mountpoint) || exit 1
                \(kvsfsBinary) set \(a.path("theme")) -string dark && \(kvsfsBinary) sync \(a.mountpoint) || exit 2
                \(kvsfsBinary) sync \(b.mountpoint)
                """)
            #expect(written.status == 0, "\(written)")
            let versions = try history(b.path("theme"))
            try #require(versions.count == 2, "\(versions)")
            let reverted = try shell("""
                \(kvsfsBinary) revert \(b.path("theme")) \(versions[1][0]) && \(kvsfsBinary) sync \(b.mountpoint) || exit 1
                \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) get \(a.path("theme"))
                """)
            #expect(reverted.status == 0 && reverted.standardOutput == "light\n", "A reads the revert B made: \(reverted)")

            let reader = try fixture.server.admin(["token", "create", "alice", "--store", "default", "--read-only"])
            try writeTokenFile(reader, to: fixture.directory.path + "/reader")
            let c = try DaemonMount(mountpoint: fixture.directory.subdirectory("c"), dataDirectory: fixture.directory.subdirectory("data-c"),
                                    extraArguments: ["--remote", fixture.server.url, "--token-file", fixture.directory.path + "/reader"])
            defer { c.stop() }
            #expect(try history(c.path("theme")).count == 3, "a read-only token reads history")

            let admin = ["account", "history", "alice/default", "--database", fixture.database.url]
            let shown = try run(kvsfsBinary, admin)
            #expect(shown.status == 0 && shown.standardOutput == "versions 16\nretention-days 30\n", "\(shown)")
            let set = try run(kvsfsBinary, admin + ["--versions", "2"])
            #expect(set.status == 0 && set.standardOutput == "versions 2\nretention-days 30\n", "\(set)")
            try expectRefusal(admin + ["--retention-days", "4000"], "a retention of 4000 days (0 to 3650 allowed)", usage: true)
            try expectRefusal(["account", "history", "nobody/default", "--database", fixture.database.url], "there is no account nobody")
            #expect(try shell("\(kvsfsBinary) set \(a.path("theme")) -string blue && \(kvsfsBinary) sync \(a.mountpoint)").status == 0)
            #expect(try history(b.path("theme")).count == 2, "the new policy trims at the key's next change")
        }
    }
}
