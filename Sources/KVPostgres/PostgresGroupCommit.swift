import Foundation
import KVCloud
import KVServer
import KVStore
import Logging
import PostgresNIO

// A group of pushes (`PushGroups`) committed as one transaction: every store of the group
// locked in the order of its id (so that instances committing groups at once never deadlock),
// each push decided by `CloudLedger` in turn against the rows its predecessors left, then
// every written row and version in one statement, every store's totals, trimmed histories and
// notification in another. Round trips: begin, lock and read, write the rows, update the
// stores, commit; the same for one push or hundreds (and once per store and instance, the
// statement that makes its row).

extension PostgresServerStorage {
    /// Commits `group` and answers each push in order: its outcome, or its own refusal (a mark
    /// that does not fit) with the others unaffected, or the transaction's error for all.
    func commit(_ group: [GroupedPush]) async -> [Result<PushOutcome, CloudError>] {
        do {
            try await createStores(of: group)
            return try await run {
                try await pushClient.withTransaction(logger: logger) { db in
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
        var versions = [(store: String, row: KeyRow, acceptedAt: Int64, isVersion: Bool)]()  // every accepted write, in order
        var changedStores = Set<String>()
        var admittedAt = [String: Int64]()  // per changed store, the newest clock reading its pushes were admitted at
        // Keys first written in this group after a removal: their versions below the cursor go
        // when that removal was accepted before `oldest`.
        var forgotten = [(key: RowKey, below: Int64, oldest: Int64)]()
        var touched = Set<RowKey>()
        for push in group {
            guard let state = locked.states[push.store], let history = locked.histories[push.store] else {
                // Its row went (the account was removed) after it was made: made again on a retry.
                knownStores.withLock { _ = $0.remove(push.store) }
                results.append(.failure(.unavailable("store \(push.store) vanished during a push")))
                continue
            }
            let rows = locked.rows[push.store] ?? [:]
            do throws(CloudError) {
                // A policy outside its ranges (which the schema's checks keep out) would trim
                // wrongly: the push waits until it is mended (`changeHistoryPolicy`).
                if let violation = HistoryPolicyChange(versions: history.policy.versions, retentionDays: history.policy.retentionDays).violation {
                    throw .unavailable("the store's history policy is outside the rule: \(violation)")
                }
                // Under the store's lock, against the rows the push decides by.
                if let mark = push.mark { try mark.check(newest: state.cursor, held: rows[mark.key].map(\.mark)) }
            } catch {
                results.append(.failure(error))
                continue
            }
            let current = rows.filter { push.pushedKeys.contains($0.key) }.mapValues(\.change)
            let decision = CloudLedger.decide(push.admitted, current: current, state: state, storesNUL: false)
            for write in decision.writes {
                let (change, cursor) = (write.change, write.cursor)
                // A key whose removal was accepted longer ago than the retention time has no
                // history, swept or not: what it had before this write goes (checked against the
                // removal's version by the statement). A removal this group wrote is new.
                let written = RowKey(store: push.store, key: change.key)
                if write.isVersion, touched.insert(written).inserted, locked.rows[push.store]?[change.key]?.change.isTombstone == true {
                    forgotten.append((written, cursor, history.policy.oldestKeptRemoval(now: push.admitted.now)))
                }
                let row = KeyRow(change: change, cursor: cursor)
                locked.rows[push.store, default: [:]][change.key] = row
                versions.append((push.store, row, push.admitted.now, write.isVersion))
            }
            if !decision.writes.isEmpty {
                locked.states[push.store] = decision.state
                changedStores.insert(push.store)
                admittedAt[push.store] = max(admittedAt[push.store] ?? .min, push.admitted.now)
            }
            results.append(.success(decision.outcome))
        }
        try await keepNames(results, of: group, db)
        guard !changedStores.isEmpty else { return results }
        try await Self.write(versions, db, logger)
        // The histories of written keys trimmed to their stores' policies and, at most once an
        // hour per store, those of keys removed longer ago than the retention time dropped;
        // the notifications reach every listening instance when the transaction commits.
        let updated = changedStores.sorted()
        let states = updated.map { locked.states[$0]! }
        var sweptAt = [Int64]()
        var swept = [(store: String, oldest: Int64)]()
        for store in updated {
            let history = locked.histories[store]!
            let now = admittedAt[store]!
            if HistoryPolicy.sweepDue(lastSweep: history.sweptAt, now: now) {
                sweptAt.append(now)
                swept.append((store, history.policy.oldestKeptRemoval(now: now)))
            } else {
                sweptAt.append(history.sweptAt)
            }
        }
        var seen = Set<RowKey>()
        let keys = versions.map { RowKey(store: $0.store, key: $0.row.change.key) }.filter { seen.insert($0).inserted }
        try await db.query("""
            WITH dropped AS (
                DELETE FROM kvsfs_version v USING (
                    SELECT store, key, cursor FROM (
                        SELECT k.store, k.key, k.cursor, s.history_versions,
                               row_number() OVER (PARTITION BY k.store, k.key ORDER BY k.cursor DESC) AS newness
                        FROM unnest(\(keys.map(\.store))::text[], \(keys.map(\.key))::text[]) AS w(store, key)
                        JOIN kvsfs_store s ON s.id = w.store
                        JOIN kvsfs_version k ON k.store = w.store AND k.key = w.key) ranked
                    WHERE newness > history_versions
                    UNION
                    SELECT k.store, k.key, k.cursor FROM unnest(\(swept.map(\.store))::text[], \(swept.map(\.oldest))::bigint[]) AS e(store, oldest)
                    JOIN kvsfs_change c ON c.store = e.store AND c.value IS NULL
                    JOIN kvsfs_version r ON r.store = c.store AND r.key = c.key AND r.time = c.time AND r.counter = c.counter
                        AND r.device = c.device AND r.accepted_at < e.oldest
                    JOIN kvsfs_version k ON k.store = c.store AND k.key = c.key AND k.cursor < r.cursor
                    UNION
                    SELECT k.store, k.key, k.cursor
                    FROM unnest(\(forgotten.map(\.key.store))::text[], \(forgotten.map(\.key.key))::text[],
                                \(forgotten.map(\.below))::bigint[], \(forgotten.map(\.oldest))::bigint[]) AS f(store, key, below, oldest)
                    JOIN kvsfs_version k ON k.store = f.store AND k.key = f.key AND k.cursor < f.below
                    WHERE (SELECT r.type IS NULL AND r.accepted_at < f.oldest FROM kvsfs_version r
                           WHERE r.store = f.store AND r.key = f.key AND r.cursor < f.below ORDER BY r.cursor DESC LIMIT 1)) old
                WHERE v.store = old.store AND v.key = old.key AND v.cursor = old.cursor),
            updated AS (
                UPDATE kvsfs_store s SET cursor = u.cursor, bytes = u.bytes, keys = u.keys, history_swept_at = u.swept_at
                FROM unnest(\(updated)::text[], \(states.map(\.cursor))::bigint[], \(states.map(\.usage.bytes))::bigint[],
                            \(states.map(\.usage.keys))::bigint[], \(sweptAt)::bigint[]) AS u(id, cursor, bytes, keys, swept_at)
                WHERE s.id = u.id RETURNING s.id)
            SELECT pg_notify(\(Self.channel), \(instance + " ") || id) FROM updated
            """, logger: logger)
        // Past a store's bound on its versions' bytes (HistoryPolicy.byteBound, the same
        // numbers), its oldest versions go, whatever their keys, but never a key's newest.
        // Asked only when what the store held and this group added may pass it.
        var added = [String: Int]()
        for version in versions where version.isVersion { added[version.store, default: 0] += version.row.change.size }
        let mayPass = updated.filter { store in
            let history = locked.histories[store]!
            return history.policy.bytesToEvict(held: history.bytes + (added[store] ?? 0), limits: locked.states[store]!.limits) > 0
        }
        guard !mayPass.isEmpty else { return results }
        try await db.query("""
            WITH over AS (
                SELECT id, history_bytes - (total_bytes::bigint * history_versions / 16) * 15 AS excess FROM kvsfs_store
                WHERE id = ANY(\(mayPass)) AND history_bytes > total_bytes::bigint * history_versions)
            DELETE FROM kvsfs_version v USING (
                SELECT r.store, r.key, r.cursor FROM over o CROSS JOIN LATERAL (
                    SELECT k.store, k.key, k.cursor,
                           coalesce(sum(octet_length(k.value)) OVER (ORDER BY k.cursor ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                               AS before
                    FROM kvsfs_version k
                    WHERE k.store = o.id AND k.cursor < (SELECT max(w.cursor) FROM kvsfs_version w WHERE w.store = o.id AND w.key = k.key)) r
                WHERE r.before < o.excess) old
            WHERE v.store = old.store AND v.key = old.key AND v.cursor = old.cursor
            """, logger: logger)
        return results
    }

    /// Keeps the names the group's accepted changes give their devices, in its transaction:
    /// those this instance knows kept as they are cost nothing; the others are written in one
    /// statement, each told after every other name of its store (`told`, the store's own
    /// sequence), and past `DeviceName.keptPerStore` names in a store, those told longest ago go.
    private func keepNames(_ results: [Result<PushOutcome, CloudError>], of group: [GroupedPush], _ db: PostgresConnection) async throws {
        var named = [DeviceNameKey: String]()
        for (push, result) in zip(group, results) {
            guard case .success(let outcome) = result else { continue }
            for (device, name) in outcome.deviceNames { named[DeviceNameKey(store: push.store, device: device)] = name }
        }
        let known = toldNames.withLock { $0 }
        let unknown = named.filter { known[$0.key] != $0.value }.sorted { ($0.key.store, $0.key.device) < ($1.key.store, $1.key.device) }
        guard !unknown.isEmpty else { return }
        let stores = unknown.map(\.key.store), devices = unknown.map(\.key.device), names = unknown.map(\.value)
        let rows = try await db.query("""
            WITH given AS (
                SELECT n.store, n.device, n.name, row_number() OVER (PARTITION BY n.store ORDER BY n.device) AS rank
                FROM unnest(\(stores)::text[], \(devices)::text[], \(names)::text[]) AS n(store, device, name)
                WHERE NOT EXISTS (SELECT 1 FROM kvsfs_device d WHERE d.store = n.store AND d.device = n.device AND d.name = n.name))
            INSERT INTO kvsfs_device AS d (store, device, name, told)
            SELECT g.store, g.device, g.name, coalesce((SELECT max(x.told) FROM kvsfs_device x WHERE x.store = g.store), 0) + g.rank
            FROM given g
            ON CONFLICT (store, device) DO UPDATE SET name = excluded.name, told = excluded.told
            RETURNING d.store, xmax = 0
            """, logger: logger)
        var grown = Set<String>()
        for try await (store, inserted) in rows.decode((String, Bool).self) where inserted { grown.insert(store) }
        if !grown.isEmpty {
            try await db.query("""
                DELETE FROM kvsfs_device v USING (
                    SELECT store, device FROM (
                        SELECT store, device, row_number() OVER (PARTITION BY store ORDER BY told DESC) AS newer
                        FROM kvsfs_device WHERE store = ANY(\(Array(grown)))) ranked
                    WHERE newer > \(DeviceName.keptPerStore)) old
                WHERE v.store = old.store AND v.device = old.device
                """, logger: logger)
        }
        toldNames.withLock { told in
            if told.count > DeviceName.keptPerStore * 64 { told.removeAll() }
            for (key, name) in unknown { told[key] = name }
        }
    }

    /// A row of `kvsfs_change` by its primary key.
    private struct RowKey: Hashable {
        let store: String
        let key: String
    }

    /// Every accepted write as a version of its key, and each key's latest (the one accepted
    /// at its highest cursor) as its row, in one statement of any number of rows, as arrays:
    /// ten parameters, whatever the group's size, each value sent once.
    private static func write(_ rows: [(store: String, row: KeyRow, acceptedAt: Int64, isVersion: Bool)], _ db: PostgresConnection,
                              _ logger: Logger) async throws {
        let changes = rows.map(\.row.change)
        let lost = changes.map(\.lost.first)
        let earlierLost = try changes.map { ByteBuffer(bytes: try KeptChangeList.encode($0.lost) ?? Data()) }
        // bytea[], text[] and bigint[] hold no NULL here: a tombstone and a missing conflict are
        // flagged, a missing type is ''.
        try await db.query("""
            WITH written AS (
                SELECT store, key, CASE WHEN tombstone THEN NULL ELSE value END AS value, NULLIF(type, '') AS type,
                       time, counter, device, cursor, accepted_at, is_version,
                       CASE WHEN has_lost AND NOT lost_removal THEN lost_value END AS lost_value,
                       CASE WHEN has_lost THEN NULLIF(lost_type, '') END AS lost_type,
                       CASE WHEN has_lost THEN lost_time END AS lost_time, CASE WHEN has_lost THEN lost_counter END AS lost_counter,
                       CASE WHEN has_lost THEN lost_device END AS lost_device,
                       CASE WHEN has_lost THEN NULLIF(also_lost, ''::bytea) END AS also_lost,
                       CASE WHEN has_lost THEN time END AS lost_for_time, CASE WHEN has_lost THEN counter END AS lost_for_counter,
                       CASE WHEN has_lost THEN device END AS lost_for_device
                FROM unnest(\(rows.map(\.store))::text[], \(changes.map(\.key))::text[],
                        \(changes.map { ByteBuffer(bytes: $0.value ?? Data()) })::bytea[], \(changes.map { $0.value == nil })::bool[],
                        \(changes.map { $0.type?.rawValue ?? "" })::text[], \(changes.map(\.stamp.time))::bigint[],
                        \(changes.map(\.stamp.counter))::int[], \(changes.map(\.stamp.device))::text[], \(rows.map(\.row.cursor))::bigint[],
                        \(rows.map(\.acceptedAt))::bigint[], \(rows.map(\.isVersion))::bool[], \(lost.map { $0 != nil })::bool[],
                        \(lost.map { ByteBuffer(bytes: $0?.value ?? Data()) })::bytea[], \(lost.map { $0?.value == nil })::bool[],
                        \(lost.map { $0?.type?.rawValue ?? "" })::text[], \(lost.map { $0?.stamp.time ?? 0 })::bigint[],
                        \(lost.map { $0?.stamp.counter ?? 0 })::int[], \(lost.map { $0?.stamp.device ?? "" })::text[],
                        \(earlierLost)::bytea[])
                    AS row(store, key, value, tombstone, type, time, counter, device, cursor, accepted_at, is_version,
                           has_lost, lost_value, lost_removal, lost_type, lost_time, lost_counter, lost_device, also_lost)),
            versions AS (
                INSERT INTO kvsfs_version (store, key, cursor, value, type, time, counter, device, accepted_at)
                SELECT store, key, cursor, value, type, time, counter, device, accepted_at FROM written WHERE is_version)
            INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor,
                                      lost_value, lost_type, lost_time, lost_counter, lost_device, also_lost,
                                      lost_for_time, lost_for_counter, lost_for_device)
            SELECT DISTINCT ON (store, key) store, key, value, type, time, counter, device, cursor,
                   lost_value, lost_type, lost_time, lost_counter, lost_device, also_lost,
                   lost_for_time, lost_for_counter, lost_for_device FROM written
            ORDER BY store, key, cursor DESC
            ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                counter = excluded.counter, device = excluded.device, cursor = excluded.cursor,
                lost_value = excluded.lost_value, lost_type = excluded.lost_type, lost_time = excluded.lost_time,
                lost_counter = excluded.lost_counter, lost_device = excluded.lost_device, also_lost = excluded.also_lost,
                lost_for_time = excluded.lost_for_time, lost_for_counter = excluded.lost_for_counter,
                lost_for_device = excluded.lost_for_device
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
            try await pushClient.query("""
                INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                SELECT id, 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes)
                FROM unnest(\(unseen)::text[]) AS id
                ON CONFLICT (id) DO NOTHING
                """, logger: logger)
        }
        knownStores.withLock { $0.formUnion(unseen) }
    }

    /// What a group's lock read: each store's state and history settings, and the rows of the
    /// keys its pushes name.
    private struct Locked {
        var states: [String: CloudStoreState] = [:]
        var histories: [String: LockedHistory] = [:]
        var rows: [String: [String: KeyRow]] = [:]
    }

    /// A store's history policy as stored (unchecked), and when its removed keys' histories
    /// were last dropped (milliseconds since 1970).
    private struct LockedHistory {
        let policy: HistoryPolicy
        let sweptAt: Int64
        /// The bytes of the values the store's versions held when it was locked.
        let bytes: Int
    }

    /// Locks the rows of `stores` (in the order of their ids) and reads their states with the
    /// rows of the keys `group` names; a store without a row is missing from `states`.
    private static func lock(_ stores: [String], keys group: [GroupedPush], _ db: PostgresConnection, _ logger: Logger) async throws -> Locked {
        var seen = Set<RowKey>()
        let pairs = group.flatMap { push in push.keys.map { (push.store, $0) } }.filter { seen.insert(RowKey(store: $0.0, key: $0.1)).inserted }
        let rows = try await db.query("""
            WITH locked AS (
                SELECT id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes,
                       history_versions, history_days, history_swept_at, kept_bytes, history_bytes FROM kvsfs_store
                WHERE id = ANY(\(stores)) ORDER BY id FOR UPDATE)
            SELECT l.id, l.cursor, l.bytes, l.keys, l.total_bytes, l.value_bytes, l.max_keys, l.key_name_bytes,
                   l.history_versions, l.history_days, l.history_swept_at, l.kept_bytes, l.history_bytes, c.key, c.value, c.type, c.time, c.counter, c.device, c.cursor,
                   c.lost_value, c.lost_type, c.lost_time, c.lost_counter, c.lost_device, c.also_lost
            FROM locked l LEFT JOIN LATERAL (
                SELECT c.* FROM unnest(\(pairs.map(\.0))::text[], \(pairs.map(\.1))::text[]) AS w(store, key)
                JOIN kvsfs_change c ON c.store = w.store AND c.key = w.key WHERE w.store = l.id) c ON true
            """, logger: logger)
        var locked = Locked()
        for try await row in rows.decode((String, Int64, Int, Int, Int, Int, Int, Int, Int, Int, Int64, Int, Int,
                                          String?, Data?, String?, Int64?, Int32?, String?, Int64?,
                                          Data?, String?, Int64?, Int32?, String?, Data?).self) {
            let (store, cursor, bytes, count, totalBytes, valueBytes, maxKeys, keyNameBytes, versions, days, sweptAt, keptBytes, historyBytes,
                 key, value, type, time, counter, device, keyCursor, lostValue, lostType, lostTime, lostCounter, lostDevice,
                 earlierLost) = row
            locked.states[store] = CloudStoreState(
                limits: QuotaLimits(totalBytes: totalBytes, valueBytes: valueBytes, keys: maxKeys, keyNameBytes: keyNameBytes),
                usage: QuotaUsage(bytes: bytes, keys: count), cursor: cursor, keptBytes: keptBytes)
            locked.histories[store] = LockedHistory(policy: HistoryPolicy(versions: versions, retentionDays: days), sweptAt: sweptAt,
                                                    bytes: historyBytes)
            if let key, let time, let counter, let device, let keyCursor {
                var change = StampedChange(key: key, value: value, type: type.flatMap(ValueType.init(rawValue:)),
                                           stamp: ChangeStamp(time: time, counter: counter, device: device))
                do {
                    change.lost = try PostgresServerStorage.lost(value: lostValue, type: lostType, time: lostTime, counter: lostCounter,
                                                                 device: lostDevice, earlier: earlierLost)
                } catch {
                    // Another program's columns: no conflict, which the push decides anew.
                    change.lost = []
                }
                locked.rows[store, default: [:]][key] = KeyRow(change: change, cursor: keyCursor)
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

/// One push as its group commits it: the admitted changes, and the keys whose rows decide it.
struct GroupedPush: Sendable {
    let store: String
    let admitted: Admission
    /// The keys the push writes.
    let pushedKeys: Set<String>
    /// The rows to read under the lock: the pushed keys and the mark's (none holding NUL,
    /// which PostgreSQL's text cannot hold).
    let keys: [String]
    let mark: HistoryMark?
}
