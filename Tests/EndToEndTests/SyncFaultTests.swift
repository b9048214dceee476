import Foundation
import KVTestSupport
import Testing

/// Sync under faults around the mount: a remote that stalls while callers wait on it.
@Suite("Sync faults", .serialized)
struct SyncFaultTests {
    @Test("100 concurrent kvsfs sync against a stalled server all end, and the mount stays responsive and converges")
    func concurrentSyncsAgainstStalledServer() throws {
        let dir = TemporaryDirectory("kvsfs-faults")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        let token = try server.admin(["account", "create", "alice"])
        try writeTokenFile(token, to: dir.path + "/token")
        func mount(_ name: String) throws -> DaemonMount {
            try DaemonMount(mountpoint: dir.subdirectory(name), dataDirectory: dir.subdirectory("data-" + name),
                            extraArguments: ["--remote", server.url, "--token-file", dir.path + "/token"])
        }
        let a = try mount("a")
        defer { a.stop() }
        let b = try mount("b")
        defer { b.stop() }
        let pid = server.process.processIdentifier
        defer { kill(pid, SIGCONT) }
        let result = try shell("""
            \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
            kill -STOP \(pid)
            for i in $(seq 20); do echo "v$i" > \(b.path("k"))$i; done
            for i in $(seq 100); do ( timeout 100 \(kvsfsBinary) sync \(a.mountpoint) >/dev/null 2>&1; echo $? > \(dir.path)/status.$i ) & done
            sleep 3
            kill -CONT \(pid)
            wait
            echo "ended=$(cat \(dir.path)/status.* | wc -l) hung=$(grep -lx 124 \(dir.path)/status.* | wc -l)"
            timeout 10 ls \(a.mountpoint) > /dev/null && echo responsive
            \(kvsfsBinary) sync \(b.mountpoint) && \(shellWait(until: "test -e \(a.path("k20"))"))
            timeout 10 cat \(a.path("k20")) | grep -o v20
            """, timeout: 180)
        #expect(result.standardOutput.contains("ended=100 hung=0"), "\(result)")
        #expect(result.standardOutput.contains("responsive\n"), "\(result)")
        #expect(result.standardOutput.hasSuffix("v20\n"), "\(result)")
        #expect(a.process.isRunning)
    }

    @Test("an emptied file remote never wipes the mount: every value, pending ones included, is pushed to it again")
    func emptiedRemote() throws {
        let dir = TemporaryDirectory("kvsfs-faults")
        defer { dir.remove() }
        let remoteDirectory = dir.subdirectory("remote")
        let remote = ["--remote", "file://\(remoteDirectory)/cloud.sqlite"]
        let first = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        _ = try shell("for i in $(seq 10); do echo \"v$i\" > \(first.path("synced"))$i; done; \(kvsfsBinary) sync \(first.mountpoint)")
        #expect(first.stop() == 0)
        try FileManager.default.moveItem(atPath: remoteDirectory, toPath: remoteDirectory + ".gone")  // the remote cannot be reached
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let result = try shell("""
            for i in $(seq 5); do echo "p$i" > \(a.path("pending"))$i; done
            mkdir \(remoteDirectory) && : > \(remoteDirectory)/cloud.sqlite   # and comes back empty
            \(kvsfsBinary) sync \(a.mountpoint); echo "sync=$?"
            echo "files=$(ls \(a.mountpoint) | wc -l)"
            getfattr --only-values -n user.kvsfs.sync \(a.mountpoint); echo
            timeout 1 \(kvsfsBinary) events --all \(a.mountpoint) | grep -o '"reason":"[a-z-]*"' | sort -u
            """, timeout: 60)
        #expect(result.standardOutput.contains("sync=0\nfiles=15\n"), "\(result)")
        #expect(result.standardOutput.contains("synced; remote reset at"), "\(result)")
        #expect(result.standardOutput.contains("15 local changes pushed again"), "\(result)")
        #expect(result.standardOutput.contains(#""reason":"remote-reset""#), "\(result)")
        #expect(!result.standardOutput.contains("account-change"), "\(result)")
        // Another mount of the emptied remote gets every value back from it.
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        let other = try shell("\(kvsfsBinary) sync \(b.mountpoint) && ls \(b.mountpoint) | wc -l && cat \(b.path("pending5")) | grep -o p5")
        #expect(other.standardOutput == "15\np5\n", "\(other)")
    }

    @Test("a file remote replaced by another file while two mounts run is noticed at their next kvsfs sync, and gets every value back")
    func replacedRemote() throws {
        let dir = TemporaryDirectory("kvsfs-faults")
        defer { dir.remove() }
        let remoteDirectory = dir.subdirectory("remote")
        let remote = ["--remote", "file://\(remoteDirectory)/cloud.sqlite"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        // A restore by mv: the database and its log moved away whole, a fresh file put in place.
        let result = try shell("""
            for i in $(seq 10); do echo "a$i" > \(a.path("a"))$i; echo "b$i" > \(b.path("b"))$i; done
            \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(a.mountpoint) || exit 9
            mkdir \(dir.path)/moved && mv \(remoteDirectory)/cloud.sqlite* \(dir.path)/moved/
            : > \(remoteDirectory)/cloud.sqlite && chmod 600 \(remoteDirectory)/cloud.sqlite
            \(kvsfsBinary) sync \(a.mountpoint); echo "sync a=$?"
            \(kvsfsBinary) sync \(b.mountpoint); echo "sync b=$?"
            timeout 1 \(kvsfsBinary) events --all \(a.mountpoint) | grep -o '"reason":"remote-reset"' | sort -u
            """, timeout: 60)
        #expect(result.standardOutput.contains("sync a=0\nsync b=0\n"), "\(result)")
        #expect(result.standardOutput.contains(#""reason":"remote-reset""#), "the mount says so: \(result)")
        // A third mount of the new remote gets every value from it.
        let c = try DaemonMount(mountpoint: dir.subdirectory("c"), dataDirectory: dir.subdirectory("data-c"), extraArguments: remote)
        defer { c.stop() }
        let held = try shell("\(kvsfsBinary) sync \(c.mountpoint) && ls \(c.mountpoint) | wc -l")
        #expect(held.standardOutput == "20\n", "the new remote gets every value: \(held)")
    }

    @Test("kvsfs sync --replace-with-remote makes the mount hold the remote's values and says so in the event stream and user.kvsfs.sync")
    func replaceWithRemote() throws {
        let dir = TemporaryDirectory("kvsfs-faults")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("remote"))/cloud.sqlite"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        // What the replacement discards is shown by the sync tests (RestoredRemoteTests): here,
        // the command, the mount's applier, the event and the attribute.
        let result = try shell("""
            echo one > \(b.path("shared")) && \(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) sync \(a.mountpoint) || exit 8
            echo two > \(b.path("shared")) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
            \(kvsfsBinary) sync --replace-with-remote \(a.mountpoint); echo "replace=$?"
            \(kvsfsBinary) get \(a.path("shared"))
            getfattr --only-values -n user.kvsfs.sync \(a.mountpoint); echo
            timeout 1 \(kvsfsBinary) events --all \(a.mountpoint) | grep -o 'replaced by the remote[^"]*'
            \(kvsfsBinary) sync --replace-with-remote \(dir.path); echo "not a mount=$?"
            """, timeout: 60)
        #expect(result.standardOutput.contains("replace=0\ntwo\nsynced; remote reset at"), "\(result)")
        #expect(result.standardOutput.contains("replaced by the remote's values on request"), "\(result)")
        #expect(result.standardOutput.contains("not a mount=1"), "\(result)")
    }
}
