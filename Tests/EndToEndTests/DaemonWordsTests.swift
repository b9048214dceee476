import Foundation
import KVTestSupport
import Testing

/// What a person reads when sync fails: for each fault, the exact words in `kvsfs status`, in
/// `kvsfs sync`'s error, in the mount's log (said once, not once per retry), in the event log
/// and from the server; and the errno fsync of the mount's root fails with.
@Suite("The daemons' words", .serialized)
struct DaemonWordsTests {
    /// A mount of `remote` with `token`, in `dir`.
    private func mount(_ dir: TemporaryDirectory, remote: String, token: String, extraArguments: [String] = []) throws -> DaemonMount {
        try writeTokenFile(token, to: dir.path + "/token")
        return try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                               extraArguments: ["--remote", remote, "--token-file", dir.path + "/token"] + extraArguments)
    }

    /// `kvsfs sync` twice (so that the engine retries), the status line, and the events logged.
    private func observe(_ daemon: DaemonMount) throws -> (sync: CommandResult, reachable: String, events: String) {
        _ = try shell("echo '<string>x</string>' > \(daemon.path("k"))")
        let sync = try run(kvsfsBinary, ["sync", daemon.mountpoint], timeout: 90)
        _ = try run(kvsfsBinary, ["sync", daemon.mountpoint], timeout: 90)
        let status = try run(kvsfsBinary, ["status", daemon.mountpoint])
        let reachable = status.standardOutput.split(separator: "\n").first { $0.hasPrefix("reachable:") }
            .map { $0.dropFirst("reachable:".count).trimmingCharacters(in: .whitespaces) } ?? status.description
        let events = (try? String(contentsOfFile: daemon.dataDirectory + "/default.events.jsonl", encoding: .utf8)) ?? ""
        return (sync, reachable, events)
    }

    private func occurrences(of text: String, in log: String) -> Int {
        log.components(separatedBy: text).count - 1
    }

    @Test("nothing listens: connection refused, ECONNREFUSED, said once")
    func connectionRefused() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        let port = ServerProcess.freePort()
        let daemon = try mount(dir, remote: "http://127.0.0.1:\(port)", token: "kvs_a_b")
        defer { daemon.stop() }
        let words = "the remote cannot be reached: connection refused by 127.0.0.1:\(port)"
        let seen = try observe(daemon)
        #expect(seen.sync.status == 1)
        #expect(seen.sync.standardError == "Error: sync failed: \(words)\n", "\(seen.sync)")
        #expect(seen.reachable == "offline: \(words)")
        #expect(try fsyncErrno(daemon.mountpoint) == ECONNREFUSED)
        #expect(occurrences(of: "warning: offline: \(words); writes stay pending until the remote answers\n", in: daemon.logText()) == 1,
                "\(daemon.logText())")
        #expect(seen.events.contains(#""message":"\#(words)","reason":"offline""#), "\(seen.events)")
        #expect(!daemon.logText().contains("errno"), "no library's words: \(daemon.logText())")
    }

    @Test("a wrong token: the mount says the server refused it, EACCES; the server names the token's id, never its secret, once")
    func wrongToken() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        _ = try server.admin(["account", "create", "alice"])
        let daemon = try mount(dir, remote: server.url, token: "kvs_madeup_notasecret")
        defer { daemon.stop() }
        let seen = try observe(daemon)
        #expect(seen.sync.standardError == "Error: sync failed: the server refused this token: unknown or revoked token\n", "\(seen.sync)")
        #expect(seen.reachable == "offline: the server refused this token: unknown or revoked token")
        #expect(try fsyncErrno(daemon.mountpoint) == EACCES)
        #expect(occurrences(of: "offline: the server refused this token: unknown or revoked token", in: daemon.logText()) == 1,
                "\(daemon.logText())")
        let said = server.logText()
        #expect(occurrences(of: "warning: refused token madeup: unknown or revoked token\n", in: said) == 1, "\(said)")
        #expect(!said.contains("notasecret"), "the secret is never logged: \(said)")
        #expect(said.contains("info: serving on http://127.0.0.1:\(server.port) (TLS off); database \(dir.path)/server.sqlite\n"), "\(said)")
    }

    @Test("a server at its limit of stores: the mount says so, not that its token was refused; EDQUOT, said once")
    func storeLimit() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite", extraArguments: ["--max-stores-per-account", "2"])
        defer { server.stop() }
        let token = try server.admin(["account", "create", "alice"])
        for store in ["one", "two"] {
            let made = try shell("""
                curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' \
                    --data '{"changes":[]}' \(server.url)/v1/alice/\(store)/changes
                """).standardOutput
            #expect(made == "200", "\(store): \(made)")
        }
        let daemon = try mount(dir, remote: server.url, token: token)
        defer { daemon.stop() }
        let words = "the server holds its limit of 2 stores for account alice (--max-stores-per-account): store alice/default is not made"
        let seen = try observe(daemon)
        #expect(seen.sync.standardError == "Error: sync failed: \(words)\n", "\(seen.sync)")
        #expect(seen.reachable == "offline: \(words)")
        #expect(try fsyncErrno(daemon.mountpoint) == EDQUOT)
        #expect(occurrences(of: "offline: \(words)", in: daemon.logText()) == 1, "\(daemon.logText())")
    }

    @Test("a server restart: offline with the cause, then back online; the server says it stops and starts")
    func serverRestart() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        let daemon = try mount(dir, remote: server.url, token: try server.admin(["account", "create", "alice"]))
        defer { daemon.stop() }
        #expect(try run(kvsfsBinary, ["sync", daemon.mountpoint]).status == 0)
        #expect(server.stop() == 0)
        let down = try observe(daemon)
        #expect(down.sync.status == 1)
        try server.start()
        let back = try run(kvsfsBinary, ["sync", daemon.mountpoint], timeout: 90)
        #expect(back.status == 0, "\(back)")
        let cause = "the remote cannot be reached: connection refused by 127.0.0.1:\(server.port)"
        let log = daemon.logText()
        #expect(log.contains("info: online: in sync with \(server.url)\n"), "\(log)")
        #expect(occurrences(of: "warning: offline: \(cause);", in: log) == 1, "\(log)")
        #expect(log.contains("info: online: back in sync with \(server.url), after: \(cause)\n"), "\(log)")
        let said = server.logText()
        #expect(said.contains("notice: SIGTERM: finishing the requests in progress, then stopping\n"), "\(said)")
        #expect(said.contains("info: stopped\n"), "\(said)")
        #expect(occurrences(of: "info: serving on http://127.0.0.1:\(server.port)", in: said) == 2, "\(said)")
    }

    @Test("a TLS certificate the mount does not trust: said so with the option that mends it, ECONNABORTED")
    func untrustedCertificate() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        try makeSelfSignedCertificate(in: dir.path)
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite",
                                       extraArguments: ["--tls-cert", dir.path + "/cert.pem", "--tls-key", dir.path + "/key.pem"])
        defer { server.stop() }
        let daemon = try mount(dir, remote: server.url, token: try server.admin(["account", "create", "alice"]))
        defer { daemon.stop() }
        let words = "the remote cannot be reached: the TLS certificate of localhost could not be verified (it is not signed by a "
            + "trusted CA, or has expired); give the CA that signed it with --tls-ca"
        let seen = try observe(daemon)
        #expect(seen.sync.standardError == "Error: sync failed: \(words)\n", "\(seen.sync)")
        #expect(seen.reachable == "offline: \(words)")
        #expect(try fsyncErrno(daemon.mountpoint) == ECONNABORTED)
        #expect(occurrences(of: "offline: \(words)", in: daemon.logText()) == 1, "\(daemon.logText())")
        #expect(server.logText().contains("info: serving on https://localhost:\(server.port) (TLS on)")
                || server.logText().contains("info: serving on https://127.0.0.1:\(server.port) (TLS on)"), "\(server.logText())")
    }

    @Test("unmounting while a round waits on the remote says nothing false of the remote")
    func unmountDuringRound() throws {
        let dir = TemporaryDirectory("kvsfs-words")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        let daemon = try mount(dir, remote: server.url, token: try server.admin(["account", "create", "alice"]))
        #expect(try run(kvsfsBinary, ["sync", daemon.mountpoint]).status == 0)
        let pid = server.process.processIdentifier
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        _ = try shell("echo '<string>x</string>' > \(daemon.path("k")); sleep 1")  // a push round now waits on the stopped server
        #expect(daemon.stop() == 0)
        let log = daemon.logText()
        #expect(!log.contains("offline"), "the remote did not fail; the mount stopped waiting: \(log)")
        #expect(!log.contains("Cancellation"), "\(log)")
        #expect(log.contains("unmounted cleanly"), "\(log)")
    }

    @Test("PostgreSQL down: kvsfs serve names where it looked and why, in words")
    func postgresDown() throws {
        let port = ServerProcess.freePort()
        let result = try run(kvsfsBinary, ["serve", "--listen", "127.0.0.1:\(ServerProcess.freePort())",
                                           "--database", "postgres://kvsfs@127.0.0.1:\(port)/kvsfs"], timeout: 60)
        #expect(result.status == 1)
        #expect(result.standardError.hasSuffix(
            "Error: cannot open the database: PostgreSQL unreachable at 127.0.0.1:\(port): connection refused by 127.0.0.1:\(port)\n"),
            "\(result)")
    }
}
