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
        /// What the value counts against the quota (`QuotaLedger.size(ofXML:)`).
        public var size: Int { QuotaLedger.size(ofXML: xml) }
    }

    /// Everything the store's lock guards, by invariant: the values and their usage
    /// (`ValueIndex`), where each key's change stands with the remote (`SyncLedger`), and the
    /// writer's own: the journal, its sequence and clock, and the settings read.
    struct State {
        var values: ValueIndex
        var sync: SyncLedger
        var limits: QuotaLimits
        var revision: UInt64 = 0
        var lastSequence: Int64
        var clock: HybridLogicalClock
        /// Commits not yet in the database; every write to the database takes them along first.
        let journal: ChangeJournal
        /// Journaled rows the database refused, kept rather than dropped (`quarantined`).
        let quarantine: ChangeJournal
        /// Settings read or written since the store opened (nil: known to be unset), as the
        /// database holds them: every write of a setting goes through the store, which holds
        /// its database alone. A round of sync reads its position twice.
        var settings: [String: String?] = [:]
        /// The store's schema as sync last fetched it: what every local write is checked against.
        var schema: HeldSchema
        var usage: QuotaUsage { values.usage }
    }

    let database: DatabaseQueue
    let state: Mutex<State>
    let clock: @Sendable () -> Date
    /// Boxed: a closure kept directly in a Mutex is reabstracted on every `withLock` and written
    /// back wrapped, so each call would add thunks to the chain.
    final class Observer: Sendable {
        let notify: @Sendable () -> Void
        init(_ notify: @escaping @Sendable () -> Void) { self.notify = notify }
    }
    let changeObserver = Mutex<Observer?>(nil)
    let readOnlyReason = Mutex<String?>(nil)
    /// What the data directory's disk last said it had free, and when (`checkRoom`).
    let roomSeen = Mutex<DiskRoom.Seen?>(nil)
    /// The last count of held values that break the held schema, and what it counted
    /// (`violationCount`).
    let violationTally = Mutex<ViolationTally?>(nil)
    let schemaObserver = Mutex<(@Sendable (HeldSchema) -> Void)?>(nil)
    /// The id this store's changes carry in their stamps.
    public let deviceID: String

    /// Opens (creating if needed) the store at `path`. `limits`, when given, become the store's own.
    public init(path: String, limits: QuotaLimits? = nil, clock: @escaping @Sendable () -> Date = { Date() }) throws(StoreError) {
        self.clock = clock
        // The replay of the journal is what most needs room: SQLite's errno from it tells a
        // spent disk quota from a full disk.
        var systemErrno: Int32 = 0
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
                do {
                    refused = try Self.record(journaled: journal.pending, db)
                } catch {
                    systemErrno = DiskRoom.systemErrno(db)
                    throw error
                }
                if let limits { try Self.saveLimits(limits, db) }
                let device = try Self.deviceID(db)
                let records = try ChangeRecord.fetchAll(db, sql: ChangeRecord.selection)
                var entries = [String: Entry](minimumCapacity: records.count)
                var changes = [String: ChangeMeta](minimumCapacity: records.count)
                let physical = milliseconds(clock())
                var clock = HybridLogicalClock(device: device)
                for record in records {
                    entries[record.key] = Entry(record)
                    changes[record.key] = ChangeMeta(stamp: record.stamp, syncState: record.syncState, sequence: record.sequence, base: record.base)
                    clock.observe(record.stamp, physical: physical)
                }
                var state = State(
                    values: ValueIndex(entries),
                    sync: SyncLedger(changes: changes),
                    limits: try Self.loadLimits(db),
                    lastSequence: records.map(\.sequence).max() ?? 0,
                    clock: clock,
                    journal: journal,
                    quarantine: quarantine,
                    schema: try Self.loadSchema(db))
                state.sync.conflicts = try Self.loadConflicts(db)
                state.sync.unsentLosses = try Self.loadUnsentLosses(db)
                return (state, device)
            }
            if !refused.isEmpty { try quarantine.append(refused) }
            journal.clear()
            deviceID = device
            state = Mutex(loaded)
        } catch {
            throw DiskRoom.storeError(error, systemErrno: systemErrno, path: path)
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
        state.withLock { $0.values[key] }
    }

    public func keys() -> [String] {
        state.withLock { $0.values.entries.keys.sorted() }
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

    /// Applies `changes` in order as one transaction: all of them, or none when the result
    /// would break a limit or a change names a missing key.
    ///
    /// The limits are checked on the result: a new value over the per-value limit, a key count
    /// or a byte total that grows past its limit is refused. Changes that leave a key's value as
    /// it was are not written and not logged.
    public func apply(_ changes: [KeyChange]) throws(StoreError) {
        if let reason = readOnlyReason.withLock({ $0 }) { throw .readOnly(reason) }
        let committed = try state.withLock { (state: inout State) throws(StoreError) -> Bool in
            let staged = try stage(changes, in: state)
            guard !staged.edits.isEmpty else { return false }
            try QuotaLedger(limits: state.limits).checkResult(before: state.usage, after: staged.usage, added: staged.addedBytes)
            try commit(staged, in: &state)
            return true
        }
        if committed { changeObserver.withLock { $0 }?.notify() }
    }

    /// Changes checked and ready to commit: each key whose value they change, with its new
    /// entry (nil: removed), and the usage that leaves.
    struct StagedChanges {
        var edits: [String: Entry?]
        var usage: QuotaUsage
        /// The size of the values written.
        var addedBytes: Int { edits.values.reduce(0) { $0 + ($1?.size ?? 0) } }
    }

    /// What `changes` would do to the store. Checks every name and value; the totals are the
    /// caller's to check.
    func stage(_ changes: [KeyChange], in state: State) throws(StoreError) -> StagedChanges {
        let ledger = QuotaLedger(limits: state.limits)
        let unstamped = Date(timeIntervalSince1970: 0)  // each edit gets its stamp's time in `commit`
        var staged = [String: Entry?]()
        func current(_ key: String) -> Entry? {
            if let pending = staged[key] { return pending }
            return state.values[key]
        }
        for change in changes {
            switch change {
            case .put(let key, let value):
                staged[key] = .some(try ledger.checkedEntry(key, value, modifiedAt: unstamped))
                try state.schema.rules?.check(key: key, value: value)
            case .delete(let key):
                guard current(key) != nil else { throw .noSuchKey(key) }
                staged[key] = .some(nil)
            case .move(let source, let destination):
                guard let moving = current(source) else { throw .noSuchKey(source) }
                guard source != destination else { continue }
                try ledger.checkKeyName(destination)
                try state.schema.check(key: destination, xml: moving.xml)
                staged[source] = .some(nil)
                staged[destination] = .some(Entry(key: destination, xml: moving.xml, type: moving.type, modifiedAt: unstamped))
            }
        }
        // Keep only real changes.
        let edits = staged.filter { key, new in new?.xml != state.values[key]?.xml }
        let usage = edits.reduce(state.usage) { usage, edit in usage.replacing(state.values[edit.key], with: edit.value) }
        return StagedChanges(edits: edits, usage: usage)
    }

    /// Commits checked changes as one transaction, each with a new stamp, pending a push.
    func commit(_ staged: StagedChanges, in state: inout State) throws(StoreError) {
        var clock = state.clock
        let physical = milliseconds(now())
        let stamped = staged.edits.sorted(by: { $0.key < $1.key }).map { key, new in
            let stamp = clock.stamp(physical: physical, after: state.sync.changes[key]?.stamp)
            let entry = new.map { Entry(key: key, xml: $0.xml, type: $0.type, modifiedAt: stamp.date) }
            return (key, entry, stamp)
        }
        try commit(stamped.map { ($0.0, $0.1, $0.2, SyncState.pending) }, in: &state)
        state.clock = clock
    }

    /// Commits changes (already checked) to the journal and brings the in-memory index along;
    /// the database gets them with the next batch.
    func commit(_ changes: [(key: String, entry: Entry?, stamp: ChangeStamp, syncState: SyncState)], in state: inout State) throws(StoreError) {
        guard !changes.isEmpty else { return }
        var sequence = state.lastSequence
        let rows = changes.map { change in
            sequence += 1
            return ChangeJournal.Row(key: change.key, entry: change.entry, stamp: change.stamp, syncState: change.syncState, sequence: sequence)
        }
        try state.journal.append(rows)
        state.lastSequence = sequence
        for row in rows {
            state.values.set(row.entry, forKey: row.key)
            let previous = state.sync.changes[row.key]
            state.sync.setChange(row.key, ChangeMeta(
                stamp: row.stamp, syncState: row.syncState, sequence: row.sequence, base: ChangeMeta.base(after: previous),
                settles: row.syncState == .pending ? ChangeMeta.settles(after: previous, shown: state.sync.conflicts[row.key]) : []))
        }
        state.revision &+= 1
        // Committed already: a batch that fails now is retried with the next write.
        if state.journal.needsFlush { try? moveJournalToDatabase(&state) }
    }

    /// A number that changes whenever any value changes (not persisted).
    public var revision: UInt64 { state.withLock { $0.revision } }
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
