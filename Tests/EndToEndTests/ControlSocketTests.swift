import Foundation
import KVTestSupport
import Testing

/// The control socket's bounds: what a peer that talks and sends nothing, or announces more
/// than it sends, can cost the mount.
@Suite("The control socket's bounds", .serialized)
struct ControlSocketTests {
    /// A python3 script that opens `count` connections to the socket at its first argument,
    /// sends each the bytes of the python expression `preamble`, prints "open", and holds them
    /// until killed.
    private func holder(count: Int, preamble: String) -> String {
        """
        import socket, sys, time
        held = []
        for _ in range(\(count)):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(sys.argv[1])
            except BlockingIOError:
                pass
            try:
                s.send(\(preamble))
            except OSError:
                pass
            held.append(s)
        print("open", flush=True)
        time.sleep(60)
        """
    }

    @Test("unmount ends the daemon at once, though idle peers hold the control socket")
    func idlePeersDoNotHoldUnmount() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { daemon, dir in
            let socketPath = daemon.dataDirectory + "/default.control"
            try holder(count: 9, preamble: "b''").write(toFile: dir.path + "/hold.py", atomically: true, encoding: .utf8)
            let result = try shell("""
                python3 \(dir.path)/hold.py \(socketPath) > \(dir.path)/held & holder=$!
                \(shellWait(until: "grep -q open \(dir.path)/held"))
                start=$(date +%s%N)
                fusermount3 -u \(daemon.mountpoint)
                while kill -0 \(daemon.process.processIdentifier) 2>/dev/null; do sleep 0.05; done
                echo "ended_ms=$(( ($(date +%s%N) - start) / 1000000 ))"
                kill $holder
                """, timeout: 90)
            let milliseconds = result.standardOutput.split(separator: "=").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            #expect(milliseconds.map { $0 < 5000 } == true, "the daemon ended within 5 s of the unmount: \(result)")
        }
    }

    @Test("a peer that announces a 64 MiB import and stalls grows the daemon by far less than that")
    func announcedImportIsNotAllocated() throws {
        try withDaemon(extraArguments: ["--remote", "none"]) { daemon, dir in
            let socketPath = daemon.dataDirectory + "/default.control"
            // An import request, then a frame header announcing 64 MiB and nothing after it.
            let request = #"b'{"command":"import"}'"#
            try holder(count: 1, preamble: "len(\(request)).to_bytes(4, 'big') + \(request) + (64 << 20).to_bytes(4, 'big')").write(toFile: dir.path + "/hold.py", atomically: true, encoding: .utf8)
            let pid = daemon.process.processIdentifier
            let result = try shell("""
                before=$(awk '/^VmRSS/ {print $2}' /proc/\(pid)/status)
                python3 \(dir.path)/hold.py \(socketPath) > \(dir.path)/held & holder=$!
                \(shellWait(until: "grep -q open \(dir.path)/held"))
                sleep 1
                after=$(awk '/^VmRSS/ {print $2}' /proc/\(pid)/status)
                echo "grown_kib=$((after - before))"
                kill $holder
                """, timeout: 60)
            let grown = result.standardOutput.split(separator: "=").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            #expect(grown.map { $0 < 16 << 10 } == true, "grew by less than 16 MiB: \(result)")
        }
    }
}
