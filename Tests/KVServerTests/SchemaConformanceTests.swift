import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// A store's schema on every change log: kept with a version of its own, set only as a schema
/// the store can read and only at the version asked, and every push judged against it.
extension ChangeLogConformanceTests {
    static let schemaText = Array("""
        {"keys": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}},
         "patterns": {"feature.*": {"type": "boolean"}}}
        """.utf8)

    /// The error `body` throws; nil when it throws none.
    static func failure<T>(_ body: () async throws(CloudError) -> T) async -> CloudError? {
        do {
            _ = try await body()
            return nil
        } catch {
            return error
        }
    }

    func change(_ key: String, _ value: PropertyListValue, time: Int64 = now, device: String = "a") -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(value)), type: value.type,
                      stamp: ChangeStamp(time: time, counter: 0, device: device))
    }

    @Test("a store's schema starts at version 0 with none; each set or removal is read back at the next version, which every fetch names",
          arguments: Kind.allCases)
    func schemaVersions(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            #expect(try await log.schema(of: store) == RemoteSchema(version: 0, text: nil))
            #expect(try await log.changes(in: store, after: 0, limit: 10).schemaVersion == 0)

            let set = try await log.setSchema(Self.schemaText, of: store, ifVersion: nil)
            #expect(set == RemoteSchema(version: 1, text: Self.schemaText))
            #expect(try await log.schema(of: store) == set)
            #expect(try await log.changes(in: store, after: 0, limit: 10).schemaVersion == 1)

            let removed = try await log.setSchema(nil, of: store, ifVersion: nil)
            #expect(removed == RemoteSchema(version: 2, text: nil))
            #expect(try await log.schema(of: store) == removed)
            #expect(try await log.changes(in: store, after: 0, limit: 10).schemaVersion == 2)
            // Without a schema again, any value is taken.
            #expect(try await log.push([change("port", .string("eighty"))], to: store).refused.isEmpty)
        }
    }

    @Test("a schema the store cannot read is refused with its reason, and the one held stays", arguments: Kind.allCases)
    func malformedSchemaRefused(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let held = try await log.setSchema(Self.schemaText, of: store, ifVersion: nil)
            let cases = [
                (#"{"keys": {"port": {"type": "integr"}}}"#, "invalid schema: keys.port: type is one of "),
                ("{ not a property list", "invalid schema: not a property list"),
            ]
            for (text, reason) in cases {
                do throws(CloudError) {
                    _ = try await log.setSchema(Array(text.utf8), of: store, ifVersion: nil)
                    Issue.record("\(text) was taken")
                } catch {
                    guard case .refused(let words) = error else {
                        Issue.record("\(text): \(error)")
                        continue
                    }
                    #expect(words.contains(reason), "\(words)")
                }
            }
            #expect(try await log.schema(of: store) == held)
            #expect(try await log.changes(in: store, after: 0, limit: 10).schemaVersion == 1)
        }
    }

    @Test("a schema set at a version the store is no longer at is refused with the version it is at", arguments: Kind.allCases)
    func schemaSetIfVersion(_ kind: Kind) async throws {
        try await withLog(kind) { (log, store) async throws in
            #expect(try await log.setSchema(Self.schemaText, of: store, ifVersion: 0).version == 1)
            let stale = await Self.failure { () async throws(CloudError) in try await log.setSchema(nil, of: store, ifVersion: 0) }
            #expect(stale == .schemaMoved(current: 1))
            #expect(try await log.schema(of: store) == RemoteSchema(version: 1, text: Self.schemaText))
            #expect(try await log.setSchema(nil, of: store, ifVersion: 1) == RemoteSchema(version: 2, text: nil))
            let ahead = await Self.failure { () async throws(CloudError) in try await log.setSchema(Self.schemaText, of: store, ifVersion: 5) }
            #expect(ahead == .schemaMoved(current: 2))
            #expect(try await log.schema(of: store) == RemoteSchema(version: 2, text: nil))
        }
    }

    @Test("a push is judged against the schema: a breaking value is refused with the key, its type and the rule, the rest go through",
          arguments: Kind.allCases)
    func pushJudged(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            // Stored before the schema: they stay, and read back as they are.
            let before = [change("port", .string("eighty"), time: Self.now - 5000), change("feature.old", .integer(3), time: Self.now - 5000)]
            #expect(try await log.push(before, to: store).accepted == before)
            _ = try await log.setSchema(Self.schemaText, of: store, ifVersion: nil)
            #expect(try await log.changes(in: store, after: 0, limit: 10).changes == before)
            // Pushed again (its answer was lost), a change the store holds is no new value.
            #expect(try await log.push([before[0]], to: store).accepted == [before[0]])

            let port = change("port", .integer(8080), time: Self.now - 4000)
            let flag = change("feature.dark", .integer(1), time: Self.now - 4000)
            let note = change("note", .string("anything"), time: Self.now - 4000)
            let outcome = try await log.push([port, flag, note], to: store)
            #expect(outcome.accepted == [port, note])
            #expect(outcome.refused.map(\.change) == [flag])
            #expect(outcome.refused.first?.reason == #""feature.dark": an integer breaks the rule type boolean: it is an integer"#)

            let outOfRange = change("port", .integer(70000), time: Self.now - 3000)
            let refused = try await log.push([outOfRange], to: store).refused
            #expect(refused.map(\.reason) == [#""port": an integer breaks the rule maximum 65535: it is 70000"#])
            #expect(refused.first?.current?.value == port.value, "the refusal carries what the store holds")

            let deletion = StampedChange.tombstone("port", stamp: ChangeStamp(time: Self.now - 2000, counter: 0, device: "a"))
            let oldFlag = StampedChange.tombstone("feature.old", stamp: ChangeStamp(time: Self.now - 2000, counter: 0, device: "a"))
            #expect(try await log.push([deletion, oldFlag], to: store).accepted == [deletion, oldFlag])
            let held = try await log.changes(in: store, after: 0, limit: 10)
            #expect(Dictionary(uniqueKeysWithValues: held.changes.map { ($0.key, $0.value) })
                    == ["note": note.value, "port": nil, "feature.old": nil])
        }
    }

    @Test("a schema set on a store no push made yet makes it, and judges its first push", arguments: Kind.allCases)
    func schemaBeforeFirstPush(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            _ = try await log.setSchema(Self.schemaText, of: store, ifVersion: 0)
            let outcome = try await log.push([change("port", .string("80")), change("port2", .string("80"))], to: store)
            #expect(outcome.refused.map(\.reason) == [#""port": a string breaks the rule type integer: it is a string"#])
            #expect(try await log.changes(in: store, after: 0, limit: 10).changes.map(\.key) == ["port2"])
        }
    }
}

/// What only a server says of a schema: who may set it.
@Suite("A store's schema through a server", .hangGuard)
struct ServerSchemaTests {
    @Test("a read-only token reads the schema but cannot set or remove it, as it cannot push")
    func readOnlyTokenCannotSet() async throws {
        let directory = TemporaryDirectory("kvsfs-schema-server")
        defer { directory.remove() }
        let database = try TestDatabase(.sqlite, in: directory)
        let server = try ServerProcess(database: database.url)
        defer { _ = server.stop() }
        let writer = HTTPChangeLog(url: server.url, token: try server.admin(["account", "create", "alice"]))
        let reader = HTTPChangeLog(url: server.url, token: try server.admin(["token", "create", "alice", "--read-only"]))
        let set = try await writer.setSchema(ChangeLogConformanceTests.schemaText, of: "default", ifVersion: nil)
        #expect(try await reader.schema(of: "default") == set)
        for text in [nil, Array("{}".utf8)] {
            do throws(CloudError) {
                _ = try await reader.setSchema(text, of: "default", ifVersion: nil)
                Issue.record("a read-only token set the schema")
            } catch {
                #expect(error == .notAuthorized("this token may only read alice/default"))
            }
        }
        #expect(try await writer.schema(of: "default") == set)
    }
}
