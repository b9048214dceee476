import Foundation
import KVTestSupport
import Testing

/// A server the mount is pointed at is not trusted: what it says and asks is bounded before
/// the mount keeps or shows it, and nothing it does kills or stalls the mount.
@Suite("A hostile sync server", .serialized)
struct HostileServerTests {
    /// A fake server on a loopback port, answering every request as `mode` says; it counts the
    /// requests it was sent in `countFile`.
    final class FakeServer {
        let port = ServerProcess.freePort()
        let countFile: String
        private(set) var pid: Int32 = 0

        init(_ mode: String, in dir: TemporaryDirectory) throws {
            countFile = dir.path + "/requests"
            let script = dir.path + "/fake.py"
            try """
                import json, os, socket, sys, threading, time
                os.closerange(3, 4096)  # the test's pipes, which must see their end when the shell that started this ends
                port, mode, count_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
                listener = socket.socket()
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen(64)
                count = 0
                lock = threading.Lock()
                def answer(connection):
                    global count
                    try:
                        data = b""
                        while b"\\r\\n\\r\\n" not in data:
                            chunk = connection.recv(65536)
                            if not chunk:
                                return
                            data += chunk
                        # The whole request is read before the answer: closing a socket with
                        # unread bytes sends a reset, which can reach the mount before the answer.
                        head, _, body = data.partition(b"\\r\\n\\r\\n")
                        length = 0
                        for line in head.split(b"\\r\\n")[1:]:
                            name, _, value = line.partition(b":")
                            if name.strip().lower() == b"content-length":
                                length = int(value.strip())
                        while len(body) < length:
                            chunk = connection.recv(65536)
                            if not chunk:
                                return
                            body += chunk
                        with lock:
                            count += 1
                            open(count_file, "w").write(str(count))
                        if mode in ("huge-retry", "zero-retry"):
                            after = b"9223372036854775807" if mode == "huge-retry" else b"0"
                            connection.sendall(b"HTTP/1.1 503 Service Unavailable\\r\\nConnection: close\\r\\nRetry-After: " + after + b"\\r\\nContent-Length: 0\\r\\n\\r\\n")
                        elif mode == "words":
                            body = json.dumps({"error": {"message": "evil\\n<2>kvsfs[1] critical: FORGED\\r\\x1b[31mred " + "X" * 20000}}).encode()
                            connection.sendall(b"HTTP/1.1 401 Unauthorized\\r\\nConnection: close\\r\\nContent-Type: application/json\\r\\nContent-Length: "
                                               + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
                        elif mode == "not-kvsfs":
                            page = b"<html><body>Welcome to the proxy</body></html>"
                            connection.sendall(b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Type: text/html\\r\\nContent-Length: "
                                               + str(len(page)).encode() + b"\\r\\n\\r\\n" + page)
                        elif mode == "stalled-body":
                            connection.sendall(b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Type: application/json\\r\\nContent-Length: 1000\\r\\n\\r\\n{")
                            time.sleep(120)
                        connection.shutdown(socket.SHUT_WR)
                        connection.settimeout(5)
                        while connection.recv(65536):
                            pass
                    except OSError:
                        pass
                    finally:
                        connection.close()
                while True:
                    connection, _ = listener.accept()
                    threading.Thread(target=answer, args=(connection,), daemon=True).start()
                """.write(toFile: script, atomically: true, encoding: .utf8)
            let started = try shell("""
                python3 \(script) \(port) \(mode) \(countFile) > /dev/null 2>&1 < /dev/null & echo $!
                \(shellWait(until: "bash -c '</dev/tcp/127.0.0.1/\(port)' 2>/dev/null"))
                """)
            pid = Int32(started.standardOutput.split(separator: "\n").first ?? "") ?? 0
        }

        var url: String { "http://127.0.0.1:\(port)" }
        var requests: Int { Int((try? String(contentsOfFile: countFile, encoding: .utf8)) ?? "0") ?? 0 }

        func stop() {
            if pid > 0 { kill(pid, SIGKILL) }
        }
    }

    private func mount(_ server: FakeServer, in dir: TemporaryDirectory) throws -> DaemonMount {
        try writeTokenFile("kvs_a_b", to: dir.path + "/token")
        return try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                               extraArguments: ["--remote", server.url, "--token-file", dir.path + "/token"])
    }

    @Test("a Retry-After of 2^63-1 seconds is waited an hour at most, and the mount lives on")
    func hugeRetryAfter() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        let server = try FakeServer("huge-retry", in: dir)
        defer { server.stop() }
        let daemon = try mount(server, in: dir)
        defer { daemon.stop() }
        #expect(eventually(within: 20) { server.requests >= 1 })
        sleep(2)
        #expect(daemon.process.isRunning, "the mount lives: \(daemon.logText())")
        let status = try run(kvsfsBinary, ["status", daemon.mountpoint])
        #expect(status.standardOutput.contains("the remote asked to retry later (in 3600.0 seconds)"), "\(status)")
    }

    @Test("a Retry-After of 0 does not make the mount ask again at once: its own backoff applies")
    func zeroRetryAfter() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        let server = try FakeServer("zero-retry", in: dir)
        defer { server.stop() }
        let daemon = try mount(server, in: dir)
        defer { daemon.stop() }
        sleep(4)
        #expect(server.requests < 40, "asked \(server.requests) times in 4 s")
        #expect(daemon.process.isRunning)
    }

    @Test("a refusal's words are one line of at most 1000 characters in sync's error, the xattr and the event log")
    func boundedWords() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        let server = try FakeServer("words", in: dir)
        defer { server.stop() }
        let daemon = try mount(server, in: dir)
        defer { daemon.stop() }
        let sync = try run(kvsfsBinary, ["sync", daemon.mountpoint], timeout: 60)
        #expect(sync.status == 1)
        #expect(sync.standardError.hasPrefix("Error: sync failed: the server refused this token: evil <2>kvsfs[1] critical: FORGED  [31mred XXX"),
                "\(sync)")
        #expect(sync.standardError.filter { $0 == "\n" }.count == 1 && !sync.standardError.contains("\u{1B}"), "one line: \(sync)")
        #expect(sync.standardError.count < 1100, "\(sync.standardError.count) characters")
        let attribute = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.sync", daemon.mountpoint])
        #expect(!attribute.standardOutput.contains("\n") && attribute.standardOutput.count < 1200, "\(attribute.standardOutput.count)")
        let events = (try? String(contentsOfFile: daemon.dataDirectory + "/default.events.jsonl", encoding: .utf8)) ?? ""
        #expect(events.contains("FORGED") && events.split(separator: "\n").allSatisfy { $0.count < 1400 }, "\(events.count)")
    }

    @Test("a server that answers outside the protocol is said to be one that cannot serve (EIO), not one out of reach")
    func notTheProtocol() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        let server = try FakeServer("not-kvsfs", in: dir)
        defer { server.stop() }
        let daemon = try mount(server, in: dir)
        defer { daemon.stop() }
        let sync = try run(kvsfsBinary, ["sync", daemon.mountpoint])
        #expect(sync.status == 1, "\(sync)")
        #expect(sync.standardError.contains("the remote could not serve: http://127.0.0.1:\(server.port)"), "\(sync)")
        #expect(sync.standardError.contains("sent an answer that is not the protocol's"), "\(sync)")
        #expect(!sync.standardError.contains("cannot be reached"), "\(sync)")
        let fsync = try shell("""
            echo pending > \(daemon.path("k"))
            python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' \(daemon.mountpoint) 2>&1 | tail -1
            """)
        #expect(fsync.standardOutput.contains("[Errno 5] Input/output error"), "\(fsync)")
    }

    @Test("a body that stops coming ends the request after its time: the mount says the remote timed out")
    func stalledBody() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        let server = try FakeServer("stalled-body", in: dir)
        defer { server.stop() }
        let daemon = try mount(server, in: dir)
        defer { daemon.stop() }
        let offline = eventually(within: 60) {
            (try? run(kvsfsBinary, ["status", daemon.mountpoint]))?.standardOutput.contains("did not send the whole answer within 30 s") == true
        }
        #expect(offline, "\(daemon.logText())")
    }

    @Test("a remote whose port is out of range, or a FIFO as the CA file, is refused before anything is mounted")
    func refusedBeforeMounting() throws {
        let dir = TemporaryDirectory("kvsfs-hostile")
        defer { dir.remove() }
        try writeTokenFile("kvs_a_b", to: dir.path + "/token")
        let mountpoint = dir.subdirectory("mnt")
        defer { if DaemonMount.isMounted(mountpoint) { _ = try? run("/bin/fusermount3", ["-u", mountpoint], timeout: 10) } }
        for remote in ["http://127.0.0.1:99999", "https://127.0.0.1:65536", "http://127.0.0.1:-1"] {
            let result = try run(kvsfsBinary, ["mount", mountpoint, "--data-dir", dir.subdirectory("data"), "--remote", remote,
                                               "--token-file", dir.path + "/token"], timeout: 15)
            #expect(result.status != 0 && result.standardError.contains("--remote must be"), "\(remote): \(result)")
            #expect(!DaemonMount.isMounted(mountpoint))
        }
        let fifo = dir.path + "/ca.pem"
        #expect(mkfifo(fifo, 0o600) == 0)
        let started = Date()
        let viaFifo = try run(kvsfsBinary, ["mount", mountpoint, "--data-dir", dir.subdirectory("data"), "--remote", "https://127.0.0.1:1",
                                            "--token-file", dir.path + "/token", "--tls-ca", fifo], timeout: 15)
        #expect(viaFifo.standardError == "Error: the CA certificate \(fifo) is not a regular file\n", "\(viaFifo)")
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(!DaemonMount.isMounted(mountpoint))
    }
}
