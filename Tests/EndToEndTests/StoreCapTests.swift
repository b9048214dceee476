import Foundation
import KVStore
import KVTestSupport
import Testing

/// `kvsfs serve --max-stores-per-account`: how many stores one account may make through the
/// server, on SQLite and on PostgreSQL, and with several servers on one PostgreSQL at once.
@Suite("The stores an account may hold", .serialized)
struct StoreCapTests {
    /// A push of one string value to `store` of alice: the body, a space, the status.
    private static func push(_ server: ServerProcess, token: String, store: String, key: String, text: String,
                             in directory: TemporaryDirectory) throws -> String {
        let xml = try PropertyListCodec.encodeXML(.string(text))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let body = #"{"changes":[{"key":"\#(key)","value":"\#(Data(xml).base64EncodedString())","type":"string","stamp":{"time":\#(now),"counter":0,"device":"curl"}}]}"#
        let path = directory.path + "/push-\(store).json"
        guard FileManager.default.createFile(atPath: path, contents: Data(body.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        // JSON may escape '/' as '\/'.
        return try shell("""
            curl -s -w ' %{http_code}' -X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' \
                --data-binary @\(path) \(server.url)/v1/alice/\(store)/changes
            """).standardOutput.replacingOccurrences(of: "\\/", with: "/")
    }

    /// The keys and string values `store` of alice holds, as `key=text`.
    private static func held(_ server: ServerProcess, token: String, store: String) throws -> [String] {
        let json = try shell("curl -s -H 'Authorization: Bearer \(token)' \(server.url)/v1/alice/\(store)/changes").standardOutput
        struct Batch: Decodable { struct Change: Decodable { var key: String; var value: Data? }; var changes: [Change] }
        return try JSONDecoder().decode(Batch.self, from: Data(json.utf8)).changes.map { change in
            guard let value = change.value, case .string(let text) = try PropertyListCodec.decode([UInt8](value)) else { return "\(change.key)=?" }
            return "\(change.key)=\(text)"
        }
    }

    @Test("serve --help names --max-stores-per-account and its default, 256")
    func documented() throws {
        let help = try run(kvsfsBinary, ["serve", "--help"])
        #expect(help.standardOutput.contains("--max-stores-per-account") && help.standardOutput.contains("(default: 256)"), "\(help)")
        let zero = try run(kvsfsBinary, ["serve", "--database", "sqlite:///nonexistent/x.sqlite", "--max-stores-per-account", "0"])
        #expect(zero.status != 0 && zero.standardError.contains("--max-stores-per-account must be 1 to 1000000"), "\(zero)")
    }

    @Test("with --max-stores-per-account 3 the fourth store is refused with 403 and the cap named; the three held go on",
          arguments: ServerBackend.allCases)
    func fourthStoreRefused(backend: ServerBackend) throws {
        try withTestServer(backend, label: "kvsfs-cap", extraArguments: ["--max-stores-per-account", "3"]) { fixture in
            let (server, token, dir) = (fixture.server, fixture.token, fixture.directory)
            for store in ["one", "two", "three"] {
                let answer = try Self.push(server, token: token, store: store, key: "k", text: "first in \(store)", in: dir)
                #expect(answer.hasSuffix(" 200") && answer.contains(#""accepted":[{"#), "\(store): \(answer)")
            }
            let refused = try Self.push(server, token: token, store: "four", key: "k", text: "fourth", in: dir)
            #expect(refused.hasSuffix(" 403"), "\(refused)")
            #expect(refused.contains("the server holds its limit of 3 stores for account alice (--max-stores-per-account): "
                                     + "store alice/four is not made"), "\(refused)")
            #expect(try Self.held(server, token: token, store: "four").isEmpty, "nothing of the refused push is kept")
            #expect(try Self.push(server, token: token, store: "five", key: "k", text: "fifth", in: dir).hasSuffix(" 403"))
            for store in ["one", "two", "three"] {
                let answer = try Self.push(server, token: token, store: store, key: "k2", text: "second in \(store)", in: dir)
                #expect(answer.hasSuffix(" 200") && answer.contains(#""accepted":[{"#), "\(store): \(answer)")
                #expect(try Self.held(server, token: token, store: store) == ["k=first in \(store)", "k2=second in \(store)"])
            }
            // Another account has its own three.
            let bob = try server.admin(["account", "create", "bob"])
            let bobs = try shell("""
                curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer \(bob)' -H 'Content-Type: application/json' \
                    --data '{"changes":[]}' \(server.url)/v1/bob/one/changes
                """).standardOutput
            #expect(bobs == "200")
        }
    }

    @Test("two servers on one PostgreSQL, 24 stores pushed to at once through both: exactly 3 are made, the others refused with 403")
    func racingServers() throws {
        let dir = TemporaryDirectory("kvsfs-cap")
        defer { dir.remove() }
        let database = try TestDatabase(.postgres, in: dir)
        defer { database.remove() }
        let one = try ServerProcess(database: database.url, extraArguments: ["--max-stores-per-account", "3", "--rate-limit", "0"])
        defer { one.stop() }
        let two = try ServerProcess(database: database.url, extraArguments: ["--max-stores-per-account", "3", "--rate-limit", "0"])
        defer { two.stop() }
        let token = try one.admin(["account", "create", "alice"])
        let result = try shell("""
            for round in 1 2 3; do
              for i in $(seq 1 8); do
                for server in \(one.url) \(two.url); do
                  curl -s -o /dev/null -w '%{http_code}\\n' -X POST -H 'Authorization: Bearer \(token)' \
                    -H 'Content-Type: application/json' --data '{"changes":[]}' "$server/v1/alice/s$round-$i/changes" &
                done
              done
            done
            wait
            """, timeout: 60)
        let statuses = result.standardOutput.split(separator: "\n").map(String.init)
        #expect(statuses.count == 48, "\(result)")
        let accepted = statuses.filter { $0 == "200" }.count
        #expect((3...6).contains(accepted), "the three stores made, each pushed to through both servers: \(statuses)")
        #expect(statuses.allSatisfy { $0 == "200" || $0 == "403" }, "\(statuses)")
        let stores = try shell("psql '\(database.url)' -tA -c 'SELECT count(*) FROM kvsfs_store'")
        #expect(stores.standardOutput == "3\n", "\(stores)")
    }
}
