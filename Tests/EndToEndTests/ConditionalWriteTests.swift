import Foundation
import KVTestSupport
import Testing

/// Conditional writes on real mounts, as `consul kv put -cas` users expect them: two mounts of
/// one store race `kvsfs set --if-version` on one version and exactly one wins, the other exits
/// 1 with one line saying the key moved on; `kvsfs delete --if-version` and `kvsfs import
/// --if-unchanged-since` likewise. Through the file remote and through `kvsfs serve` on SQLite
/// and PostgreSQL.
@Suite("Conditional writes on real mounts", .serialized)
struct ConditionalWriteTests {
    @Test("through the file remote: one of two racing sets wins, delete and import hold to their conditions")
    func fileRemote() throws {
        let dir = TemporaryDirectory("kvsfs-conditional")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
        try scenario(in: dir) { name in
            try DaemonMount(mountpoint: dir.subdirectory(name), dataDirectory: dir.subdirectory("data-\(name)"), extraArguments: remote)
        }
    }

    @Test("through kvsfs serve: one of two racing sets wins, delete and import hold to their conditions", arguments: ServerBackend.allCases)
    func server(backend: ServerBackend) throws {
        try withTestServer(backend, label: "kvsfs-conditional") { fixture in
            try scenario(in: fixture.directory) { try fixture.mount($0) }
        }
    }

    @Test("a mount without a remote refuses a conditional write in one line, and writes nothing")
    func noRemote() throws {
        let dir = TemporaryDirectory("kvsfs-conditional")
        defer { dir.remove() }
        let local = try DaemonMount(mountpoint: dir.subdirectory("local"), dataDirectory: dir.subdirectory("data-local"),
                                    extraArguments: ["--remote", "none"])
        defer { local.stop() }
        let refused = try run(kvsfsBinary, ["set", "--if-version", "absent", local.path("k"), "-string", "v"])
        #expect(refused.status == 1 && refused.standardError.hasSuffix(" has no remote, and a condition is judged by a remote\n"), "\(refused)")
        #expect(refused.standardError.split(separator: "\n").count == 1, "one line: \(refused)")
        #expect(!FileManager.default.fileExists(atPath: local.path("k")))
        let invalid = try run(kvsfsBinary, ["set", "--if-version", "0", local.path("k"), "-string", "v"])
        #expect(invalid.status != 0 && invalid.standardError.contains("--if-version"), "a version is 1 or more: \(invalid)")
    }

    private func scenario(in dir: TemporaryDirectory, mount: (String) throws -> DaemonMount) throws {
        let a = try mount("a")
        defer { a.stop() }
        let b = try mount("b")
        defer { b.stop() }
        let (ka, kb) = (a.path("k"), b.path("k"))

        // Created where the remote holds nothing; shown on the mount that made it at once, with
        // a writer's events, as a synced change is.
        let created = try shell("""
            \(shellWatch(a.mountpoint, events: "create,close_write", into: "\(dir.path)/inotify", seconds: 20))
            \(kvsfsBinary) set --if-version absent \(ka) -string first || exit 1
            echo "value=$(\(kvsfsBinary) get \(ka))"
            \(shellWait(until: "grep -q 'CLOSE_WRITE,CLOSE k' \(dir.path)/inotify"))
            kill $watcher; wait
            cat \(dir.path)/inotify
            """)
        #expect(created.status == 0 && created.standardOutput.contains("value=first\n"), "\(created)")
        #expect(created.standardOutput.contains("CREATE k") && created.standardOutput.contains("CLOSE_WRITE,CLOSE k"), "\(created)")
        let again = try run(kvsfsBinary, ["set", "--if-version", "absent", ka, "-string", "second"])
        let base = try latestVersion(ka)
        #expect(again.status == 1 && again.standardError == "Error: \"k\": the key moved on: the remote holds a value of it, at version \(base); nothing was changed\n",
                "\(again)")

        // Both mounts read version `base`, and race to replace it.
        try #require(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
        #expect(try run(kvsfsBinary, ["get", kb]).standardOutput == "first\n")
        let raced = try shell("""
            \(kvsfsBinary) set --if-version \(base) \(ka) -string from-a 2> \(dir.path)/a.err & left=$!
            \(kvsfsBinary) set --if-version \(base) \(kb) -string from-b 2> \(dir.path)/b.err & right=$!
            wait $left; echo "a=$?"
            wait $right; echo "b=$?"
            """)
        let statuses = raced.standardOutput.split(separator: "\n")
        try #require(statuses.count == 2, "\(raced)")
        let aWon = statuses.contains("a=0"), bWon = statuses.contains("b=0")
        #expect(aWon != bWon, "exactly one wins: \(raced)")
        #expect(statuses.contains(aWon ? "b=1" : "a=1"), "the loser exits 1: \(raced)")
        let won = try latestVersion(ka)
        let loserError = try String(contentsOfFile: "\(dir.path)/\(aWon ? "b" : "a").err", encoding: .utf8)
        #expect(loserError == "Error: \"k\": the key moved on: its latest version on the remote is \(won), not \(base); nothing was changed\n",
                "\(loserError)")
        let winner = aWon ? "from-a" : "from-b"
        for mount in [a, b] {
            try #require(try run(kvsfsBinary, ["sync", mount.mountpoint]).status == 0)
            #expect(try run(kvsfsBinary, ["get", mount.path("k")]).standardOutput == "\(winner)\n", "the winner's value on both mounts")
        }

        // A removal on a version that is no longer the key's is refused; on its version, taken.
        let staleDelete = try run(kvsfsBinary, ["delete", "--if-version", "\(base)", kb])
        #expect(staleDelete.status == 1 && staleDelete.standardError.contains("the key moved on: its latest version on the remote is \(won)"),
                "\(staleDelete)")
        #expect(FileManager.default.fileExists(atPath: kb), "nothing was removed")
        let deleted = try run(kvsfsBinary, ["delete", "--if-version", "\(won)", kb])
        #expect(deleted.status == 0 && deleted.standardError.isEmpty, "\(deleted)")
        #expect(!FileManager.default.fileExists(atPath: kb))
        try #require(try run(kvsfsBinary, ["sync", a.mountpoint]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: ka), "removed on the other mount too")
        #expect(try run(kvsfsBinary, ["set", "--if-version", "absent", ka, "-string", "back"]).status == 0, "a removed key is absent")

        // An import made from what a mount had taken in at a cursor: refused once another mount
        // changed a key it sets, taken otherwise.
        try #require(try run(kvsfsBinary, ["sync", a.mountpoint]).status == 0)
        let cursor = try remoteCursor(a)
        let plist = "\(dir.path)/import.plist"
        try Data("{ k = imported; other = new; }".utf8).write(to: URL(fileURLWithPath: plist))
        try #require(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
        try #require(try run(kvsfsBinary, ["set", kb, "-string", "from-b-again"]).status == 0)
        try #require(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
        let moved = try latestVersion(kb)
        let refusedImport = try run(kvsfsBinary, ["import", "--if-unchanged-since", "\(cursor)", a.mountpoint, plist])
        #expect(refusedImport.status == 1, "\(refusedImport)")
        #expect(refusedImport.standardError == "Error: \"k\": the key moved on: its latest version on the remote is \(moved), after \(cursor); nothing was changed\n",
                "one line naming the key that moved: \(refusedImport)")
        #expect(!FileManager.default.fileExists(atPath: a.path("other")), "all or nothing")
        try #require(try run(kvsfsBinary, ["sync", a.mountpoint]).status == 0)
        let taken = try run(kvsfsBinary, ["import", "--if-unchanged-since", "\(try remoteCursor(a))", a.mountpoint, plist])
        #expect(taken.status == 0 && taken.standardOutput.hasSuffix("imported: 1 added, 1 changed, 0 removed, 0 unchanged\n"), "\(taken)")
        try #require(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
        #expect(try run(kvsfsBinary, ["get", kb]).standardOutput == "imported\n")
        #expect(try run(kvsfsBinary, ["get", b.path("other")]).standardOutput == "new\n")
    }

    /// The newest version `kvsfs history` lists of the key at `path`.
    private func latestVersion(_ path: String) throws -> Int64 {
        let result = try run(kvsfsBinary, ["history", path])
        try #require(result.status == 0, "\(result)")
        let first = result.standardOutput.split(separator: "\n").dropFirst().first
        return try #require(first.flatMap { $0.split(separator: " ").first.flatMap { Int64($0) } }, "\(result)")
    }

    /// The remote cursor `kvsfs status --json` shows of `mount`.
    private func remoteCursor(_ mount: DaemonMount) throws -> Int64 {
        let result = try run(kvsfsBinary, ["status", "--json", mount.mountpoint])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any], "\(result)")
        return try #require((json["remoteCursor"] as? Int).map(Int64.init), "\(result)")
    }
}
