import Foundation
import GRDB
import Synchronization

/// The local store: keys and their property-list values in one SQLite database (WAL),
/// checked against the quotas before anything is committed.
///
/// Invariants: the in-memory index equals the live rows of the `entry` table with the change
/// journal's rows applied, after every call; a refused operation changes neither; every committed
/// change is in the change log (each key's row, deleted keys as tombstones, in `sequence` order).
/// A committed change survives a crash of the process (it is in the journal or the database);
/// `makeDurable()` also makes it survive a crash of the machine.
public final class KeyValueStore: Sendable {
    /// A key's value as the store holds it.
    public struct Entry: Sendable, Equatable {
        public let key: String
        /// The canonical XML property list.
        public let xml: [UInt8]
        public let type: ValueType
        public let modifiedAt: Date
        /// What the value counts against the quota: the length of `xml`.
        public var size: Int { xml.count }
    }

    private struct State {
        var entries: [String: Entry]
        /// Every key's latest change, deleted keys included: its stamp and sync state.
        var changes: [String: ChangeMeta]
        var limits: QuotaLimits
        var usedBytes: Int
        var revision: UInt64 = 0
        var lastSequence: Int64
        var clock: HybridLogicalClock
        /// Commits not yet in the database; every write to the database takes them along first.
        let journal: ChangeJournal
        /// Journaled rows the database refused, kept rather than dropped (`quarantined`).
        let quarantine: ChangeJournal
        var usage: QuotaUsage { QuotaUsage(bytes: usedBytes, keys: entries.count) }
    }

    private struct ChangeMeta {
        var stamp: ChangeStamp
        var syncState: SyncState
    }

    private let database: DatabaseQueue
    private let state: Mutex<State>
    private let clock: @Sendable () -> Date
    /// Boxed: a closure kept directly in a Mutex is reabstracted on every `withLock` and written
    /// back wrapped, so each call would add thunks to the chain.
    private final class Observer: Sendable {
        let notify: @Sendable () -> Void
        init(_ notify: @escaping @Sendable () -> Void) { self.notify = notify }
    }
    private let changeObserver = Mutex<Observer?>(nil)
    private let readOnlyReason = Mutex<String?>(nil)
    /// The id this store's changes carry in their stamps.
    public let deviceID: String

    /// Opens (creating if needed) the store at `path`. `limits`, when given, become the store's own.
    public init(path: String, limits: QuotaLimits? = nil, clock: @escaping @Sendable () -> Date = { Date() }) throws(StoreError) {
        self.clock = clock
        do {
            var configuration = Configuration()
            configuration.prepareDatabase { db in
                // The mount holds the store alone (StoreLock): no shared-memory WAL index needed.
                try db.execute(sql: "PRAGMA locking_mode = EXCLUSIVE")
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            OwnerOnlyFile.create(path)
            database = try DatabaseQueue(path: path, configuration: configuration)
            try StoreSchema.migrator.migrate(database)
            // Opened once the database is ours (exclusive locking): nobody else replays it.
            let journal = try ChangeJournal(path: path + ".changes")
            let quarantine = try ChangeJournal(path: path + ".quarantine")
            var refused = [ChangeJournal.Row]()
            let (loaded, device) = try database.write { db -> (State, String) in
                refused = try Self.record(journaled: journal.pending, db)
                if let limits { try Self.saveLimits(limits, db) }
                let device = try Self.deviceID(db)
                let records = try ChangeRecord.fetchAll(db, sql: ChangeRecord.selection)
                var entries = [String: Entry](minimumCapacity: records.count)
                var changes = [String: ChangeMeta](minimumCapacity: records.count)
                let physical = milliseconds(clock())
                var clock = HybridLogicalClock(device: device)
                for record in records {
                    entries[record.key] = Entry(record)
                    changes[record.key] = ChangeMeta(stamp: record.stamp, syncState: record.syncState)
                    clock.observe(record.stamp, physical: physical)
                }
                let state = State(
                    entries: entries,
                    changes: changes,
                    limits: try Self.loadLimits(db),
                    usedBytes: entries.values.reduce(0) { $0 + $1.size },
                    lastSequence: records.map(\.sequence).max() ?? 0,
                    clock: clock,
                    journal: journal,
                    quarantine: quarantine)
                return (state, device)
            }
            if !refused.isEmpty { try quarantine.append(refused) }
            journal.clear()
            deviceID = device
            state = Mutex(loaded)
        } catch let error as StoreError {
            throw error
        } catch {
            throw .database(String(describing: error))
        }
    }

    /// A store dropped in order leaves its journal empty (one that crashed is replayed on open).
    deinit {
        state.withLock { state in try? moveJournalToDatabase(&state) }
    }

    public var limits: QuotaLimits { state.withLock { $0.limits } }
    public var usage: QuotaUsage { state.withLock { $0.usage } }
    public var ledger: QuotaLedger { QuotaLedger(limits: limits) }

    public func entry(forKey key: String) -> Entry? {
        state.withLock { $0.entries[key] }
    }

    public func keys() -> [String] {
        state.withLock { $0.entries.keys.sorted() }
    }

    /// Sets `key` to `value`. Writing a value equal to the stored one changes nothing. Returns
    /// the key's entry as it stands after the put: nil when another change removed it since.
    @discardableResult
    public func put(_ value: PropertyListValue, forKey key: String) throws(StoreError) -> Entry? {
        try apply([.put(key, value)])
        return entry(forKey: key)
    }

    public func removeValue(forKey key: String) throws(StoreError) {
        try apply([.delete(key)])
    }

    /// Moves the value of `source` to `destination` in one transaction, replacing its value
    /// unless `replacing` is false (then `keyExists`).
    public func moveValue(from source: String, to destination: String, replacing: Bool = true) throws(StoreError) {
        if !replacing, source != destination, entry(forKey: destination) != nil { throw .keyExists(destination) }
        try apply([.move(from: source, to: destination)])
    }

    /// Applies `changes` in order as one transaction: all of them, or none when the result
    /// would break a limit or a change names a missing key.
    ///
    /// The limits are checked on the result: a new value over the per-value limit, a key count
    /// or a byte total that grows past its limit is refused. Changes that leave a key's value as
    /// it was are not written and not logged.
    public func apply(_ changes: [KeyChange]) throws(StoreError) {
        if let reason = readOnlyReason.withLock({ $0 }) { throw .readOnly(reason) }
        let committed = try state.withLock { (state: inout State) throws(StoreError) -> Bool in
            let ledger = QuotaLedger(limits: state.limits)
            let unstamped = Date(timeIntervalSince1970: 0)  // each edit gets its stamp's time below
            var staged = [String: Entry?]()
            func current(_ key: String) -> Entry? {
                if let pending = staged[key] { return pending }
                return state.entries[key]
            }
            for change in changes {
                switch change {
                case .put(let key, let value):
                    try ledger.checkKeyName(key)
                    let xml = try PropertyListCodec.encodeXML(value)
                    try ledger.checkValueSize(xml.count)
                    staged[key] = .some(Entry(key: key, xml: xml, type: value.type, modifiedAt: unstamped))
                case .delete(let key):
                    guard current(key) != nil else { throw .noSuchKey(key) }
                    staged[key] = .some(nil)
                case .move(let source, let destination):
                    guard let moving = current(source) else { throw .noSuchKey(source) }
                    guard source != destination else { continue }
                    try ledger.checkKeyName(destination)
                    staged[source] = .some(nil)
                    staged[destination] = .some(Entry(key: destination, xml: moving.xml, type: moving.type, modifiedAt: unstamped))
                }
            }
            // Keep only real changes, then check the result against the limits.
            let edits = staged.filter { key, new in new?.xml != state.entries[key]?.xml }
            guard !edits.isEmpty else { return false }
            var keys = state.entries.count
            var bytes = state.usedBytes
            for (key, new) in edits {
                let old = state.entries[key]
                keys += (new == nil ? 0 : 1) - (old == nil ? 0 : 1)
                bytes += (new?.size ?? 0) - (old?.size ?? 0)
            }
            try ledger.checkResult(before: state.usage, after: QuotaUsage(bytes: bytes, keys: keys),
                                   added: edits.values.reduce(0) { $0 + ($1?.size ?? 0) })
            var clock = state.clock
            let physical = milliseconds(now())
            let stamped = edits.sorted(by: { $0.key < $1.key }).map { key, new in
                let stamp = clock.stamp(physical: physical, after: state.changes[key]?.stamp)
                let entry = new.map { Entry(key: key, xml: $0.xml, type: $0.type, modifiedAt: stamp.date) }
                return (key, entry, stamp)
            }
            try commit(stamped.map { ($0.0, $0.1, $0.2, SyncState.pending) }, in: &state)
            state.clock = clock
            state.usedBytes = bytes
            return true
        }
        if committed { changeObserver.withLock { $0 }?.notify() }
    }

    /// Commits changes (already checked) to the journal and brings the in-memory index along;
    /// the database gets them with the next batch.
    private func commit(_ changes: [(key: String, entry: Entry?, stamp: ChangeStamp, syncState: SyncState)], in state: inout State) throws(StoreError) {
        guard !changes.isEmpty else { return }
        var sequence = state.lastSequence
        let rows = changes.map { change in
            sequence += 1
            return ChangeJournal.Row(key: change.key, entry: change.entry, stamp: change.stamp, syncState: change.syncState, sequence: sequence)
        }
        try state.journal.append(rows)
        state.lastSequence = sequence
        for row in rows {
            state.entries[row.key] = row.entry
            state.changes[row.key] = ChangeMeta(stamp: row.stamp, syncState: row.syncState)
        }
        state.revision &+= 1
        // Committed already: a batch that fails now is retried with the next write.
        if state.journal.needsFlush { try? moveJournalToDatabase(&state) }
    }

    // MARK: - Sync

    /// Calls `observer` after every committed local change (never for external ones), outside
    /// the store's lock.
    public func observeLocalChanges(_ observer: @escaping @Sendable () -> Void) {
        let box = Observer(observer)
        changeObserver.withLock { $0 = box }
    }

    /// Refuses local changes from now on (nil: accepts them again), for a device the remote
    /// lets read only. External changes still apply.
    public func setReadOnly(_ reason: String?) {
        readOnlyReason.withLock { $0 = reason }
    }

    /// Why local changes are refused, if they are.
    public var readOnly: String? { readOnlyReason.withLock { $0 } }

    /// Where `key`'s latest change stands with the remote; nil for a key never written.
    public func syncState(forKey key: String) -> SyncState? {
        state.withLock { $0.changes[key]?.syncState }
    }

    /// How many keys have changes the remote has not yet accepted.
    public var pendingCount: Int {
        state.withLock { $0.changes.values.count { $0.syncState == .pending } }
    }

    /// The latest change of every key not yet accepted by the remote: one per key, so that a
    /// burst of writes to a key travels as its last state.
    public func pendingChanges() -> [StampedChange] {
        state.withLock { state in
            state.changes.filter { $0.value.syncState == .pending }.map { key, meta in
                Self.stampedChange(key, meta.stamp, state.entries[key])
            }
            .sorted { $0.stamp < $1.stamp }
        }
    }

    /// Every key's latest change, deleted keys included, by key.
    public func allChanges() -> [StampedChange] {
        state.withLock { state in
            state.changes.map { key, meta in Self.stampedChange(key, meta.stamp, state.entries[key]) }
                .sorted { $0.key < $1.key }
        }
    }

    /// The latest change of `key`, a tombstone if it was deleted; nil for a key never written.
    public func allChanges(forKey key: String) -> StampedChange? {
        state.withLock { state in state.changes[key].map { Self.stampedChange(key, $0.stamp, state.entries[key]) } }
    }

    /// Whether `change` would replace what the store has under the merge rule.
    public func accepts(_ change: StampedChange) -> Bool {
        state.withLock { state in state.changes[change.key].map { change.stamp > $0.stamp } ?? true }
    }

    /// Marks changes the remote accepted as synced, unless the key changed again since.
    public func markPushed(_ changes: [StampedChange]) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            let pushed = changes.filter { state.changes[$0.key]?.stamp == $0.stamp && state.changes[$0.key]?.syncState != .synced }
            try markSynced(pushed.map(\.key), in: &state)
        }
    }

    /// Forgets tombstones the remote accepted without storing (it never had their keys), unless
    /// the key changed again since: the store then holds no row for the key, as the remote.
    public func forget(_ tombstones: [StampedChange]) throws(StoreError) {
        guard !tombstones.isEmpty else { return }  // every push round asks: take no lock for nothing
        try state.withLock { (state: inout State) throws(StoreError) in
            let forgotten = tombstones.filter { $0.isTombstone && state.entries[$0.key] == nil && state.changes[$0.key]?.stamp == $0.stamp }
            guard !forgotten.isEmpty else { return }
            try write(&state) { db in
                let delete = try db.cachedStatement(sql: "DELETE FROM entry WHERE key = ? AND value IS NULL")
                for change in forgotten {
                    let row = DirectBinding(delete)
                    row.bind(1, change.key)
                    try row.run(in: db)
                }
            }
            for change in forgotten { state.changes[change.key] = nil }
        }
    }

    /// Makes the latest change of each of `keys` pending again: the remote lost it and it must
    /// be pushed again.
    public func markPending(_ keys: [String]) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            let keys = keys.filter { state.changes[$0] != nil && state.changes[$0]?.syncState != .pending }
            try setSyncState(.pending, for: keys, in: &state)
        }
    }

    private func markSynced(_ keys: [String], in state: inout State) throws(StoreError) {
        try setSyncState(.synced, for: keys, in: &state)
    }

    /// Sets where the latest change of each of `keys` stands with the remote, in the database
    /// (after the journal) and in the index.
    private func setSyncState(_ syncState: SyncState, for keys: [String], in state: inout State) throws(StoreError) {
        guard !keys.isEmpty else { return }
        try write(&state) { db in
            let update = try db.cachedStatement(sql: "UPDATE entry SET syncState = ? WHERE key = ?")
            for key in keys {
                let row = DirectBinding(update)
                row.bind(1, syncState.rawValue)
                row.bind(2, key)
                try row.run(in: db)
            }
        }
        for key in keys { state.changes[key]?.syncState = syncState }
    }

    /// Takes in changes made elsewhere. With `.merge`, a change replaces the key's value only
    /// when its stamp is greater (an equal stamp is the remote confirming the local change);
    /// the other modes replace unconditionally. External changes are not checked against the
    /// local limits: the remote enforces the store's quotas, and replicas must converge.
    /// Returns the keys whose visible value changed.
    @discardableResult
    public func applyExternal(_ changes: [StampedChange], mode: ExternalApplyMode = .merge) throws(StoreError) -> [String] {
        try state.withLock { (state: inout State) throws(StoreError) -> [String] in
            var rows = [(key: String, entry: Entry?, stamp: ChangeStamp, syncState: SyncState)]()
            var confirmed = [StampedChange]()
            var latest = [String: StampedChange]()
            for change in changes where latest[change.key].map({ change.stamp > $0.stamp }) ?? true {
                latest[change.key] = change
            }
            for change in latest.values.sorted(by: { $0.stamp < $1.stamp }) {
                let current = state.changes[change.key]
                if mode == .merge, let current, change.stamp <= current.stamp {
                    if change.stamp == current.stamp, current.syncState == .pending { confirmed.append(change) }
                    continue
                }
                let entry = change.value.map {
                    Entry(key: change.key, xml: [UInt8]($0), type: change.type ?? .string, modifiedAt: change.stamp.date)
                }
                rows.append((change.key, entry, change.stamp, mode == .rollback ? .refused : .synced))
            }
            let changed = rows.filter { state.entries[$0.key]?.xml != $0.entry?.xml }.map(\.key)
            var bytes = state.usedBytes
            for row in rows { bytes += (row.entry?.size ?? 0) - (state.entries[row.key]?.size ?? 0) }
            try commit(rows, in: &state)
            state.usedBytes = bytes
            let physical = milliseconds(now())
            for row in rows { state.clock.observe(row.stamp, physical: physical) }
            try markSynced(confirmed.map(\.key), in: &state)
            return changed
        }
    }

    /// A setting kept with the store (the sync cursor, the remote's identity); nil when never
    /// set. A failure to read is thrown, never taken for "never set".
    public func setting(_ name: String) throws(StoreError) -> String? {
        do {
            return try database.read { db in try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = ?", arguments: [name]) }
        } catch {
            throw .database(String(describing: error))
        }
    }

    public func setSetting(_ name: String, to value: String?) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            try write(&state) { db in
                if let value {
                    try SettingRecord(name: name, value: value).save(db)
                } else {
                    _ = try SettingRecord.deleteOne(db, key: name)
                }
            }
        }
    }

    private static func stampedChange(_ key: String, _ stamp: ChangeStamp, _ entry: Entry?) -> StampedChange {
        StampedChange(key: key, value: entry.map { Data($0.xml) }, type: entry?.type, stamp: stamp)
    }

    private static func deviceID(_ db: Database) throws -> String {
        if let id = try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = 'device.id'") { return id }
        let id = UUID().uuidString.lowercased()
        try SettingRecord(name: "device.id", value: id).save(db)
        return id
    }

    /// A number that changes whenever any value changes (not persisted).
    public var revision: UInt64 { state.withLock { $0.revision } }

    /// Makes every committed change durable on disk: the journal goes to the database, then a
    /// WAL checkpoint, which syncs.
    public func makeDurable() throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            try moveJournalToDatabase(&state)
            do {
                try database.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA wal_checkpoint(FULL)")
                }
            } catch {
                throw .database(String(describing: error))
            }
        }
    }

    /// The change log after `sequence`, oldest first.
    public func changes(after sequence: Int64 = 0) throws(StoreError) -> [ChangeRecord] {
        try state.withLock { (state: inout State) throws(StoreError) in try moveJournalToDatabase(&state) }
        do {
            return try database.read { db in
                try ChangeRecord.fetchAll(db, sql: ChangeRecord.selection + " WHERE sequence > ? ORDER BY sequence", arguments: [sequence])
            }
        } catch {
            throw .database(String(describing: error))
        }
    }

    /// Changes the store's limits. Values already stored stay, even over a lowered limit.
    public func setLimits(_ limits: QuotaLimits) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            try write(&state) { db in try Self.saveLimits(limits, db) }
            state.limits = limits
        }
    }

    // MARK: - Database

    private func now() -> Date {
        Date(timeIntervalSince1970: (clock().timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }

    /// Writes the journal's rows to the database, in one transaction, and empties the journal.
    private func moveJournalToDatabase(_ state: inout State) throws(StoreError) {
        try write(&state) { _ in }
    }

    /// Runs `updates` in one transaction, after the journal's rows, and empties the journal once
    /// that commits: the database never holds a write that overtook a journaled one. BEGIN and
    /// COMMIT are cached statements: GRDB's `write` prepares them anew each time.
    private func write(_ state: inout State, _ updates: (Database) throws -> Void) throws(StoreError) {
        let journaled = state.journal.pending
        var refused = [ChangeJournal.Row]()
        do {
            try database.writeWithoutTransaction { db in
                try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
                do {
                    refused = try Self.record(journaled: journaled, db)
                    try updates(db)
                    try db.cachedStatement(sql: "COMMIT").execute()
                } catch {
                    if !db.isInsideTransaction { throw error }
                    try? db.execute(sql: "ROLLBACK")
                    throw error
                }
            }
        } catch {
            throw .database(String(describing: error))
        }
        // Kept once the rest is committed (a rolled-back attempt would keep them twice), and
        // before the journal that still holds them is emptied.
        if !refused.isEmpty { try state.quarantine.append(refused) }
        if !journaled.isEmpty { state.journal.clear() }
    }

    /// Writes the journal's rows; returns those the schema refuses, for the quarantine, rather
    /// than leaving them to keep the journal from ever emptying and the store from opening, or
    /// dropping them. The rules the schema checks hold for every change a commit takes (local
    /// keys are checked, and remotes check theirs), so this guards against the two ever
    /// disagreeing, as SQLite's length() and NUL once did.
    private static func record(journaled rows: [ChangeJournal.Row], _ db: Database) throws -> [ChangeJournal.Row] {
        var refused = [ChangeJournal.Row]()
        for row in rows {
            do {
                try record(row, db)
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                refused.append(row)
            }
        }
        return refused
    }

    /// Committed changes the database refused to take from the journal, oldest first: kept in
    /// `PATH.quarantine` (the journal's format) instead of being dropped, for the daemon to
    /// report; they are not in the store.
    public var quarantined: [StampedChange] {
        state.withLock { state in
            state.quarantine.pending.map { Self.stampedChange($0.key, $0.stamp, $0.entry) }
        }
    }

    /// Writes a key's latest change, its value or a tombstone, unless the database already has
    /// this change or a later one (a journal replayed again after a crash).
    private static func record(_ change: ChangeJournal.Row, _ db: Database) throws {
        let statement = try db.cachedStatement(sql: """
            INSERT INTO entry (key, value, type, modifiedAt, sequence, counter, device, syncState) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, type = excluded.type,
                modifiedAt = excluded.modifiedAt, sequence = excluded.sequence, counter = excluded.counter,
                device = excluded.device, syncState = excluded.syncState
            WHERE excluded.sequence > entry.sequence
            """)
        let row = DirectBinding(statement)
        row.bind(1, change.key)
        row.bind(2, change.entry?.xml)
        row.bind(3, change.entry?.type.rawValue)
        row.bind(4, change.stamp.time)
        row.bind(5, change.sequence)
        row.bind(6, Int64(change.stamp.counter))
        row.bind(7, change.stamp.device)
        row.bind(8, change.syncState.rawValue)
        try row.run(in: db)
    }

    private static var limitNames: [(String, WritableKeyPath<QuotaLimits, Int>)] {
        [
        ("quota.totalBytes", \.totalBytes), ("quota.valueBytes", \.valueBytes),
        ("quota.keys", \.keys), ("quota.keyNameBytes", \.keyNameBytes),
        ]
    }

    private static func saveLimits(_ limits: QuotaLimits, _ db: Database) throws {
        for (name, path) in limitNames {
            try SettingRecord(name: name, value: String(limits[keyPath: path])).save(db)
        }
    }

    private static func loadLimits(_ db: Database) throws -> QuotaLimits {
        var limits = QuotaLimits.modelled
        for (name, path) in limitNames {
            if let text = try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = ?", arguments: [name]),
               let number = Int(text) {
                limits[keyPath: path] = number
            }
        }
        return limits
    }
}

func milliseconds(_ date: Date) -> Int64 {
    Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
}

extension ChangeStamp {
    /// The physical part as a date.
    public var date: Date { Date(timeIntervalSince1970: Double(time) / 1000) }
}

extension KeyValueStore.Entry {
    /// The live entry of a change record; nil for a tombstone.
    init?(_ record: ChangeRecord) {
        guard let value = record.value, let type = record.type else { return nil }
        self.init(key: record.key, xml: [UInt8](value), type: type,
                  modifiedAt: Date(timeIntervalSince1970: Double(record.modifiedAt) / 1000))
    }
}
