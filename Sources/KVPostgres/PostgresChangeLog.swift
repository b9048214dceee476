import Foundation
import KVCloud
import KVServer
import KVStore
import Logging
import PostgresNIO

// The stores' rows: a push decided by `CloudLedger` under its store's row lock, and the reads
// of changes, cursors and marks.

extension PostgresServerStorage {
    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        let admitted = ChangeAdmission.admit(changes, policy: admission)
        let pushedKeys = admitted.keys  // computed: read once
        // Text cannot hold NUL: such keys are refused below, and no row can be a mark's.
        var keys = Array(pushedKeys.filter { !$0.utf8.contains(0) })
        if let mark, !mark.key.utf8.contains(0), !pushedKeys.contains(mark.key) { keys.append(mark.key) }
        return try await run {
            try await client.withTransaction(logger: logger) { db in
                // Round trips are what a push costs here (each one resumes the task between
                // other requests), so the lock, the store's state and the keys' current changes
                // come back together; the store's row is made on its first push.
                var locked = try await Self.lockState(of: store, keys: keys, db, logger)
                if locked == nil {
                    let limits = QuotaLimits.modelled
                    try await db.query("""
                        INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                        VALUES (\(store), 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes))
                        ON CONFLICT (id) DO NOTHING
                        """, logger: logger)
                    locked = try await Self.lockState(of: store, keys: keys, db, logger)
                }
                guard let (state, rows) = locked else { throw CloudError.unavailable("store \(store) vanished during a push") }
                // Under the store's lock, against the rows the push decides by.
                if let mark { try mark.check(newest: state.cursor, held: rows[mark.key].map(\.mark)) }
                let current = rows.filter { pushedKeys.contains($0.key) }.mapValues(\.change)
                let decision = CloudLedger.decide(admitted, current: current, state: state, storesNUL: false)
                guard !decision.writes.isEmpty else { return decision.outcome }
                for (change, cursor) in decision.writes {
                    try await db.query("""
                        INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor)
                        VALUES (\(store), \(change.key), \(change.value), \(change.type?.rawValue), \(change.stamp.time),
                                \(change.stamp.counter), \(change.stamp.device), \(cursor))
                        ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                            counter = excluded.counter, device = excluded.device, cursor = excluded.cursor
                        """, logger: logger)
                }
                // The notification reaches every listening instance when the transaction commits.
                try await db.query("""
                    WITH updated AS (
                        UPDATE kvsfs_store SET cursor = \(decision.state.cursor), bytes = \(decision.state.usage.bytes),
                            keys = \(decision.state.usage.keys) WHERE id = \(store) RETURNING id)
                    SELECT pg_notify(\(Self.channel), \(instance + " " + store)) FROM updated
                    """, logger: logger)
                return decision.outcome
            }
        }
    }

    /// The mark is checked before the read, in a statement of its own: a history that fits
    /// it then still fits it for the read (a key's row only moves forward in one history).
    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        if let mark { try mark.check(newest: try await self.cursor(of: store), held: try await self.mark(in: store, key: mark.key)) }
        return try await run {
            let rows = try await client.query("""
                SELECT key, value, type, time, counter, device, cursor FROM kvsfs_change
                WHERE store = \(store) AND cursor > \(cursor) ORDER BY cursor LIMIT \(limit + 1)
                """, logger: logger)
            var changes = [StampedChange]()
            var last = cursor
            var more = false
            for try await row in rows.decode(ChangeRow.self) {
                if changes.count == limit {
                    more = true
                    continue
                }
                changes.append(Self.change(row))
                last = row.6
            }
            let mark = changes.last.map { HistoryMark(key: $0.key, cursor: last, stamp: $0.stamp) }
            if changes.isEmpty {
                // Past the store's newest change: asked by a reader that saw another history.
                let newest = try await self.cursor(of: store)
                if cursor > newest { throw CloudError.cursorAhead(asked: cursor, store: newest) }
            }
            return ChangeBatch(changes: changes, cursor: last, complete: !more, mark: mark)
        }
    }

    /// The store's row for `key` as a mark, nil when it has none.
    func mark(in store: String, key: String) async throws(CloudError) -> HistoryMark? {
        try StoreName.check(store)
        // PostgreSQL's text holds no NUL: no row can have such a key.
        guard !key.utf8.contains(0) else { return nil }
        return try await run {
            let rows = try await client.query("""
                SELECT time, counter, device, cursor FROM kvsfs_change WHERE store = \(store) AND key = \(key)
                """, logger: logger)
            for try await (time, counter, device, cursor) in rows.decode((Int64, Int32, String, Int64).self) {
                return HistoryMark(key: key, cursor: cursor, stamp: ChangeStamp(time: time, counter: counter, device: device))
            }
            return nil
        }
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try StoreName.check(store)
        return try await run {
            let rows = try await client.query("SELECT cursor FROM kvsfs_store WHERE id = \(store)", logger: logger)
            for try await cursor in rows.decode(Int64.self) { return cursor }
            return 0
        }
    }

    private typealias ChangeRow = (String, Data?, String?, Int64, Int32, String, Int64)

    private static func change(_ row: ChangeRow) -> StampedChange {
        StampedChange(key: row.0, value: row.1, type: row.2.flatMap(ValueType.init(rawValue:)),
                      stamp: ChangeStamp(time: row.3, counter: row.4, device: row.5))
    }

    /// A key's row: its latest change and the cursor it was accepted at.
    private struct KeyRow {
        var change: StampedChange
        var cursor: Int64
        var mark: HistoryMark { HistoryMark(key: change.key, cursor: cursor, stamp: change.stamp) }
    }

    /// Locks `store`'s row and reads its state with the rows of `keys`; nil when the store has
    /// no row yet.
    private static func lockState(of store: String, keys: [String], _ db: PostgresConnection, _ logger: Logger) async throws
        -> (CloudStoreState, [String: KeyRow])? {
        let rows = try await db.query("""
            SELECT s.cursor, s.bytes, s.keys, s.total_bytes, s.value_bytes, s.max_keys, s.key_name_bytes,
                   c.key, c.value, c.type, c.time, c.counter, c.device, c.cursor
            FROM kvsfs_store s LEFT JOIN kvsfs_change c ON c.store = s.id AND c.key = ANY(\(keys))
            WHERE s.id = \(store) FOR UPDATE OF s
            """, logger: logger)
        var state: CloudStoreState?
        var current = [String: KeyRow]()
        for try await row in rows.decode((Int64, Int, Int, Int, Int, Int, Int, String?, Data?, String?, Int64?, Int32?, String?, Int64?).self) {
            let (cursor, bytes, count, totalBytes, valueBytes, maxKeys, keyNameBytes, key, value, type, time, counter, device, keyCursor) = row
            state = CloudStoreState(limits: QuotaLimits(totalBytes: totalBytes, valueBytes: valueBytes, keys: maxKeys, keyNameBytes: keyNameBytes),
                                    usage: QuotaUsage(bytes: bytes, keys: count), cursor: cursor)
            if let key, let time, let counter, let device, let keyCursor {
                current[key] = KeyRow(change: StampedChange(key: key, value: value, type: type.flatMap(ValueType.init(rawValue:)),
                                                            stamp: ChangeStamp(time: time, counter: counter, device: device)),
                                      cursor: keyCursor)
            }
        }
        return state.map { ($0, current) }
    }
}
