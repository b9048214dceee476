import Foundation
import KVCloud
@testable import KVPostgres
import KVStore
import KVTestSupport
import Logging
import PostgresNIO
import Testing

/// How PostgreSQL keeps the changes that lost (migration v8): each in a row of `kvsfs_lost`,
/// so that a push that loses writes its own row and leaves the key's row and its kept values
/// as they are; rows that kept them in their columns, and rows an older instance writes, end
/// up in the same place, and never show a conflict that is no longer the key's.
@Suite("PostgreSQL keeps each change that lost in a row of its own", .hangGuard)
struct PostgresKeptConflictTests {
    private let store = "alice.default"

    private static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private func change(_ key: String, _ text: String?, time: Int64, device: String) -> StampedChange {
        StampedChange(key: key, value: text.map { Data(try! PropertyListCodec.encodeXML(.string($0))) }, type: text == nil ? nil : .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device), replaces: .nothing)
    }

    @Test("a push that loses to a key with a kept conflict leaves the key's row unwritten, and is fetched at its new cursor")
    func losingPushLeavesRow() async throws {
        try await withStorage { storage, database in
            let start = Self.now
            let winner = change("k", "phone", time: start, device: "phone")
            _ = try await storage.push([winner], to: store)
            let first = change("k", "laptop", time: start - 500, device: "laptop")
            _ = try await storage.push([first], to: store)
            let row = "SELECT xmin::text FROM kvsfs_change WHERE store = '\(store)' AND key = 'k'"
            let written = try psql(database, row)
            let before = try await storage.cursor(of: store)

            let second = change("k", "tablet", time: start - 400, device: "tablet")
            let outcome = try await storage.push([second], to: store)
            #expect(outcome.accepted == [second] && outcome.refused.isEmpty)
            #expect(try psql(database, row) == written, "the key's row (its value and what lost before) is not written again")

            let batch = try await storage.changes(in: store, after: before, limit: 10)
            #expect(batch.changes.map(\.stamp) == [winner.stamp], "given again after the cursor the reader held")
            #expect(batch.changes.first?.lost == [second.kept, first.kept])
            #expect(batch.cursor == before + 1 && batch.mark?.cursor == before + 1)
            // The pusher's mark (the key given again) fits the store's history.
            let mark = try #require(outcome.mark)
            #expect(mark.cursor == before + 1)
            let next = try await storage.changes(in: store, after: mark.cursor, mark: mark, limit: 10)
            #expect(next.changes.isEmpty)
            #expect(try psql(database, "SELECT kept_bytes FROM kvsfs_store WHERE id = '\(store)'") == ["\(first.size + second.size)"])
        }
    }

    @Test("a database whose rows keep conflicts in their columns has them moved into rows of their own, bytes counted")
    func movesColumns() async throws {
        try await withDatabase { database in
            let location = try PostgresLocation(url: database.url)
            let db = try await PostgresConnection.connect(configuration: location.connectionConfiguration(), id: 0, logger: Logger.silent)
            try await PostgresSchema.migrate(db, logger: Logger.silent, through: 7)
            try await db.close()

            let start = Self.now
            let winner = change("k", "phone", time: start, device: "phone")
            let newest = change("k", "laptop", time: start - 100, device: "laptop").kept
            let removal = change("k", nil, time: start - 200, device: "desk").kept
            let oldest = change("k", "tablet", time: start - 300, device: "tablet").kept
            let earlier = try #require(try KeptChangeList.encode([newest, removal, oldest]))
            let value = String(decoding: winner.value!, as: UTF8.self), lostValue = String(decoding: newest.value!, as: UTF8.self)
            try psql(database, """
                INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                    VALUES ('\(store)', 1, \(winner.size), 1, 1048576, 1048576, 1024, 65536);
                INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor, lost_value, lost_type, lost_time,
                                          lost_counter, lost_device, also_lost, lost_for_time, lost_for_counter, lost_for_device)
                    VALUES ('\(store)', 'k', convert_to('\(value)', 'UTF8'), 'string', \(start), 0, 'phone', 1,
                            convert_to('\(lostValue)', 'UTF8'), 'string', \(start - 100), 0, 'laptop',
                            decode('\(earlier.base64EncodedString())', 'base64'), \(start), 0, 'phone');
                """)
            #expect(try psql(database, "SELECT kept_bytes FROM kvsfs_store") == ["\(newest.size + earlier.count)"], "v6's count")

            let storage = try await PostgresServerStorage.open(location, logger: Logger.silent)
            let batch = try await storage.changes(in: store, after: 0, limit: 10)
            await storage.close()
            #expect(batch.unreadable.isEmpty)
            #expect(batch.changes.map(\.stamp) == [winner.stamp] && batch.cursor == 1)
            #expect(batch.changes.first?.lost == [newest, removal, oldest])
            #expect(try psql(database, "SELECT kept_bytes FROM kvsfs_store") == ["\(newest.size + oldest.size)"], "each row's value")
            #expect(try psql(database, "SELECT count(*) FROM kvsfs_change WHERE lost_device IS NOT NULL OR also_lost IS NOT NULL") == ["0"])
        }
    }

    @Test("a row an older instance writes leaves no conflict that is no longer the key's, and what it kept is kept here")
    func olderInstanceRows() async throws {
        try await withStorage { storage, database in
            let start = Self.now
            let winner = change("k", "phone", time: start - 1000, device: "phone")
            let loser = change("k", "laptop", time: start - 1500, device: "laptop")
            _ = try await storage.push([winner], to: store)
            _ = try await storage.push([loser], to: store)
            #expect(try await storage.changes(in: store, after: 0, limit: 10).changes.first?.lost == [loser.kept])

            // An older instance gives the key a new change, knowing nothing of kvsfs_lost.
            let older = change("k", "desk", time: start - 900, device: "desk")
            let olderValue = String(decoding: older.value!, as: UTF8.self)
            try psql(database, """
                UPDATE kvsfs_store SET cursor = cursor + 1 WHERE id = '\(store)';
                INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor)
                    VALUES ('\(store)', 'k', convert_to('\(olderValue)', 'UTF8'), 'string', \(older.stamp.time), 0, 'desk', 3)
                ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                    counter = excluded.counter, device = excluded.device, cursor = excluded.cursor;
                """)
            var row = try #require(try await storage.changes(in: store, after: 0, limit: 10).changes.first)
            #expect(row.stamp == older.stamp && row.lost == [], "what lost to the change before goes with it")
            #expect(try psql(database, "SELECT count(*) FROM kvsfs_lost") == ["0"])
            #expect(try psql(database, "SELECT kept_bytes FROM kvsfs_store") == ["0"])

            // An older instance keeps a change that lost to it in the row's columns: moved here.
            let late = change("k", "tablet", time: start - 1200, device: "tablet")
            let lateValue = String(decoding: late.value!, as: UTF8.self)
            try psql(database, """
                UPDATE kvsfs_store SET cursor = cursor + 1 WHERE id = '\(store)';
                UPDATE kvsfs_change SET cursor = 4, lost_value = convert_to('\(lateValue)', 'UTF8'), lost_type = 'string',
                    lost_time = \(late.stamp.time), lost_counter = 0, lost_device = 'tablet',
                    lost_for_time = time, lost_for_counter = counter, lost_for_device = device
                WHERE store = '\(store)' AND key = 'k';
                """)
            row = try #require(try await storage.changes(in: store, after: 3, limit: 10).changes.first)
            #expect(row.stamp == older.stamp && row.lost == [late.kept])
            #expect(try psql(database, "SELECT kept_bytes FROM kvsfs_store") == ["\(late.size)"])
        }
    }

    private func withDatabase(_ body: (TestDatabase) async throws -> Void) async throws {
        let directory = TemporaryDirectory("kvsfs-kept")
        defer { directory.remove() }
        let database = try TestDatabase(.postgres, in: directory)
        defer { database.remove() }
        try await body(database)
    }

    private func withStorage(_ body: (PostgresServerStorage, TestDatabase) async throws -> Void) async throws {
        try await withDatabase { database in
            let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent)
            do {
                try await body(storage, database)
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        }
    }

    /// Runs `sql` on the database; the rows it returns, one line each.
    @discardableResult
    private func psql(_ database: TestDatabase, _ sql: String) throws -> [String] {
        let result = try run("/usr/bin/psql", [database.url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        guard result.status == 0 else { throw KeptTestError(description: "psql: \(result)") }
        return result.standardOutput.split(separator: "\n").map(String.init)
    }

    private struct KeptTestError: Error, CustomStringConvertible {
        let description: String
    }
}
