import Foundation
import KVTestSupport
import Testing

/// Two daemons of one store, each with its own data directory, syncing through a file remote:
/// what a program watching the second mount sees of changes made on the first.
@Suite("Mounts syncing through a file remote", .serialized)
struct SyncMountTests {
    /// Mounts A and B of store `default`. A's remote is `cloud/cloud.sqlite`; B reaches the same
    /// file through `link/`, which does not exist until `connect(B)`: until then B is offline.
    private func withTwoMounts(offline: Bool = false, extraArguments: [String] = [],
                               _ body: (DaemonMount, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-sync")
        defer { dir.remove() }
        let cloud = dir.subdirectory("cloud")
        if !offline { try FileManager.default.createSymbolicLink(atPath: dir.path + "/link", withDestinationPath: cloud) }
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"),
                                extraArguments: ["--remote", "file://\(cloud)/cloud.sqlite"] + extraArguments)
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"),
                                extraArguments: ["--remote", "file://\(dir.path)/link/cloud.sqlite"] + extraArguments)
        defer { b.stop() }
        try body(a, b, dir)
    }

    @Test("inotifywait on B sees creates, overwrites, editor saves and deletes made on A; the event stream gives their reason")
    func eventsForExternalChanges() throws {
        try withTwoMounts { (a, b, dir) throws in
            let result = try shell("""
                sync \(a.mountpoint) || exit 8
                \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
                \(shellWatch(b.mountpoint, events: "create,close_write,delete,moved_to", into: "\(dir.path)/inotify", seconds: 30))
                timeout 30 \(kvsfsBinary) events \(b.mountpoint) > \(dir.path)/stream &
                stream=$!
                sleep 0.5
                cd \(a.mountpoint)
                echo hello > k
                \(shellWait(until: "grep -q hello \(b.path("k")) 2>/dev/null"))
                printf world > k
                \(shellWait(until: "grep -q world \(b.path("k"))"))
                sed -i 's/world/sedded/' k
                \(shellWait(until: "grep -q sedded \(b.path("k"))"))
                HOME=\(dir.path) vim -es -N -u NONE -i NONE -c '%s/sedded/vimmed/' -c 'wq' k
                \(shellWait(until: "grep -q vimmed \(b.path("k"))"))
                rm k
                \(shellWait(until: "! test -e \(b.path("k"))"))
                sleep 0.3
                kill $watcher $stream
                wait
                timeout 1 \(kvsfsBinary) events --since 2 \(b.mountpoint) > \(dir.path)/resumed
                echo "resumed=$(grep -o '"cursor":[0-9]*' \(dir.path)/resumed | tr '\\n' ' ')"
                echo "ls-a=$(ls -A \(a.mountpoint) | tr '\\n' ' ')"
                echo "ls-b=$(ls -A \(b.mountpoint) | tr '\\n' ' ')"
                cat \(dir.path)/inotify
                cat \(dir.path)/stream
                """, timeout: 90)
            #expect(result.status == 0, "\(result)")
            let lines = result.standardOutput.split(separator: "\n").map(String.init)
            let inotify = lines.filter { $0.hasSuffix(" k") }
            #expect(inotify.first == "CREATE k", "\(result)")
            #expect(inotify.filter { $0 == "CLOSE_WRITE,CLOSE k" }.count == 4, "create, printf, sed -i and vim: one write each")
            #expect(inotify.filter { $0 == "CREATE k" }.count == 1, "an editor's save is not a delete and a create elsewhere")
            #expect(inotify.last == "DELETE k")
            #expect(inotify.filter { $0 == "DELETE k" }.count == 1)
            #expect(!lines.contains { $0.contains("sed") && !$0.hasPrefix("{") && !$0.hasPrefix("ls") }, "no sed temporary file reaches B")
            #expect(lines.contains("ls-b="), "\(result)")
            let stream = lines.filter { $0.hasPrefix("{") }
            #expect(stream.count == 5, "\(result)")
            #expect(stream.allSatisfy { $0.contains(#""reason":"server-change""#) && $0.contains(#""keys":["k"]"#) })
            // Numbered one after another; a reader resuming after 2 gets every later one.
            let numbers = stream.compactMap { line in line.firstMatch(of: /"cursor":(\d+)/).flatMap { Int($0.1) } }
            #expect(numbers.count == 5 && zip(numbers, numbers.dropFirst()).allSatisfy { $1 == $0 + 1 }, "\(stream)")
            let resumed = lines.first { $0.hasPrefix("resumed=") }?.dropFirst("resumed=".count)
                .split(separator: " ").compactMap { Int($0.dropFirst(#""cursor":"#.count)) }
            #expect(resumed == numbers.last.map { Array(3...$0) }, "\(result)")
        }
    }

    @Test("fsync of the mount's root returns once the remote holds every change pending: its file has them at once, and they read synced")
    func fsyncOfRootWaitsForTheRemote() throws {
        try withTwoMounts { (a, _, dir) throws in
            let result = try shell("""
                for i in $(seq 20); do echo "value-$i" > \(a.mountpoint)/k$i || exit 8; done
                sync \(a.mountpoint); echo "fsync=$?"
                echo "remote=$(sqlite3 \(dir.path)/cloud/cloud.sqlite "SELECT count(*) FROM cloudChange WHERE CAST(value AS TEXT) LIKE '%value-%'")"
                echo "synced=$(for i in $(seq 20); do getfattr --only-values -n user.kvsfs.sync \(a.mountpoint)/k$i; echo; done | sort | uniq -c | tr -s ' ')"
                """)
            #expect(result.standardOutput.contains("fsync=0"), "\(result)")
            #expect(result.standardOutput.contains("remote=20\n"), "every change is in the remote's file when fsync returns: \(result)")
            #expect(result.standardOutput.contains("synced= 20 synced\n"), "\(result)")
        }
    }

    @Test("an offline mount keeps its writes pending, kvsfs sync fails clearly, and both catch up once the remote is reachable")
    func offlineCatchUp() throws {
        try withTwoMounts(offline: true) { (a, b, dir) throws in
            let result = try shell("""
                echo from-a > \(a.path("fromA"))
                \(kvsfsBinary) sync \(a.mountpoint)
                echo from-b > \(b.path("fromB"))
                echo "pending=$(getfattr --only-values -n user.kvsfs.sync \(b.path("fromB")))"
                \(kvsfsBinary) sync \(b.mountpoint); echo "offline-sync=$?"
                sync \(b.mountpoint); echo "offline-fsync=$?"
                ln -s \(dir.path)/cloud \(dir.path)/link
                \(kvsfsBinary) sync \(b.mountpoint); echo "online-sync=$?"
                echo "synced=$(getfattr --only-values -n user.kvsfs.sync \(b.path("fromB")))"
                \(kvsfsBinary) get \(b.path("fromA"))
                \(shellWait(until: "test -e \(a.path("fromB"))"))
                \(kvsfsBinary) get \(a.path("fromB"))
                timeout 1 \(kvsfsBinary) events --all \(b.mountpoint)
                """, timeout: 60)
            #expect(result.standardOutput.contains("pending=pending"), "\(result)")
            #expect(result.standardOutput.contains("offline-sync=1"))
            #expect(result.standardOutput.contains("offline-fsync=1"), "fsync of the root reports it too")
            #expect(result.standardError.contains("sync failed: the remote cannot be reached"), "\(result)")
            #expect(result.standardError.contains("cannot be reached"))
            #expect(result.standardOutput.contains("online-sync=0"))
            #expect(result.standardOutput.contains("synced=synced"))
            #expect(result.standardOutput.contains("from-a\n"))
            #expect(result.standardOutput.contains("from-b\n"))
            #expect(result.standardOutput.contains(#""keys":["fromA"],"reason":"initial-sync""#))
        }
    }

    @Test("a write the remote refuses for the store's quota is rolled back on its mount, with reason quota-violation")
    func quotaViolation() throws {
        try withTwoMounts(offline: true, extraArguments: ["--quota-total", "1000"]) { (a, b, dir) throws in
            let result = try shell("""
                printf '%0600d' 1 > \(a.path("first"))
                \(kvsfsBinary) sync \(a.mountpoint)
                printf '%0600d' 2 > \(b.path("second")); echo "local-write=$?"
                \(shellWatch(b.mountpoint, events: "delete", into: "\(dir.path)/inotify", seconds: 20))
                ln -s \(dir.path)/cloud \(dir.path)/link
                \(kvsfsBinary) sync \(b.mountpoint); echo "sync=$?"
                sleep 0.2
                kill $watcher; wait
                echo "ls-b=$(ls \(b.mountpoint) | tr '\\n' ' ')"
                cat \(dir.path)/inotify
                timeout 1 \(kvsfsBinary) events --all \(b.mountpoint)
                """, timeout: 60)
            #expect(result.standardOutput.contains("local-write=0"), "\(result)")
            #expect(result.standardOutput.contains("sync=0"))
            #expect(result.standardOutput.contains("ls-b=first \n"), "the refused key is gone, the remote's value is there: \(result)")
            #expect(result.standardOutput.contains("DELETE second\n"), "the rollback passes through the mount")
            #expect(result.standardOutput.contains(#""keys":["second"],"message":"#))
            #expect(result.standardOutput.contains(#""reason":"quota-violation""#))
        }
    }

    @Test("a change written offline survives kill -9 of its daemon and reaches the other mount after a restart")
    func pendingSurvivesCrash() throws {
        try withTwoMounts(offline: true) { (a, b, dir) throws in
            let written = try shell("echo survivor > \(b.path("k")); getfattr --only-values -n user.kvsfs.sync \(b.path("k"))")
            #expect(written.standardOutput == "pending", "\(written)")
            b.crash()
            try FileManager.default.createSymbolicLink(atPath: dir.path + "/link", withDestinationPath: dir.path + "/cloud")
            let restarted = try DaemonMount(mountpoint: b.mountpoint, dataDirectory: b.dataDirectory,
                                            extraArguments: ["--remote", "file://\(dir.path)/link/cloud.sqlite"])
            defer { restarted.stop() }
            let result = try shell("""
                \(kvsfsBinary) sync \(restarted.mountpoint); echo "sync=$?"
                \(shellWait(until: "test -e \(a.path("k"))"))
                \(kvsfsBinary) get \(a.path("k"))
                """, timeout: 60)
            #expect(result.standardOutput == "sync=0\nsurvivor\n", "\(result)")
        }
    }
}
