import Foundation
import KVCloud
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
        let schemas = try await Self.schemas(at: locked.schemaVersions, decoded: decodedSchemas, db, logger)
        var results = [Result<PushOutcome, CloudError>]()
        var versions = [(store: String, row: KeyRow, acceptedAt: Int64, isVersion: Bool)]()  // every accepted write, in order
        var changedStores = Set<String>()
        var admittedAt = [String: Int64]()  // per changed store, the newest clock reading its pushes were admitted at
        // Keys first written in this group after a removal: their versions below the cursor go
        // when that removal was accepted before `oldest`.
        var forgotten = [(key: RowKey, below: Int64, oldest: Int64)]()
        var touched = Set<RowKey>()
        for push in group {
            guard var state = locked.states[push.store], let history = locked.histories[push.store] else {
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
                // The schema at the version the locked row holds.
                state.schema = try schemas[push.store]?.get() ?? nil
            } catch {
                results.append(.failure(error))
                continue
            }
            let pushed = rows.filter { push.pushedKeys.contains($0.key) }
            let decision = CloudLedger.decide(push.admitted, current: pushed.mapValues(\.change),
                                              versions: pushed.compactMapValues(\.version), state: state, storesNUL: false, kept: .rows)
            for write in decision.writes {
                let (change, cursor) = (write.change, write.cursor)
                // A key whose removal was accepted longer ago than the retention time has no
                // history, swept or not: what it had before this write goes (checked against the
                // removal's version by the statement). A removal this group wrote is new.
                let written = RowKey(store: push.store, key: change.key)
                if write.isVersion, touched.insert(written).inserted, locked.rows[push.store]?[change.key]?.change.isTombstone == true {
                    forgotten.append((written, cursor, history.policy.oldestKeptRemoval(now: push.admitted.now)))
                }
                // A change given again keeps its version; a push later in the group judges by it.
                let version = write.isVersion ? cursor : locked.rows[push.store]?[change.key]?.version
                let row = KeyRow(change: change, cursor: cursor, version: version)
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

    /// Every accepted write as a version of its key, each key's latest change (the one accepted
    /// at its highest cursor) as its row, and the changes that lost to it as rows of
    /// `kvsfs_lost` (migration v8), in one statement of any number of rows each, as arrays.
    ///
    /// A key given again with a conflict and no new change keeps its row as it is: only the
    /// changes that lost which it did not keep before are inserted (at the cursor it is given
    /// again at, which reads take as the key's), those it no longer keeps deleted; no other row
    /// is written. Only when none was inserted does its row take the new cursor. A key with a
    /// new change has its row written; the row's trigger drops what lost to the change before,
    /// and the new change's losers are written after it.
    private static func write(_ rows: [(store: String, row: KeyRow, acceptedAt: Int64, isVersion: Bool)], _ db: PostgresConnection,
                              _ logger: Logger) async throws {
        var finals = [RowKey: (change: StampedChange, cursor: Int64, versioned: Bool)]()
        for written in rows {
            let key = RowKey(store: written.store, key: written.row.change.key)
            let versioned = written.isVersion || (finals[key]?.versioned ?? false)
            finals[key] = (written.row.change, written.row.cursor, versioned)
        }
        let changes = rows.map(\.row.change)
        // The last write of each key with a new change is its row.
        let isRow = rows.map { written in
            let final = finals[RowKey(store: written.store, key: written.row.change.key)]!
            return final.versioned && final.cursor == written.row.cursor
        }
        // bytea[] and text[] hold no NULL here: a tombstone is flagged, a missing type is ''.
        if rows.contains(where: \.isVersion) {
            try await db.query("""
                WITH written AS (
                    SELECT store, key, CASE WHEN tombstone THEN NULL ELSE value END AS value, NULLIF(type, '') AS type,
                           time, counter, device, cursor, accepted_at, is_version, is_row
                    FROM unnest(\(rows.map(\.store))::text[], \(changes.map(\.key))::text[],
                            \(changes.map { ByteBuffer(bytes: $0.value ?? Data()) })::bytea[], \(changes.map { $0.value == nil })::bool[],
                            \(changes.map { $0.type?.rawValue ?? "" })::text[], \(changes.map(\.stamp.time))::bigint[],
                            \(changes.map(\.stamp.counter))::int[], \(changes.map(\.stamp.device))::text[], \(rows.map(\.row.cursor))::bigint[],
                            \(rows.map(\.acceptedAt))::bigint[], \(rows.map(\.isVersion))::bool[], \(isRow)::bool[])
                        AS row(store, key, value, tombstone, type, time, counter, device, cursor, accepted_at, is_version, is_row)),
                versions AS (
                    INSERT INTO kvsfs_version (store, key, cursor, value, type, time, counter, device, accepted_at)
                    SELECT store, key, cursor, value, type, time, counter, device, accepted_at FROM written WHERE is_version)
                INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor)
                SELECT store, key, value, type, time, counter, device, cursor FROM written WHERE is_row
                ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                    counter = excluded.counter, device = excluded.device, cursor = excluded.cursor
                """, logger: logger)
        }
        // The keys given again without a new change, and those whose new change has losers.
        let conflicted = finals.filter { !$0.value.versioned || !$0.value.change.lost.isEmpty }.sorted { ($0.key.store, $0.key.key) < ($1.key.store, $1.key.key) }
        guard !conflicted.isEmpty else { return }
        let lost = conflicted.flatMap { key, final in final.change.lost.map { (key: key, winner: final.change.stamp, cursor: final.cursor, change: $0) } }
        try await db.query("""
            WITH k AS (
                SELECT * FROM unnest(\(conflicted.map(\.key.store))::text[], \(conflicted.map(\.key.key))::text[],
                                     \(conflicted.map(\.value.cursor))::bigint[], \(conflicted.map { !$0.value.versioned })::bool[])
                    AS k(store, key, cursor, given_again)),
            kept AS (
                SELECT store, key, time, counter, device, CASE WHEN removal THEN NULL ELSE value END AS value, NULLIF(type, '') AS type,
                       for_time, for_counter, for_device, cursor
                FROM unnest(\(lost.map(\.key.store))::text[], \(lost.map(\.key.key))::text[], \(lost.map(\.change.stamp.time))::bigint[],
                            \(lost.map(\.change.stamp.counter))::int[], \(lost.map(\.change.stamp.device))::text[],
                            \(lost.map { ByteBuffer(bytes: $0.change.value ?? Data()) })::bytea[], \(lost.map { $0.change.value == nil })::bool[],
                            \(lost.map { $0.change.type?.rawValue ?? "" })::text[], \(lost.map(\.winner.time))::bigint[],
                            \(lost.map(\.winner.counter))::int[], \(lost.map(\.winner.device))::text[], \(lost.map(\.cursor))::bigint[])
                    AS kept(store, key, time, counter, device, value, removal, type, for_time, for_counter, for_device, cursor)),
            dropped AS (
                DELETE FROM kvsfs_lost l USING k WHERE l.store = k.store AND l.key = k.key AND NOT EXISTS (
                    SELECT 1 FROM kept WHERE kept.store = l.store AND kept.key = l.key
                        AND kept.time = l.time AND kept.counter = l.counter AND kept.device = l.device)),
            added AS (
                INSERT INTO kvsfs_lost (store, key, time, counter, device, value, type, lost_for_time, lost_for_counter, lost_for_device, cursor)
                SELECT store, key, time, counter, device, value, type, for_time, for_counter, for_device, cursor FROM kept
                ON CONFLICT DO NOTHING RETURNING store, key)
            UPDATE kvsfs_change c SET cursor = k.cursor FROM k
            WHERE k.given_again AND c.store = k.store AND c.key = k.key
                AND NOT EXISTS (SELECT 1 FROM added a WHERE a.store = k.store AND a.key = k.key)
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
        /// Each store's schema version (`RemoteSchema`), as its locked row holds it.
        var schemaVersions: [String: Int64] = [:]
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
        // The keys of conditional changes, whose versions their decision needs.
        let conditional = Set(group.flatMap { push in
            push.admitted.changes.filter { $0.condition != nil }.map { RowKey(store: push.store, key: $0.key) }
        })
        let versioned = pairs.map { conditional.contains(RowKey(store: $0.0, key: $0.1)) }
        let rows = try await db.query("""
            WITH locked AS (
                SELECT id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes,
                       history_versions, history_days, history_swept_at, kept_bytes, history_bytes, schema_version FROM kvsfs_store
                WHERE id = ANY(\(stores)) ORDER BY id FOR UPDATE)
            SELECT l.id, l.cursor, l.bytes, l.keys, l.total_bytes, l.value_bytes, l.max_keys, l.key_name_bytes,
                   l.history_versions, l.history_days, l.history_swept_at, l.kept_bytes, l.history_bytes, l.schema_version, c.key, c.value, c.type, c.time, c.counter, c.device, c.at,
                   c.version, k.value, k.type, k.time, k.counter, k.device
            FROM locked l LEFT JOIN LATERAL (
                SELECT c.key, c.value, c.type, c.time, c.counter, c.device, c.store, greatest(c.cursor, (
                    SELECT max(x.cursor) FROM kvsfs_lost x WHERE x.store = c.store AND x.key = c.key
                        AND (x.lost_for_time, x.lost_for_counter, x.lost_for_device) = (c.time, c.counter, c.device))) AS at,
                    -- Its version as history counts it: its version row's cursor (by stamp), else its own.
                    CASE WHEN w.versioned THEN coalesce((
                        SELECT max(v.cursor) FROM kvsfs_version v WHERE v.store = c.store AND v.key = c.key
                            AND (v.time, v.counter, v.device) = (c.time, c.counter, c.device)), c.cursor) END AS version
                FROM unnest(\(pairs.map(\.0))::text[], \(pairs.map(\.1))::text[], \(versioned)::bool[]) AS w(store, key, versioned)
                JOIN kvsfs_change c ON c.store = w.store AND c.key = w.key WHERE w.store = l.id) c ON true
            LEFT JOIN kvsfs_lost k ON k.store = c.store AND k.key = c.key
                AND (k.lost_for_time, k.lost_for_counter, k.lost_for_device) = (c.time, c.counter, c.device)
            """, logger: logger)
        var locked = Locked()
        // One row per store, key and change that lost to the key's: each key's are gathered,
        // then read as its conflict.
        var lostRows = [RowKey: [LostRow]]()
        for try await row in rows.decode((String, Int64, Int, Int, Int, Int, Int, Int, Int, Int, Int64, Int, Int, Int64,
                                          String?, Data?, String?, Int64?, Int32?, String?, Int64?, Int64?,
                                          Data?, String?, Int64?, Int32?, String?).self) {
            let (store, cursor, bytes, count, totalBytes, valueBytes, maxKeys, keyNameBytes, versions, days, sweptAt, keptBytes, historyBytes,
                 schemaVersion, key, value, type, time, counter, device, keyCursor, keyVersion, lostValue, lostType, lostTime, lostCounter, lostDevice) = row
            locked.states[store] = CloudStoreState(
                limits: QuotaLimits(totalBytes: totalBytes, valueBytes: valueBytes, keys: maxKeys, keyNameBytes: keyNameBytes),
                usage: QuotaUsage(bytes: bytes, keys: count), cursor: cursor, keptBytes: keptBytes)
            locked.schemaVersions[store] = schemaVersion
            locked.histories[store] = LockedHistory(policy: HistoryPolicy(versions: versions, retentionDays: days), sweptAt: sweptAt,
                                                    bytes: historyBytes)
            if let key, let time, let counter, let device, let keyCursor {
                if locked.rows[store]?[key] == nil {
                    let change = StampedChange(key: key, value: value, type: type.flatMap(ValueType.init(rawValue:)),
                                               stamp: ChangeStamp(time: time, counter: counter, device: device))
                    locked.rows[store, default: [:]][key] = KeyRow(change: change, cursor: keyCursor, version: keyVersion)
                }
                if let lostTime {
                    lostRows[RowKey(store: store, key: key), default: []].append(
                        LostRow(value: lostValue, type: lostType, time: lostTime, counter: lostCounter, device: lostDevice))
                }
            }
        }
        for (key, lost) in lostRows {
            do {
                locked.rows[key.store]?[key.key]?.change.lost = try PostgresServerStorage.kept(lost)
            } catch {
                // Another program's rows: no conflict, which the push decides anew (and its
                // write replaces those rows).
                locked.rows[key.store]?[key.key]?.change.lost = []
            }
        }
        return locked
    }
}

/// A key's row: its latest change and the cursor it was accepted at.
struct KeyRow {
    var change: StampedChange
    var cursor: Int64
    /// The change's version (`KeyVersion.version`): read for the keys of conditional changes
    /// alone, nil for the others.
    var version: Int64? = nil
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
