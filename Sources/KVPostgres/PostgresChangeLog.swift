import Foundation
import KVCloud
import KVStore
import Logging
import PostgresNIO

// The stores' rows: a push (committed with others, `PostgresGroupCommit.swift`), and the reads
// of changes, cursors and marks.

extension PostgresServerStorage {
    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        let admitted = ChangeAdmission.admit(changes, policy: admission)
        let pushedKeys = admitted.keys  // computed: read once
        // Text cannot hold NUL: such keys are refused by the ledger, and no row can be a mark's.
        var keys = Array(pushedKeys.filter { !$0.utf8.contains(0) })
        if let mark, !mark.key.utf8.contains(0), !pushedKeys.contains(mark.key) { keys.append(mark.key) }
        let push = GroupedPush(store: store, admitted: admitted, pushedKeys: pushedKeys, keys: keys, mark: mark)
        return try await pushGroups.submit(push, changes: admitted.entries.count) { [self] group in await commit(group) }
    }

    /// The names kept of `devices` in `store`; one outside the rule (written by another
    /// program) is not shown.
    func names(of devices: some Sequence<String>, in store: String) async throws(CloudError) -> [String: String] {
        let wanted = Array(Set(devices))
        guard !wanted.isEmpty else { return [:] }
        return try await run {
            let rows = try await client.query("""
                SELECT device, name FROM kvsfs_device WHERE store = \(store) AND device = ANY(\(wanted))
                """, logger: logger)
            var names: [String: String] = [:]
            for try await (device, name) in rows.decode((String, String).self) where DeviceName.isValid(name) {
                names[device] = name
            }
            return names
        }
    }

    /// The mark is checked before the read, in a statement of its own: a history that fits
    /// it then still fits it for the read (a key's row only moves forward in one history).
    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        if let mark { try mark.check(newest: try await self.cursor(of: store), held: try await self.mark(in: store, key: mark.key)) }
        var batch = try await run {
            // Each key at its row's cursor or, when a change that lost to it was kept since, at
            // the newest such loser's (the winner given again, migration v8): keys given again
            // after `cursor` come from kvsfs_lost's index. Then one row per key and loser.
            let rows = try await client.query("""
                WITH moved AS (
                    SELECT l.key, max(l.cursor) AS cursor FROM kvsfs_lost l
                    JOIN kvsfs_change c ON c.store = l.store AND c.key = l.key
                        AND (c.time, c.counter, c.device) = (l.lost_for_time, l.lost_for_counter, l.lost_for_device)
                    WHERE l.store = \(store) AND l.cursor > \(cursor) GROUP BY l.key),
                page AS (
                    SELECT key, cursor FROM (
                        SELECT c.key, greatest(c.cursor, m.cursor) AS cursor FROM kvsfs_change c LEFT JOIN moved m ON m.key = c.key
                        WHERE c.store = \(store) AND c.cursor > \(cursor)
                        UNION ALL
                        SELECT m.key, m.cursor FROM moved m JOIN kvsfs_change c ON c.store = \(store) AND c.key = m.key
                        WHERE c.cursor <= \(cursor)) at
                    ORDER BY cursor LIMIT \(limit + 1))
                SELECT c.key, c.value, c.type, c.time, c.counter, c.device, p.cursor, l.value, l.type, l.time, l.counter, l.device
                FROM page p JOIN kvsfs_change c ON c.store = \(store) AND c.key = p.key
                LEFT JOIN kvsfs_lost l ON l.store = c.store AND l.key = c.key
                    AND (l.lost_for_time, l.lost_for_counter, l.lost_for_device) = (c.time, c.counter, c.device)
                ORDER BY p.cursor
                """, logger: logger)
            var keyed = [(cursor: Int64, change: StampedChange, lost: [LostRow])]()
            for try await row in rows.decode(ChangeRow.self) {
                let lost = row.9.map { LostRow(value: row.7, type: row.8, time: $0, counter: row.10, device: row.11) }
                if let last = keyed.last, last.cursor == row.6 {
                    if let lost { keyed[keyed.count - 1].lost.append(lost) }
                    continue
                }
                let change = StampedChange(key: row.0, value: row.1, type: row.2.flatMap(ValueType.init(rawValue:)),
                                           stamp: ChangeStamp(time: row.3, counter: row.4, device: row.5))
                keyed.append((row.6, change, lost.map { [$0] } ?? []))
            }
            let more = keyed.count > limit
            var changes = [StampedChange]()
            var unreadable = [String]()
            var last = cursor
            for (at, change, lost) in keyed.prefix(limit) {
                var change = change
                do {
                    change.lost = try Self.kept(lost)
                } catch {
                    // The change goes on without it: a broken conflict never holds its winner back.
                    unreadable.append("the conflict kept with the row at cursor \(at) cannot be read: \(error)")
                }
                changes.append(change)
                last = at
            }
            let mark = changes.last.map { HistoryMark(key: $0.key, cursor: last, stamp: $0.stamp) }
            if changes.isEmpty {
                // Past the store's newest change: asked by a reader that saw another history.
                let newest = try await self.cursor(of: store)
                if cursor > newest { throw CloudError.cursorAhead(asked: cursor, store: newest) }
            }
            return ChangeBatch(changes: changes, cursor: last, complete: !more, unreadable: unreadable, mark: mark)
        }
        batch.devices = try await names(of: batch.deviceIDs, in: store)
        batch.schemaVersion = try await schemaVersion(of: store)
        return batch
    }

    /// The store's row for `key` as a mark, nil when it has none.
    func mark(in store: String, key: String) async throws(CloudError) -> HistoryMark? {
        try StoreName.check(store)
        // PostgreSQL's text holds no NUL: no row can have such a key.
        guard !key.utf8.contains(0) else { return nil }
        return try await run {
            // At its newest loser's cursor when one was kept since (migration v8).
            let rows = try await client.query("""
                SELECT c.time, c.counter, c.device, greatest(c.cursor, (
                    SELECT max(l.cursor) FROM kvsfs_lost l WHERE l.store = c.store AND l.key = c.key
                        AND (l.lost_for_time, l.lost_for_counter, l.lost_for_device) = (c.time, c.counter, c.device)))
                FROM kvsfs_change c WHERE c.store = \(store) AND c.key = \(key)
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

    public func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion] {
        let versions = try await versions(of: key, in: store, withValueAt: nil)
        return versions.named(by: try await names(of: versions.map(\.stamp.device), in: store))
    }

    public func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion? {
        let versions = try await versions(of: key, in: store, withValueAt: version).filter { $0.version == version }
        return versions.named(by: try await names(of: versions.map(\.stamp.device), in: store)).first
    }

    /// The versions of `key` its store's policy keeps, newest first, with the value of the one
    /// accepted at `valued` only; none once the key's removal is past the retention time. A
    /// stored policy outside its ranges (which the schema's checks keep out) or a row that
    /// cannot be read fails the whole answer with its reason, as in the file remote.
    private func versions(of key: String, in store: String, withValueAt valued: Int64?) async throws(CloudError) -> [KeyVersion] {
        try StoreName.check(store)
        let key = try HistoryPolicy.requestedKey(key)
        // PostgreSQL's text holds no NUL: no row can have such a key.
        guard !key.utf8.contains(0) else { return [] }
        let now = admission.now()
        return try await run {
            // One row without a version when the store keeps none of the key; none without the store.
            let rows = try await client.query("""
                SELECT s.history_versions, s.history_days, v.cursor, CASE WHEN v.cursor = \(valued)::bigint THEN v.value END,
                       octet_length(v.value), v.type, v.time, v.counter, v.device, v.accepted_at
                FROM kvsfs_store s LEFT JOIN LATERAL (
                    SELECT * FROM (
                        SELECT cursor, value, type, time, counter, device, accepted_at FROM kvsfs_version
                        WHERE store = s.id AND key = \(key)
                        UNION ALL
                        SELECT cursor, value, type, time, counter, device, time FROM kvsfs_change c
                        WHERE store = s.id AND key = \(key) AND NOT EXISTS (
                            SELECT 1 FROM kvsfs_version v WHERE v.store = s.id AND v.key = \(key)
                                AND v.time = c.time AND v.counter = c.counter AND v.device = c.device)) kept
                    ORDER BY cursor DESC LIMIT greatest(s.history_versions, 0)) v ON true
                WHERE s.id = \(store)
                """, logger: logger)
            var policy: HistoryPolicy?
            var versions = [KeyVersion]()
            for try await row in rows.decode((Int, Int, Int64?, Data?, Int?, String?, Int64?, Int32?, String?, Int64?).self) {
                let (kept, days, cursor, value, size, typeName, time, counter, device, acceptedAt) = row
                policy = HistoryPolicy(versions: kept, retentionDays: days)
                guard let cursor, let time, let counter, let device, let acceptedAt else { continue }
                let type = typeName.flatMap(ValueType.init(rawValue:))
                if let typeName, type == nil {
                    throw CloudError.unavailable("the version at cursor \(cursor) of \(key.debugDescription) cannot be read: "
                                                 + "its type \(typeName.debugDescription) is unknown")
                }
                guard (size == nil) == (typeName == nil), cursor != valued || (value == nil) == (typeName == nil) else {
                    throw CloudError.unavailable("the version at cursor \(cursor) of \(key.debugDescription) cannot be read: "
                                                 + "it has a type without a value, or a value without a type")
                }
                versions.append(KeyVersion(version: cursor, stamp: ChangeStamp(time: time, counter: counter, device: device),
                                           acceptedAt: acceptedAt, type: type, size: size ?? 0, value: value))
            }
            guard let policy else { return [] }
            do {
                try policy.check()
            } catch {
                throw CloudError.unavailable("the store's history policy is outside the rule: \(error)")
            }
            guard let latest = versions.first, policy.keeps(latest: latest, now: now) else { return [] }
            return versions
        }
    }

    private typealias ChangeRow = (String, Data?, String?, Int64, Int32, String, Int64, Data?, String?, Int64?, Int32?, String?)

    /// A row of `kvsfs_lost` as read: a change that lost to its key's change.
    struct LostRow {
        var value: Data?
        var type: String?
        var time: Int64
        var counter: Int32?
        var device: String?
    }

    /// A key's open conflict from its rows in `kvsfs_lost`, newest first (`KeptChangeList`'s
    /// rule); none when it has none. Rows outside the rule (another program's) are an error;
    /// whoever takes the changes in checks each against the change rule.
    static func kept(_ rows: [LostRow]) throws -> [KeptChange] {
        let lost = try rows.map { row in
            guard let counter = row.counter, let device = row.device else { throw UnreadableConflict("its conflict's stamp is not whole") }
            let type = try row.type.map { name in
                guard let type = ValueType(rawValue: name) else { throw UnreadableConflict("its type \(name.debugDescription) is unknown") }
                return type
            }
            return KeptChange(value: row.value, type: type, stamp: ChangeStamp(time: row.time, counter: counter, device: device))
        }
        return try KeptChangeList.checked(lost.sorted { $0.stamp > $1.stamp })
    }
}
