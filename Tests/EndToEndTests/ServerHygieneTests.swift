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
        try token.write(toFile: dir.path + "/token", atomically: true, encoding: .utf8)
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

    @Test("a push of more than 10,000 changes, or with a device id over 128 bytes, is refused whole with 400 and its reason")
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
            #expect(device.hasSuffix(" 400") && device.contains("change 1 (key long): the device id is 129 bytes, over the limit of 128"),
                    "\(device.prefix(300))")
            let held = try shell("curl -sf -H 'Authorization: Bearer \(token)' '\(server.url)/v1/alice/default/changes'").standardOutput
            struct Batch: Decodable { var changes: [StampedChange] }
            #expect(try JSONDecoder().decode(Batch.self, from: Data(held.utf8)).changes.isEmpty, "nothing was stored: \(held.prefix(300))")
        }
    }
}
