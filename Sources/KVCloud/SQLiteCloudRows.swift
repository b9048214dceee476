import Foundation
import GRDB
import KVStore

// The file remote's rows as SQLiteCloudStorage reads and writes them: a stored change read
// with checks, and one store's rows inside a push's transaction.

extension SQLiteCloudStorage {
    /// A stored change as it was written, or a refusal to read it: a row that any process (or
    /// an older kvsfs) may have written is read with checks, never trusted to have its types.
    static func change(_ row: Row) throws -> StampedChange {
        let keyBytes: Data = try row.decode(forColumn: "key")
        guard let key = String(validating: keyBytes, as: UTF8.self) else { throw UnreadableRow("its key is not UTF-8") }
        let type = try valueType(row)
        let value: Data? = try row.decode(forColumn: "value")
        guard (value == nil) == (type == nil) else { throw UnreadableRow("it has a type without a value, or a value without a type") }
        return StampedChange(key: key, value: value, type: type, stamp: try stamp(row))
    }

    /// A stored change's open conflict: the changes that lost to it, newest first (columns
    /// `lost…` and `alsoLost`, `KeptChangeList`), none when it has none; read with the same
    /// checks as the change.
    static func lost(_ row: Row) throws -> [KeptChange] {
        let earlier: Data? = try row.decode(forColumn: "alsoLost")
        let deviceBytes: Data? = try row.decode(forColumn: "lostDevice")
        guard let deviceBytes else { return try KeptChangeList.decode(newest: nil, earlier: earlier) }
        guard let device = String(validating: deviceBytes, as: UTF8.self) else { throw UnreadableRow("its conflict's device id is not UTF-8") }
        let typeName: String? = try row.decode(forColumn: "lostType")
        let type = try typeName.map { name in
            guard let type = ValueType(rawValue: name) else { throw UnreadableRow("its conflict's type \(name.debugDescription) is unknown") }
            return type
        }
        let value: Data? = try row.decode(forColumn: "lostValue")
        let newest = KeptChange(value: value, type: type, stamp: ChangeStamp(
            time: try row.decode(forColumn: "lostTime"), counter: try row.decode(forColumn: "lostCounter"), device: device))
        return try KeptChangeList.decode(newest: newest, earlier: earlier)
    }

    /// A stored change's type, nil for a removal; an unknown name cannot be read.
    static func valueType(_ row: Row) throws -> ValueType? {
        let typeName: String? = try row.decode(forColumn: "type")
        return try typeName.map { name in
            guard let type = ValueType(rawValue: name) else { throw UnreadableRow("its type \(name.debugDescription) is unknown") }
            return type
        }
    }

    static func stamp(_ row: Row) throws -> ChangeStamp {
        let deviceBytes: Data = try row.decode(forColumn: "device")
        guard let device = String(validating: deviceBytes, as: UTF8.self) else { throw UnreadableRow("its device id is not UTF-8") }
        return ChangeStamp(time: try row.decode(forColumn: "time"), counter: try row.decode(forColumn: "counter"), device: device)
    }

    /// A version as a history answer reads it: its size (`size`), and its value only when
    /// `valued` (the column `value` holds it then).
    static func version(_ row: Row, valued: Bool) throws -> KeyVersion {
        let type = try valueType(row)
        let size: Int? = try row.decode(forColumn: "size")
        let value: Data? = valued ? try row.decode(forColumn: "value") : nil
        guard (size == nil) == (type == nil), !valued || (value == nil) == (type == nil) else {
            throw UnreadableRow("it has a type without a value, or a value without a type")
        }
        return KeyVersion(version: try row.decode(forColumn: "cursor"), stamp: try stamp(row),
                          acceptedAt: try row.decode(forColumn: "acceptedAt"), type: type, size: size ?? 0, value: value)
    }

    struct UnreadableRow: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// One store's rows inside a write transaction; the store's row is created on first use.
    struct Table {
        let db: Database
        let store: String
        let state: CloudStoreState
        /// The history policy as stored; checked by `history`, which a push needs.
        let storedHistory: HistoryPolicy
        /// When removed keys' histories were last dropped (milliseconds since 1970).
        let sweptAt: Int64

        init(db: Database, store: String) throws {
            self.db = db
            self.store = store
            let limits = QuotaLimits.modelled
            let select = try db.cachedStatement(sql: "SELECT * FROM cloudStore WHERE id = ?")
            var found = try Row.fetchOne(select, arguments: [store])
            if found == nil {
                try db.cachedStatement(sql: """
                    INSERT OR IGNORE INTO cloudStore (id, cursor, bytes, keys, totalBytes, valueBytes, maxKeys, keyNameBytes)
                    VALUES (?, 0, 0, 0, ?, ?, ?, ?)
                    """).execute(arguments: [store, limits.totalBytes, limits.valueBytes, limits.keys, limits.keyNameBytes])
                found = try Row.fetchOne(select, arguments: [store])
            }
            guard let row = found else { throw UnreadableRow("store \(store) has no row") }
            state = CloudStoreState(limits: try Self.limits(row),
                                    usage: QuotaUsage(bytes: try row.decode(forColumn: "bytes"), keys: try row.decode(forColumn: "keys")),
                                    cursor: try row.decode(forColumn: "cursor"), keptBytes: try row.decode(forColumn: "keptBytes"))
            storedHistory = Self.storedHistory(row)
            sweptAt = try row.decode(forColumn: "historySweptAt")
        }

        /// The store's history policy as stored; one outside the policy's ranges (which the
        /// schema's checks keep out) cannot be read.
        static func historyPolicy(_ row: Row) throws -> HistoryPolicy {
            let policy = storedHistory(row)
            if let violation = HistoryPolicyChange(versions: policy.versions, retentionDays: policy.retentionDays).violation {
                throw UnreadableRow("the store's history policy is outside the rule: \(violation)")
            }
            return policy
        }

        /// The policy as stored, unchecked: what a change of part of it starts from, so that a
        /// policy broken by another program can be mended.
        static func storedHistory(_ row: Row) -> HistoryPolicy {
            // A value that is no whole number (written by another program) reads as one outside
            // the ranges.
            let versions: DatabaseValue = row["historyVersions"]
            let days: DatabaseValue = row["historyDays"]
            return HistoryPolicy(versions: Int.fromDatabaseValue(versions) ?? 0, retentionDays: Int.fromDatabaseValue(days) ?? -1)
        }

        static func historyPolicy(db: Database, store: String) throws -> HistoryPolicy? {
            try Row.fetchOne(db, sql: "SELECT * FROM cloudStore WHERE id = ?", arguments: [store]).map { try historyPolicy($0) }
        }

        static func limits(_ row: Row) throws -> QuotaLimits {
            QuotaLimits(totalBytes: try row.decode(forColumn: "totalBytes"), valueBytes: try row.decode(forColumn: "valueBytes"),
                        keys: try row.decode(forColumn: "maxKeys"), keyNameBytes: try row.decode(forColumn: "keyNameBytes"))
        }

        static func limits(db: Database, store: String) throws -> QuotaLimits? {
            try Row.fetchOne(db, sql: "SELECT * FROM cloudStore WHERE id = ?", arguments: [store]).map { try limits($0) }
        }

        /// The stored latest change of each of `keys` that has one, and why for each whose row
        /// cannot be read. One statement per `lookupBatch` keys, not one per key.
        func current(_ keys: Set<String>) throws -> (rows: [String: StampedChange], unreadable: [String: String]) {
            var rows = [String: StampedChange]()
            var unreadable = [String: String]()
            var remaining = keys[...]
            while !remaining.isEmpty {
                let batch = remaining.prefix(Self.lookupBatch)
                remaining = remaining.dropFirst(batch.count)
                // Rounded up to a power of two by repeating a key: few statements to prepare and cache.
                var width = 1
                while width < batch.count { width *= 2 }
                let statement = try db.cachedStatement(sql: """
                    SELECT CAST(key AS BLOB) AS key, value, type, time, counter, device,
                           lostValue, lostType, lostTime, lostCounter, CAST(lostDevice AS BLOB) AS lostDevice, alsoLost
                    FROM cloudChange WHERE store = ? AND key IN (\(Array(repeating: "CAST(? AS TEXT)", count: width).joined(separator: ", ")))
                    """)
                // The keys as bytes: GRDB binds text only up to a NUL, which a key may hold.
                var arguments: [any DatabaseValueConvertible] = [store]
                arguments += batch.map { Data($0.utf8) }
                arguments += Array(repeating: Data(batch[batch.startIndex].utf8), count: width - batch.count)
                let cursor = try Row.fetchCursor(statement, arguments: StatementArguments(arguments))
                while let row = try cursor.next() {
                    // Equal, byte for byte, to the key it was looked up by.
                    let keyBytes: Data = try row.decode(forColumn: "key")
                    let key = String(decoding: keyBytes, as: UTF8.self)
                    do {
                        var change = try SQLiteCloudStorage.change(row)
                        do {
                            change.lost = try SQLiteCloudStorage.lost(row)
                        } catch {
                            // Another program's: no conflict, which the push decides anew.
                            change.lost = []
                        }
                        rows[key] = change
                    } catch {
                        unreadable[key] = String(describing: error)
                    }
                }
            }
            return (rows, unreadable)
        }

        /// The version (`KeyVersion.version`) of the stored latest change of each of `keys`
        /// that has a row, as `history` counts it: the cursor of its version row (found by
        /// stamp: a row given again with a conflict moved to a new cursor), or the row's own
        /// cursor when none holds it (an older kvsfs sharing the file records none). Asked
        /// for the keys of conditional changes alone.
        func versions(_ keys: Set<String>) throws -> [String: Int64] {
            let statement = try db.cachedStatement(sql: """
                SELECT coalesce((SELECT max(v.cursor) FROM cloudVersion v WHERE v.store = c.store AND v.key = c.key
                                     AND v.time = c.time AND v.counter = c.counter AND v.device = c.device), c.cursor)
                FROM cloudChange c WHERE c.store = ? AND c.key = CAST(? AS TEXT)
                """)
            var versions = [String: Int64]()
            for key in keys {
                // The key as bytes: GRDB binds text only up to a NUL, which a key may hold.
                versions[key] = try Int64.fetchOne(statement, arguments: [store, Data(key.utf8)])
            }
            return versions
        }

        /// The most keys one statement of `current` looks up: far below SQLite's limit on
        /// parameters (32766).
        static let lookupBatch = 256

        /// Writes the decision's changes as the keys' latest and as new versions of them, drops
        /// versions beyond the history policy, and, at most once an hour, the histories of keys
        /// removed longer ago than its retention time. `current`: the keys' latest changes before
        /// the push; `now`: milliseconds since 1970.
        func apply(_ decision: PushDecision, current: [String: StampedChange], now: Int64) throws {
            guard !decision.writes.isEmpty else { return }
            let history = try self.history
            let upsert = try db.cachedStatement(sql: """
                INSERT INTO cloudChange (store, key, value, type, time, counter, device, cursor,
                    lostValue, lostType, lostTime, lostCounter, lostDevice, alsoLost, lostForTime, lostForCounter, lostForDevice)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                    counter = excluded.counter, device = excluded.device, cursor = excluded.cursor,
                    lostValue = excluded.lostValue, lostType = excluded.lostType, lostTime = excluded.lostTime,
                    lostCounter = excluded.lostCounter, lostDevice = excluded.lostDevice, alsoLost = excluded.alsoLost,
                    lostForTime = excluded.lostForTime, lostForCounter = excluded.lostForCounter, lostForDevice = excluded.lostForDevice
                """)
            for write in decision.writes {
                let change = write.change
                let row = DirectBinding(upsert)
                try row.bind(1, store)
                try row.bind(2, change.key)
                try row.bind(3, change.value)
                try row.bind(4, change.type?.rawValue)
                try row.bind(5, change.stamp.time)
                try row.bind(6, Int64(change.stamp.counter))
                try row.bind(7, change.stamp.device)
                try row.bind(8, write.cursor)
                if let lost = change.lost.first {
                    try row.bind(9, lost.value)
                    try row.bind(10, lost.type?.rawValue)
                    try row.bind(11, lost.stamp.time)
                    try row.bind(12, Int64(lost.stamp.counter))
                    try row.bind(13, lost.stamp.device)
                    try row.bind(14, try KeptChangeList.encode(change.lost))
                    try row.bind(15, change.stamp.time)
                    try row.bind(16, Int64(change.stamp.counter))
                    try row.bind(17, change.stamp.device)
                }
                try row.run(in: db)
            }
            try recordVersions(decision.writes.filter(\.isVersion), after: current, now: now, history: history)
            // keptBytes is the triggers' (migration v6).
            try db.cachedStatement(sql: "UPDATE cloudStore SET cursor = ?, bytes = ?, keys = ? WHERE id = ?")
                .execute(arguments: [decision.state.cursor, decision.state.usage.bytes, decision.state.usage.keys, store])
            try evictOldestVersions(history: history)
            if HistoryPolicy.sweepDue(lastSweep: sweptAt, now: now) {
                // The versions before the removal of each key whose latest change is a removal
                // accepted before the retention time. The removal's own row stays: it says when
                // it was accepted, which its stamp does not.
                try db.cachedStatement(sql: """
                    DELETE FROM cloudVersion WHERE store = ?1 AND EXISTS (
                        SELECT 1 FROM cloudChange c JOIN cloudVersion r ON r.store = c.store AND r.key = c.key
                            AND r.time = c.time AND r.counter = c.counter AND r.device = c.device
                        WHERE c.store = ?1 AND c.key = cloudVersion.key AND c.value IS NULL AND r.acceptedAt < ?2
                            AND cloudVersion.cursor < r.cursor)
                    """).execute(arguments: [store, history.oldestKeptRemoval(now: now)])
                try db.cachedStatement(sql: "UPDATE cloudStore SET historySweptAt = ? WHERE id = ?").execute(arguments: [now, store])
            }
        }

        /// The store's history policy; one outside the rule (which the schema's checks keep out)
        /// refuses the push, with why, until it is mended.
        var history: HistoryPolicy {
            get throws {
                if let violation = HistoryPolicyChange(versions: storedHistory.versions, retentionDays: storedHistory.retentionDays).violation {
                    throw UnreadableRow("the store's history policy is outside the rule: \(violation)")
                }
                return storedHistory
            }
        }

        /// Past the store's bound on its versions' bytes (`HistoryPolicy.byteBound`), drops its
        /// oldest versions, whatever their keys, but never a key's newest.
        private func evictOldestVersions(history: HistoryPolicy) throws {
            let held = try Int.fetchOne(db.cachedStatement(sql: "SELECT historyBytes FROM cloudStore WHERE id = ?"), arguments: [store]) ?? 0
            let excess = history.bytesToEvict(held: held, limits: state.limits)
            guard excess > 0 else { return }
            try db.cachedStatement(sql: """
                DELETE FROM cloudVersion WHERE store = ?1 AND (key, cursor) IN (
                    SELECT key, cursor FROM (
                        SELECT key, cursor,
                               coalesce(sum(length(value)) OVER (ORDER BY cursor ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
                        FROM cloudVersion v
                        WHERE store = ?1 AND cursor < (SELECT max(cursor) FROM cloudVersion w WHERE w.store = ?1 AND w.key = v.key))
                    WHERE before < ?2)
                """).execute(arguments: [store, excess])
        }

        private func recordVersions(_ writes: [PushDecision.Write], after current: [String: StampedChange],
                                    now: Int64, history: HistoryPolicy) throws {
            let insert = try db.cachedStatement(sql: """
                INSERT INTO cloudVersion (store, key, cursor, value, type, time, counter, device, acceptedAt)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            // Everything of the key up to and including its (versions)th newest is older than
            // what the policy keeps once this version is in.
            let trim = try db.cachedStatement(sql: """
                DELETE FROM cloudVersion WHERE store = ?1 AND key = ?2 AND cursor <=
                    (SELECT cursor FROM cloudVersion WHERE store = ?1 AND key = ?2 ORDER BY cursor DESC LIMIT 1 OFFSET ?3)
                """)
            let oldestKept = history.oldestKeptRemoval(now: now)
            var written = Set<String>()
            for write in writes {
                let (change, cursor) = (write.change, write.cursor)
                // A key removed and accepted so longer ago than the retention time has no history,
                // swept or not: what it had goes before this write. (A removal this push wrote
                // was accepted now.)
                if written.insert(change.key).inserted, current[change.key]?.isTombstone == true {
                    let forget = DirectBinding(try db.cachedStatement(sql: """
                        DELETE FROM cloudVersion WHERE store = ?1 AND key = ?2 AND
                            (SELECT type IS NULL AND acceptedAt < ?3 FROM cloudVersion WHERE store = ?1 AND key = ?2 ORDER BY cursor DESC LIMIT 1)
                        """))
                    try forget.bind(1, store)
                    try forget.bind(2, change.key)
                    try forget.bind(3, oldestKept)
                    try forget.run(in: db)
                }
                let row = DirectBinding(insert)
                try row.bind(1, store)
                try row.bind(2, change.key)
                try row.bind(3, cursor)
                try row.bind(4, change.value)
                try row.bind(5, change.type?.rawValue)
                try row.bind(6, change.stamp.time)
                try row.bind(7, Int64(change.stamp.counter))
                try row.bind(8, change.stamp.device)
                try row.bind(9, now)
                try row.run(in: db)
                let old = DirectBinding(trim)
                try old.bind(1, store)
                try old.bind(2, change.key)
                try old.bind(3, Int64(history.versions))
                try old.run(in: db)
            }
        }
    }
}
