import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// `kvsfs account schema`: the operator's way to a store's schema on the server's database,
/// the only one for a store its users reach with read-only tokens.
@Suite("kvsfs account schema", .hangGuard)
struct AccountSchemaCommandTests {
    static let schema = #"{"keys": {"port": {"type": "integer", "minimum": 1}}}"#

    @Test("prints, sets from a file or standard input, removes, and holds to --if-version; a bad schema is refused with why")
    func printSetRemove() throws {
        let directory = TemporaryDirectory("kvsfs-account-schema")
        defer { directory.remove() }
        let database = "sqlite://\(directory.path)/server.sqlite"
        let file = directory.path + "/schema.json"
        try Self.schema.write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        func kvsfs(_ arguments: [String], input: String? = nil) throws -> CommandResult {
            if let input {
                return try shell("printf '%s' '\(input)' | '\(kvsfsBinary)' account schema " + arguments.map { "'\($0)'" }.joined(separator: " ")
                                 + " --database '\(database)'")
            }
            return try run(kvsfsBinary, ["account", "schema"] + arguments + ["--database", database])
        }
        #expect(try run(kvsfsBinary, ["account", "create", "alice", "--database", database]).status == 0)

        #expect(try kvsfs(["alice/conf"]).standardOutput == "version 0\n")
        #expect(try kvsfs(["alice/conf", file]).standardOutput == "version 1\n")
        #expect(try kvsfs(["alice/conf"]).standardOutput == "version 1\n" + Self.schema + "\n")

        let moved = try kvsfs(["alice/conf", "--remove", "--if-version", "0"])
        #expect(moved.status == 1)
        #expect(moved.standardError.contains("the store's schema is no longer at the version given: it is at version 1"), "\(moved)")

        let bad = try kvsfs(["alice/conf", "-"], input: #"{"keys": {"port": {"type": "number", "minimum": "one"}}}"#)
        #expect(bad.status == 1)
        #expect(bad.standardError.contains("invalid schema: keys.port.minimum is a number"), "\(bad)")
        #expect(try kvsfs(["alice/conf"]).standardOutput.hasPrefix("version 1\n"))

        #expect(try kvsfs(["alice/conf", "-", "--if-version", "1"], input: "{}").standardOutput == "version 2\n")
        #expect(try kvsfs(["alice/conf", "--remove"]).standardOutput == "version 3\n")
        #expect(try kvsfs(["alice/conf"]).standardOutput == "version 3\n")

        let nobody = try kvsfs(["bob/conf"])
        #expect(nobody.status == 1 && nobody.standardError.contains("there is no account bob"), "\(nobody)")
    }

    @Test("a schema set by the operator judges the pushes to a store whose users only read it, as any other")
    func readOnlyStoreGetsSchema() async throws {
        let directory = TemporaryDirectory("kvsfs-account-schema-server")
        defer { directory.remove() }
        let database = try TestDatabase(.sqlite, in: directory)
        let server = try ServerProcess(database: database.url)
        defer { _ = server.stop() }
        let writer = HTTPChangeLog(url: server.url, token: try server.admin(["account", "create", "alice"]))
        let reader = HTTPChangeLog(url: server.url, token: try server.admin(["token", "create", "alice", "--store", "conf", "--read-only"]))
        let file = directory.path + "/schema.json"
        try Self.schema.write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o600)
        #expect(try server.admin(["account", "schema", "alice/conf", file]) == "version 1")

        #expect(try await reader.schema(of: "conf") == RemoteSchema(version: 1, text: Array(Self.schema.utf8)))
        #expect(try await reader.changes(in: "conf", after: 0, limit: 10).schemaVersion == 1)
        let port = StampedChange(key: "port", value: Data(try PropertyListCodec.encodeXML(.integer(0))), type: .integer,
                                 stamp: ChangeStamp(time: Int64(Date().timeIntervalSince1970 * 1000), counter: 0, device: "a"))
        #expect(try await writer.push([port], to: "conf").refused.map(\.reason) == [#""port": an integer breaks the rule minimum 1: it is 0"#])
    }
}
