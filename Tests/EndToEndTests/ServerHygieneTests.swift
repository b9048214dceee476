import Foundation
import KVStore
import KVTestSupport
import Testing

/// The sync server's doors: how it reads a token, how long it keeps a connection that sends
/// nothing whole, what it refuses in a push, who may read its database, and what a mount's
/// user sees when the token is refused.
@Suite("The sync server's doors", .serialized)
struct ServerHygieneTests {
    /// A server on a fresh SQLite database with account alice; its token is in `dir/token`.
    private func withServer(_ extraArguments: [String] = [], _ body: (ServerProcess, String, TemporaryDirectory) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-doors")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite", extraArguments: extraArguments)
        defer { server.stop() }
        let token = try server.admin(["account", "create", "alice"])
        try writeTokenFile(token, to: dir.path + "/token")
        try body(server, token, dir)
    }

    /// `curl` printing the status code after the body.
    private func curl(_ arguments: String, _ server: ServerProcess, _ path: String) throws -> String {
        try shell("curl -s -w ' %{http_code}' \(arguments) '\(server.url)\(path)'").standardOutput
    }

    @Test("the Bearer scheme is read in any case and after several spaces; another header is 401 with its reason and a challenge")
    func bearerScheme() throws {
        try withServer { (server, token, _) throws in
            #expect(try curl("-H 'Authorization: bearer \(token)'", server, "/v1/whoami").hasSuffix(" 200"))
            #expect(try curl("-H 'Authorization: BEARER   \(token)'", server, "/v1/whoami").hasSuffix(" 200"))
            let basic = try shell("curl -s -i -H 'Authorization: Basic YWxpY2U6c2VjcmV0' \(server.url)/v1/whoami").standardOutput
            #expect(basic.hasPrefix("HTTP/1.1 401"), "\(basic)")
            #expect(basic.lowercased().contains("www-authenticate: bearer"), "\(basic)")
            #expect(basic.contains("the Authorization header is not Bearer and a token"), "\(basic)")
            let joined = try curl("-H 'Authorization: Bearer \(token), Bearer kvs_x_y'", server, "/v1/whoami")
            #expect(joined.hasSuffix(" 401") && joined.contains("not Bearer and a token"), "\(joined)")
            let missing = try curl("", server, "/v1/whoami")
            #expect(missing.hasSuffix(" 401") && missing.contains("missing Authorization"), "\(missing)")
        }
    }

    @Test("a history mark that does not fit is 409 with the reason; only a token that may write renews the identity, once in ten minutes")
    func historyMarks() throws {
        try withServer { (server, token, _) throws in
            let reader = try server.admin(["token", "create", "alice", "--read-only"])
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let value = Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<string>v</string>\n</plist>\n".utf8)
            let body = #"{"changes":[{"key":"k","value":"\#(value.base64EncodedString())","type":"string","stamp":{"time":\#(now),"counter":0,"device":"d"}}]}"#
            let pushed = try curl("-X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' -d '\(body)'", server,
                                  "/v1/alice/default/changes")
            #expect(pushed.hasSuffix(" 200") && pushed.contains(#""mark":{"#), "\(pushed)")
            func identity() throws -> String {
                try curl("-H 'Authorization: Bearer \(token)'", server, "/v1/alice/default/identity")
            }
            let first = try identity()
            // The mark the push answered fits; one naming another stamp, or a cursor the store
            // has not reached, does not; a malformed one is 400.
            let fits = "mark=1.\(now).0.d&mark-key=k"
            #expect(try curl("-H 'Authorization: Bearer \(reader)'", server, "/v1/alice/default/changes?after=1&\(fits)").hasSuffix(" 200"))
            let other = try curl("-H 'Authorization: Bearer \(reader)'", server, "/v1/alice/default/changes?after=1&mark=1.\(now).0.e&mark-key=k")
            #expect(other.hasSuffix(" 409") && other.contains("but the store holds"), "\(other)")
            #expect(try curl("-H 'Authorization: Bearer \(reader)'", server, "/v1/alice/default/changes?after=0&mark=9.\(now).0.d&mark-key=k")
                .hasSuffix(" 409"))
            #expect(try curl("-H 'Authorization: Bearer \(reader)'", server, "/v1/alice/default/changes?mark=1.x.0.d&mark-key=k").hasSuffix(" 400"))
            #expect(try identity() == first, "a token that may only read renews nothing")
            // A writer's push with a mark that does not fit stores nothing, and renews the identity once.
            let refused = try curl("-X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' -d '{\"changes\":[]}'",
                                   server, "/v1/alice/default/changes?mark=1.\(now).0.e&mark-key=k")
            #expect(refused.hasSuffix(" 409"), "\(refused)")
            let second = try identity()
            #expect(second != first)
            _ = try curl("-H 'Authorization: Bearer \(token)'", server, "/v1/alice/default/changes?after=7")
            #expect(try identity() == second, "at most one renewal in ten minutes")
        }
    }

    @Test("a connection that sends half a request, head or body, is closed within the idle timeout; the server serves on")
    func halfSentRequests() throws {
        try withServer(["--idle-timeout", "1"]) { (server, token, _) throws in
            // Each connection: part of a request, then wait for the server to close it (cat
            // ends) or for 8 s (timeout kills cat: status 124).
            let result = try shell("""
                half() {
                  start=$(date +%s%N)
                  exec 3<>/dev/tcp/127.0.0.1/\(server.port)
                  printf "$1" >&3
                  timeout 8 cat <&3 >/dev/null; status=$?
                  exec 3<&-
                  echo "$2: status=$status ms=$(( ($(date +%s%N) - start) / 1000000 ))"
                }
                half 'GET /v1/whoami HTTP/1.1\\r\\nHost: x\\r\\nAuthoriz' head &
                half 'POST /v1/alice/default/changes HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer \(token)\\r\\nContent-Length: 100\\r\\n\\r\\n{"chan' body &
                half '' silent &
                wait
                curl -s \(server.url)/health
                """, timeout: 30)
            for name in ["head", "body", "silent"] {
                let line = result.standardOutput.split(separator: "\n").first { $0.hasPrefix("\(name):") }.map(String.init) ?? ""
                #expect(line.contains("status=0"), "the server closed the \(name) connection: \(result)")
                let milliseconds = line.split(separator: "=").last.flatMap { Int($0) } ?? .max
                #expect(milliseconds < 5000, "within the 1 s timeout, give or take a busy machine: \(line)")
            }
            #expect(result.standardOutput.hasSuffix("ok\n"), "\(result)")
        }
    }

    @Test("an event stream and a long poll outlast the idle timeout: the stream gets its keep-alives")
    func streamsOutlastTheTimeout() throws {
        try withServer(["--idle-timeout", "1"]) { (server, token, dir) throws in
            let result = try shell("""
                timeout 12 curl -sN -H 'Authorization: Bearer \(token)' '\(server.url)/v1/alice/default/events?after=0' > \(dir.path)/events
                echo "stream=$?"
                curl -s -o /dev/null -w 'poll=%{http_code} %{time_total}\\n' -H 'Authorization: Bearer \(token)' \
                    '\(server.url)/v1/alice/default/changes?after=0&wait=3'
                cat \(dir.path)/events
                """, timeout: 40)
            #expect(result.standardOutput.contains("stream=124"), "the stream was still open when timeout ended it: \(result)")
            #expect(result.standardOutput.contains(": keep-alive\n\n"), "\(result)")
            #expect(result.standardOutput.contains("poll=200 3."), "the long poll waited its 3 s: \(result)")
        }
    }

    @Test("a push of more than 10,000 changes, or with a device id over 64 bytes, is refused whole with 400 and its reason")
    func boundedPush() throws {
        try withServer { (server, token, dir) throws in
            func push(_ changes: [StampedChange]) throws -> String {
                struct Push: Encodable { var changes: [StampedChange] }
                try JSONEncoder().encode(Push(changes: changes)).write(to: URL(fileURLWithPath: dir.path + "/push.json"))
                return try curl("-X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' --data-binary @\(dir.path)/push.json",
                                server, "/v1/alice/default/changes")
            }
            let xml = Data(try PropertyListCodec.encodeXML(.string("x")))
            func change(_ key: String, device: String = "curl") -> StampedChange {
                StampedChange(key: key, value: xml, type: .string, stamp: ChangeStamp(time: 1_800_000_000_000, counter: 0, device: device))
            }
            let many = try push((0..<10_001).map { change("k\($0)") })
            #expect(many.hasSuffix(" 400") && many.contains("10001 changes, over the limit of 10000"), "\(many.prefix(300))")
            let device = try push([change("fine"), change("long", device: String(repeating: "d", count: 129))])
            #expect(device.hasSuffix(" 400") && device.contains("change 1 (key long): the device id is 129 bytes, over the limit of 64"),
                    "\(device.prefix(300))")
            let held = try shell("curl -sf -H 'Authorization: Bearer \(token)' '\(server.url)/v1/alice/default/changes'").standardOutput
            struct Batch: Decodable { var changes: [StampedChange] }
            #expect(try JSONDecoder().decode(Batch.self, from: Data(held.utf8)).changes.isEmpty, "nothing was stored: \(held.prefix(300))")
        }
    }

    @Test("the server's database, with its -wal and -shm, is 0600 after account create and serve, even one made 0644 before")
    func databaseMode() throws {
        let dir = TemporaryDirectory("kvsfs-doors")
        defer { dir.remove() }
        let database = dir.path + "/server.sqlite"
        _ = try run(kvsfsBinary, ["account", "create", "alice", "--database", "sqlite://" + database])
        let created = try shell("stat -c '%a %n' \(database)*").standardOutput
        #expect(created.hasPrefix("600 \(database)\n"), "\(created)")
        #expect(created.split(separator: "\n").allSatisfy { $0.hasPrefix("600 ") }, "\(created)")
        _ = try shell("chmod 644 \(database)")
        let server = try ServerProcess(database: "sqlite://" + database)
        defer { server.stop() }
        let serving = try shell("stat -c '%a %n' \(database) \(database)-wal \(database)-shm").standardOutput
        #expect(serving == "600 \(database)\n600 \(database)-wal\n600 \(database)-shm\n", "\(serving)")
    }

    @Test("a mount's store and its file remote are 0600, with their -wal and -shm")
    func mountFilesMode() throws {
        try withDaemon { daemon, _ in
            let result = try shell("""
                echo hello > \(daemon.path("k"))
                \(kvsfsBinary) sync \(daemon.mountpoint) || exit 9
                cd \(daemon.dataDirectory) && stat -c '%a %n' *.sqlite* | sort
                """)
            #expect(result.status == 0, "\(result)")
            let lines = result.standardOutput.split(separator: "\n")
            #expect(lines.contains("600 default.sqlite") && lines.contains("600 cloud.sqlite") && lines.contains("600 cloud.sqlite-wal"), "\(result)")
            #expect(lines.allSatisfy { $0.hasPrefix("600 ") }, "\(result)")
        }
    }

    @Test("a revoked token: kvsfs sync says the server refused it and exits 1; no attribute syncs")
    func refusedToken() throws {
        try withServer { (server, token, dir) throws in
            let mount = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                                        extraArguments: ["--remote", server.url, "--token-file", dir.path + "/token"])
            defer { mount.stop() }
            #expect(try shell("\(kvsfsBinary) sync \(mount.mountpoint)").status == 0)
            _ = try server.admin(["token", "revoke", token])
            let result = try shell("""
                \(kvsfsBinary) sync \(mount.mountpoint); echo "sync=$?"
                getfattr -n user.kvsfs.synchronize \(mount.mountpoint); echo "getfattr=$?"
                """)
            #expect(result.standardOutput.contains("sync=1"), "\(result)")
            #expect(result.standardError.contains("the server refused this token: unknown or revoked token"), "\(result)")
            #expect(result.standardError.contains("No such attribute"), "reading an attribute syncs nothing: \(result)")
            #expect(!result.standardError.contains("No route to host"), "\(result)")
        }
    }
}
