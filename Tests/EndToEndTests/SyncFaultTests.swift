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
        try token.write(toFile: dir.path + "/token", atomically: true, encoding: .utf8)
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
}
