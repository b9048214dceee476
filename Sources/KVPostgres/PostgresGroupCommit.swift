import Foundation
import KVCloud
import KVServer
import KVStore
import Logging
import PostgresNIO

// A group of pushes (`PushGroups`) committed as one transaction: every store of the group
// locked in the order of its id (so that instances committing groups at once never deadlock),
// each push decided by `CloudLedger` in turn against the rows its predecessors left, then
// every written row in one statement, every store's totals and notification in another.
// Round trips: begin, lock and read, write the rows, update the stores, commit; the same for
// one push or hundreds (and once per store and instance, the statement that makes its row).

extension PostgresServerStorage {
    /// Commits `group` and answers each push in order: its outcome, or its own refusal (a mark
    /// that does not fit) with the others unaffected, or the transaction's error for all.
    func commit(_ group: [GroupedPush]) async -> [Result<PushOutcome, CloudError>] {
        do {
            try await createStores(of: group)
            return try await run {
                try await client.withTransaction(logger: logger) { db in
                    try await decideAndWrite(group, db)
                }
            }
        } catch {
            return group.map { _ in .failure(error) }
        }
    }

    private func decideAndWrite(_ group: [GroupedPush], _ db: PostgresConnection) async throws -> [Result<PushOutcome, CloudError>] {
        let stores = Array(Set(group.map(\.store))).sorted()
        var locked = try await Self.lock(stores, keys: group, db, logger)
        var results = [Result<PushOutcome, CloudError>]()
        var written = [RowKey]()  // in the order first written; each once
        var seen = Set<RowKey>()
        var changedStores = Set<String>()
        for push in group {
            guard let state = locked.states[push.store] else {
                // Its row went (the account was removed) after it was made: made again on a retry.
                knownStores.withLock { _ = $0.remove(push.store) }
                results.append(.failure(.unavailable("store \(push.store) vanished during a push")))
                continue
            }
            let rows = locked.rows[push.store] ?? [:]
            do {
                // Under the store's lock, against the rows the push decides by.
                if let mark = push.mark { try mark.check(newest: state.cursor, held: rows[mark.key].map(\.mark)) }
            } catch {
                results.append(.failure(error))
                continue
            }
            let current = rows.filter { push.pushedKeys.contains($0.key) }.mapValues(\.change)
            let decision = CloudLedger.decide(push.admitted, current: current, state: state, storesNUL: false)
            for (change, cursor) in decision.writes {
                locked.rows[push.store, default: [:]][change.key] = KeyRow(change: change, cursor: cursor)
                let row = RowKey(store: push.store, key: change.key)
                if seen.insert(row).inserted { written.append(row) }
            }
            if !decision.writes.isEmpty {
                locked.states[push.store] = decision.state
                changedStores.insert(push.store)
            }
            results.append(.success(decision.outcome))
        }
        guard !changedStores.isEmpty else { return results }
        try await Self.write(written.compactMap { row in locked.rows[row.store]?[row.key].map { (row.store, $0) } }, db, logger)
        // The notifications reach every listening instance when the transaction commits.
        let updated = changedStores.sorted()
        let states = updated.map { locked.states[$0]! }
        try await db.query("""
            WITH updated AS (
                UPDATE kvsfs_store s SET cursor = u.cursor, bytes = u.bytes, keys = u.keys
                FROM unnest(\(updated)::text[], \(states.map(\.cursor))::bigint[], \(states.map(\.usage.bytes))::bigint[],
                            \(states.map(\.usage.keys))::bigint[]) AS u(id, cursor, bytes, keys)
                WHERE s.id = u.id RETURNING s.id)
            SELECT pg_notify(\(Self.channel), \(instance + " ") || id) FROM updated
            """, logger: logger)
        return results
    }

    /// A row of `kvsfs_change` by its primary key.
    private struct RowKey: Hashable {
        let store: String
        let key: String
    }

    /// Each key's latest change, in one INSERT of any number of rows (each key once: the
    /// group's last), as arrays: nine parameters, whatever the group's size.
    private static func write(_ rows: [(store: String, row: KeyRow)], _ db: PostgresConnection, _ logger: Logger) async throws {
        let changes = rows.map(\.row.change)
        // bytea[] and text[] hold no NULL here: a tombstone is flagged, a missing type is ''.
        try await db.query("""
            INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor)
            SELECT store, key, CASE WHEN tombstone THEN NULL ELSE value END, NULLIF(type, ''), time, counter, device, cursor
            FROM unnest(\(rows.map(\.store))::text[], \(changes.map(\.key))::text[],
                        \(changes.map { ByteBuffer(bytes: $0.value ?? Data()) })::bytea[], \(changes.map { $0.value == nil })::bool[],
                        \(changes.map { $0.type?.rawValue ?? "" })::text[], \(changes.map(\.stamp.time))::bigint[],
                        \(changes.map(\.stamp.counter))::int[], \(changes.map(\.stamp.device))::text[], \(rows.map(\.row.cursor))::bigint[])
                AS row(store, key, value, tombstone, type, time, counter, device, cursor)
            ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                counter = excluded.counter, device = excluded.device, cursor = excluded.cursor
            """, logger: logger)
    }

    /// Makes the rows of the group's stores that this instance has not seen yet, each in a
    /// statement of its own before the group's transaction: made inside it, a new row would be
    /// locked out of the order of names that keeps instances from deadlocking.
    private func createStores(of group: [GroupedPush]) async throws(CloudError) {
        let unseen = knownStores.withLock { known in Set(group.map(\.store)).subtracting(known).sorted() }
        guard !unseen.isEmpty else { return }
        let limits = QuotaLimits.modelled
        try await run {
            try await client.query("""
                INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                SELECT id, 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes)
                FROM unnest(\(unseen)::text[]) AS id
                ON CONFLICT (id) DO NOTHING
                """, logger: logger)
        }
        knownStores.withLock { $0.formUnion(unseen) }
    }

    /// What a group's lock read: each store's state, and the rows of the keys its pushes name.
    private struct Locked {
        var states: [String: CloudStoreState] = [:]
        var rows: [String: [String: KeyRow]] = [:]
    }

    /// Locks the rows of `stores` (in the order of their ids) and reads their states with the
    /// rows of the keys `group` names; a store without a row is missing from `states`.
    private static func lock(_ stores: [String], keys group: [GroupedPush], _ db: PostgresConnection, _ logger: Logger) async throws -> Locked {
        var seen = Set<RowKey>()
        let pairs = group.flatMap { push in push.keys.map { (push.store, $0) } }.filter { seen.insert(RowKey(store: $0.0, key: $0.1)).inserted }
        let rows = try await db.query("""
            WITH locked AS (
                SELECT id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes FROM kvsfs_store
                WHERE id = ANY(\(stores)) ORDER BY id FOR UPDATE)
            SELECT l.id, l.cursor, l.bytes, l.keys, l.total_bytes, l.value_bytes, l.max_keys, l.key_name_bytes,
                   c.key, c.value, c.type, c.time, c.counter, c.device, c.cursor
            FROM locked l LEFT JOIN LATERAL (
                SELECT c.* FROM unnest(\(pairs.map(\.0))::text[], \(pairs.map(\.1))::text[]) AS w(store, key)
                JOIN kvsfs_change c ON c.store = w.store AND c.key = w.key WHERE w.store = l.id) c ON true
            """, logger: logger)
        var locked = Locked()
        for try await row in rows.decode((String, Int64, Int, Int, Int, Int, Int, Int, String?, Data?, String?, Int64?, Int32?, String?, Int64?).self) {
            let (store, cursor, bytes, count, totalBytes, valueBytes, maxKeys, keyNameBytes, key, value, type, time, counter, device, keyCursor) = row
            locked.states[store] = CloudStoreState(
                limits: QuotaLimits(totalBytes: totalBytes, valueBytes: valueBytes, keys: maxKeys, keyNameBytes: keyNameBytes),
                usage: QuotaUsage(bytes: bytes, keys: count), cursor: cursor)
            if let key, let time, let counter, let device, let keyCursor {
                locked.rows[store, default: [:]][key] = KeyRow(
                    change: StampedChange(key: key, value: value, type: type.flatMap(ValueType.init(rawValue:)),
                                          stamp: ChangeStamp(time: time, counter: counter, device: device)),
                    cursor: keyCursor)
            }
        }
        return locked
    }
}

/// A key's row: its latest change and the cursor it was accepted at.
struct KeyRow {
    var change: StampedChange
    var cursor: Int64
    var mark: HistoryMark { HistoryMark(key: change.key, cursor: cursor, stamp: change.stamp) }
}
