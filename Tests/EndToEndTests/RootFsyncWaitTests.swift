import Foundation
import Glibc
import KVTestSupport
import Testing

/// A TCP port on loopback that takes connections and never answers: a remote that hangs.
private final class SilentRemote {
    let port: Int
    private let listener: Int32

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) == 0 && getsockname(listener, $0, &length) == 0 }
        }
        guard listener >= 0, bound, listen(listener, 64) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(listener)
            throw SilentRemoteError(reason: reason)
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { Glibc.close(listener) }
}

private struct SilentRemoteError: Error, CustomStringConvertible {
    let reason: String
    var description: String { "cannot listen on loopback: \(reason)" }
}

/// fsync of the mount's root waits on the remote without holding one of the daemon's FUSE
/// request threads: the reply is sent when the push ends, or when the mount ends first.
@Suite("fsync of the root waiting on the remote", .serialized)
struct RootFsyncWaitTests {
    @Test("12 fsyncs of the root wait on a silent remote, none refused; a read answers meanwhile; unmounting answers them all at once")
    func fsyncsWaitAndEndWithTheMount() throws {
        let dir = TemporaryDirectory("kvsfs-rootfsync")
        defer { dir.remove() }
        let remote = try SilentRemote()
        defer { remote.close() }
        try writeTokenFile("kvs_a_b", to: dir.path + "/token")
        let daemon = try DaemonMount(mountpoint: try dir.privateSubdirectory("mnt"), dataDirectory: try dir.privateSubdirectory("data"),
                                     extraArguments: ["--remote", "http://127.0.0.1:\(remote.port)", "--token-file", dir.path + "/token"])
        defer { daemon.stop() }
        _ = try shell("echo '<string>kept</string>' > \(daemon.path("k"))")
        // Threads of one process, each with its own descriptor of the root: the kernel sends their
        // fsyncs one at a time (it holds the directory's lock for each), the first waiting in the
        // daemon. A read of a key needs no lock of the directory and is answered meanwhile.
        let result = try run("/usr/bin/python3", ["-c", """
            import os, signal, sys, threading, time
            mountpoint, daemon, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
            ended = [None] * 12
            def fsync(i):
                fd = os.open(mountpoint, os.O_RDONLY)
                try:
                    os.fsync(fd); ended[i] = (0, time.monotonic())
                except OSError as e:
                    ended[i] = (e.errno, time.monotonic())
            threads = [threading.Thread(target=fsync, args=(i,), daemon=True) for i in range(12)]
            for t in threads: t.start()
            time.sleep(3)
            print("ended-while-waiting=%d" % sum(e is not None for e in ended))
            read = []
            def cat():
                start = time.monotonic()
                with open(os.path.join(mountpoint, key), "rb") as f: content = f.read()
                read.append((b"<string>kept</string>" in content, time.monotonic() - start))
            reader = threading.Thread(target=cat, daemon=True); reader.start(); reader.join(timeout=5)
            print("read=%s" % (read[0][0] if read else "hung"))
            print("ended-after-read=%d" % sum(e is not None for e in ended))
            stopped = time.monotonic()
            os.kill(daemon, signal.SIGTERM)
            for t in threads: t.join(timeout=20)
            print("hung=%d" % sum(e is None for e in ended))
            print("slowest=%d" % max([e[1] - stopped for e in ended if e] or [99]))
            print("succeeded=%d" % sum(e is not None and e[0] == 0 for e in ended))
            sys.stdout.flush()
            os._exit(0)
            """, daemon.mountpoint, String(daemon.process.processIdentifier), "k"], timeout: 90)
        let lines = Set(result.standardOutput.split(separator: "\n").map(String.init))
        #expect(lines.contains("ended-while-waiting=0"), "every fsync waits on the remote; none is refused (EAGAIN) at once: \(result)")
        #expect(lines.contains("read=True"), "a read of a key answers within 5 s while they wait: \(result)")
        #expect(lines.contains("ended-after-read=0"), "\(result)")
        #expect(lines.contains("hung=0"), "\(result)")
        #expect(lines.contains("slowest=0") || lines.contains("slowest=1") || lines.contains("slowest=2"),
                "unmounting answers a waiting fsync at once, not when the remote's 30 s are up: \(result)")
        #expect(lines.contains("succeeded=0"), "no push happened: \(result)")
        let deadline = Date().addingTimeInterval(15)
        while daemon.process.isRunning, Date() < deadline { usleep(50_000) }
        #expect(!daemon.process.isRunning, "the daemon ends within 15 s of SIGTERM")
        #expect(daemon.logText().contains("unmounted cleanly"), "\(daemon.logText())")
        #expect(!daemon.logText().contains("fuse:"), "no reply is sent through a session that is gone: \(daemon.logText())")
    }
}
