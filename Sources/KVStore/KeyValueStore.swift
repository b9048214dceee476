import Foundation
import GRDB
import Synchronization

/// The local store: keys and their property-list values in one SQLite database (WAL),
/// checked against the quotas before anything is committed.
///
/// Invariants: the in-memory index equals the live rows of the `entry` table after every call;
/// a refused operation changes neither; every committed change is in the change log (each key's
/// row, deleted keys as tombstones, in `sequence` order). A committed change survives a crash of the
/// process; `makeDurable()` also makes it survive a crash of the machine.
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
        var limits: QuotaLimits
        var usedBytes: Int
        var revision: UInt64 = 0
        var lastSequence: Int64
        var usage: QuotaUsage { QuotaUsage(bytes: usedBytes, keys: entries.count) }
    }

    private let database: DatabaseQueue
    private let state: Mutex<State>
    private let clock: @Sendable () -> Date

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
            database = try DatabaseQueue(path: path, configuration: configuration)
            try StoreSchema.migrator.migrate(database)
            let loaded = try database.write { db -> State in
                if let limits { try Self.saveLimits(limits, db) }
                let records = try ChangeRecord.fetchAll(db)
                var entries = [String: Entry](minimumCapacity: records.count)
                for record in records { entries[record.key] = Entry(record) }
                return State(
                    entries: entries,
                    limits: try Self.loadLimits(db),
                    usedBytes: entries.values.reduce(0) { $0 + $1.size },
                    lastSequence: records.map(\.sequence).max() ?? 0)
            }
            state = Mutex(loaded)
        } catch let error as StoreError {
            throw error
        } catch {
            throw .database(String(describing: error))
        }
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

    /// Sets `key` to `value`. Writing a value equal to the stored one changes nothing.
    @discardableResult
    public func put(_ value: PropertyListValue, forKey key: String) throws(StoreError) -> Entry {
        try apply([.put(key, value)])
        return entry(forKey: key)!
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
        try state.withLock { (state: inout State) throws(StoreError) in
            let ledger = QuotaLedger(limits: state.limits)
            let at = now()
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
                    staged[key] = .some(Entry(key: key, xml: xml, type: value.type, modifiedAt: at))
                case .delete(let key):
                    guard current(key) != nil else { throw .noSuchKey(key) }
                    staged[key] = .some(nil)
                case .move(let source, let destination):
                    guard let moving = current(source) else { throw .noSuchKey(source) }
                    guard source != destination else { continue }
                    try ledger.checkKeyName(destination)
                    staged[source] = .some(nil)
                    staged[destination] = .some(Entry(key: destination, xml: moving.xml, type: moving.type, modifiedAt: at))
                }
            }
            // Keep only real changes, then check the result against the limits.
            let edits = staged.filter { key, new in new?.xml != state.entries[key]?.xml }
            guard !edits.isEmpty else { return }
            var keys = state.entries.count
            var bytes = state.usedBytes
            for (key, new) in edits {
                let old = state.entries[key]
                keys += (new == nil ? 0 : 1) - (old == nil ? 0 : 1)
                bytes += (new?.size ?? 0) - (old?.size ?? 0)
            }
            try ledger.checkResult(before: state.usage, after: QuotaUsage(bytes: bytes, keys: keys),
                                   added: edits.values.reduce(0) { $0 + ($1?.size ?? 0) })
            var sequence = state.lastSequence
            try write { db in
                for (key, new) in edits.sorted(by: { $0.key < $1.key }) {
                    sequence += 1
                    try Self.record(key: key, entry: new, at: at, sequence: sequence, db)
                }
            }
            state.lastSequence = sequence
            for (key, new) in edits { state.entries[key] = new }
            state.usedBytes = bytes
            state.revision &+= 1
        }
    }

    /// A number that changes whenever any value changes (not persisted).
    public var revision: UInt64 { state.withLock { $0.revision } }

    /// Makes every committed change durable on disk (a WAL checkpoint, which syncs).
    public func makeDurable() throws(StoreError) {
        try state.withLock { (_: inout State) throws(StoreError) in
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
        do {
            return try database.read { db in
                try ChangeRecord.filter(Column("sequence") > sequence).order(Column("sequence")).fetchAll(db)
            }
        } catch {
            throw .database(String(describing: error))
        }
    }

    /// Changes the store's limits. Values already stored stay, even over a lowered limit.
    public func setLimits(_ limits: QuotaLimits) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            try write { db in try Self.saveLimits(limits, db) }
            state.limits = limits
        }
    }

    // MARK: - Database

    private func now() -> Date {
        Date(timeIntervalSince1970: (clock().timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }

    /// Runs `updates` in one transaction. BEGIN and COMMIT are cached statements: GRDB's
    /// `write` prepares them anew each time, which costs more than the change itself.
    private func write(_ updates: (Database) throws -> Void) throws(StoreError) {
        do {
            try database.writeWithoutTransaction { db in
                try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
                do {
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
    }

    /// Writes a key's latest change: its value, or a tombstone.
    private static func record(key: String, entry: Entry?, at date: Date, sequence: Int64, _ db: Database) throws {
        let statement = try db.cachedStatement(sql: """
            INSERT INTO entry (key, value, type, modifiedAt, sequence) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, type = excluded.type,
                modifiedAt = excluded.modifiedAt, sequence = excluded.sequence
            """)
        try statement.execute(arguments: [key, entry.map { Data($0.xml) }, entry?.type.rawValue,
                                          milliseconds(entry?.modifiedAt ?? date), sequence])
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

extension KeyValueStore.Entry {
    /// The live entry of a change record; nil for a tombstone.
    init?(_ record: ChangeRecord) {
        guard let value = record.value, let type = record.type else { return nil }
        self.init(key: record.key, xml: [UInt8](value), type: type,
                  modifiedAt: Date(timeIntervalSince1970: Double(record.modifiedAt) / 1000))
    }
}
