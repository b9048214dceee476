import FoundationEssentials
import GRDB
@testable import KVStore
import KVTestSupport
import Testing

@Suite("The store's schema")
struct StoreSchemaTests {
    @Test("a store written before the v3 schema opens with every value, stamp and sync state, and its rules still hold")
    func migratesV2() throws {
        let directory = TemporaryDirectory("kvsfs-schema")
        defer { directory.remove() }
        let path = directory.path + "/default.sqlite"
        let old = try DatabaseQueue(path: path)
        try StoreSchema.migrator.migrate(old, upTo: "v2 change stamps and sync state")
        let xml = try PropertyListCodec.encodeXML(.string("kept"))
        try old.write { db in
            try db.execute(sql: """
                INSERT INTO entry (key, value, type, modifiedAt, sequence, counter, device, syncState)
                VALUES ('k', ?, 'string', 1767323045000, 1, 2, 'dev', 'synced'), ('gone', NULL, NULL, 1767323046000, 2, 0, 'dev', 'pending')
                """, arguments: [Data(xml)])
        }
        #expect(try Self.upsertOpcodes(old).contains("OpenEphemeral"), "the v2 table's CHECKs build one")
        try old.close()

        do {
            // The store holds its file exclusively while it is open.
            let store = try KeyValueStore(path: path)
            #expect(store.entry(forKey: "k")?.xml == xml)
            #expect(store.syncState(forKey: "k") == .synced)
            #expect(store.syncState(forKey: "gone") == .pending)
            #expect(store.allChanges(forKey: "k")?.stamp.counter == 2)
            #expect(store.keys() == ["k"])
        }

        let reopened = try DatabaseQueue(path: path)
        defer { try? reopened.close() }
        // Writing a row builds no ephemeral table any more (what the IN lists cost each commit).
        #expect(try Self.upsertOpcodes(reopened).contains("OpenEphemeral") == false)
        for (type, state) in [("text", "synced"), ("string", "lost")] {
            #expect(throws: DatabaseError.self, "type \(type), syncState \(state) is refused") {
                try reopened.write { db in
                    try db.execute(sql: "INSERT INTO entry (key, value, type, modifiedAt, sequence, syncState) VALUES ('x', x'00', ?, 0, 9, ?)",
                                   arguments: [type, state])
                }
            }
        }
    }

    /// The opcodes SQLite runs to write a row of `entry`.
    static func upsertOpcodes(_ database: DatabaseQueue) throws -> [String] {
        try database.read { db in
            try Row.fetchAll(db, sql: """
                EXPLAIN INSERT INTO entry (key, value, type, modifiedAt, sequence, counter, device, syncState)
                VALUES ('k', NULL, NULL, 0, 3, 0, 'dev', 'pending')
                ON CONFLICT(key) DO UPDATE SET value = excluded.value, type = excluded.type, syncState = excluded.syncState
                """).map { $0["opcode"] }
        }
    }
}
