import Foundation
import GRDB
import Synchronization

/// The store's database: the journal moved into it, settings, limits, durability and the
/// change log as it is on disk.
extension KeyValueStore {
    /// A setting kept with the store (`StoreSetting`); nil when never set, or kept as text its
    /// type does not read. A failure to read is thrown, never taken for "never set".
    public func setting<Value>(_ setting: StoreSetting<Value>) throws(StoreError) -> Value? {
        try text(of: setting.name).flatMap(setting.value)
    }

    /// Keeps `value` as `setting` (nil: forgets it).
    public func setSetting<Value>(_ setting: StoreSetting<Value>, to value: Value?) throws(StoreError) {
        try setText(of: setting.name, to: value.map(setting.text))
    }

    private func text(of name: String) throws(StoreError) -> String? {
        try state.withLock { (state: inout State) throws(StoreError) -> String? in
            if let known = state.settings[name] { return known }
            let value: String?
            do {
                value = try database.read { db in try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = ?", arguments: [name]) }
            } catch {
                throw .database(String(describing: error))
            }
            state.settings[name] = .some(value)
            return value
        }
    }

    private func setText(of name: String, to value: String?) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            try write(&state) { db in
                if let value {
                    try Self.saveSetting(name, value, db)
                } else {
                    _ = try SettingRecord.deleteOne(db, key: name)
                }
            }
            state.settings[name] = .some(value)
        }
    }

    /// One statement, cached: a push saves the sync position with every batch.
    static func saveSetting(_ name: String, _ value: String, _ db: Database) throws {
        try db.cachedStatement(sql: "INSERT INTO setting (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
            .execute(arguments: [name, value])
    }

    static func deviceID(_ db: Database) throws -> String {
        let name = StoreSetting<String>.deviceID.name
        if let id = try String.fetchOne(db, sql: "SELECT value FROM setting WHERE name = ?", arguments: [name]) { return id }
        let id = UUID().uuidString.lowercased()
        try SettingRecord(name: name, value: id).save(db)
        return id
    }

    /// Makes every change committed before the call durable on disk: the journal goes to the
    /// database under the store's lock, then a WAL checkpoint, which syncs, runs without it, so
    /// that the store's readers (every request of a mount) do not wait for the disk.
    ///
    /// Why the checkpoint may run unlocked:
    /// - What is promised (fsync's): every change committed before the call is durable when it
    ///   returns. Such a change is in the journal or the database when the call begins; the move
    ///   commits the journal's rows to the WAL before the lock is released, and the checkpoint,
    ///   which starts after the move, syncs the WAL, copies every frame it holds into the
    ///   database file and syncs that. A change committed after the move may stay in the
    ///   journal: it came after the call began, and nothing was promised of it.
    /// - Writers: the database is one `DatabaseQueue`, which runs one closure at a time, so the
    ///   checkpoint never runs inside another's transaction, and no reader of another
    ///   connection can leave it partial: the store holds its database alone (exclusive locking
    ///   mode), through that one connection. A write that needs the database while it runs (a
    ///   full journal's move, a setting, a push's record) waits for it, holding the store's
    ///   lock; a commit that only appends to the journal does not.
    /// - Concurrent calls: each moves the journal under the lock, then checkpoints; each
    ///   checkpoint runs after its own call's move, so it covers what was committed before that
    ///   call, whichever order the checkpoints take on the queue.
    /// - The journal: the checkpoint never reads it. It is emptied under the lock and only once
    ///   the database has committed its rows (`write`), as every other move does.
    /// - Errors: a failed move or checkpoint throws, mapped as every database failure is
    ///   (`DiskRoom.storeError`: ENOSPC, EDQUOT, or EIO for the rest), so the call fails. A
    ///   failed checkpoint leaves what the move committed in the WAL, which SQLite keeps (and
    ///   replays at the next open), and the next call checkpoints it again.
    public func makeDurable() throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in try moveJournalToDatabase(&state) }
        var systemErrno: Int32 = 0
        do {
            try database.writeWithoutTransaction { db in
                do {
                    try db.execute(sql: "PRAGMA wal_checkpoint(FULL)")
                } catch {
                    systemErrno = DiskRoom.systemErrno(db)
                    throw error
                }
            }
        } catch {
            throw DiskRoom.storeError(error, systemErrno: systemErrno, path: database.path)
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
            state.settings = [:]  // the limits are settings too
        }
    }

    func now() -> Date {
        Date(timeIntervalSince1970: (clock().timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }

    /// Writes the journal's rows to the database, in one transaction, and empties the journal.
    func moveJournalToDatabase(_ state: inout State) throws(StoreError) {
        try write(&state) { _ in }
    }

    /// Runs `updates` in one transaction, after the journal's rows, and empties the journal once
    /// that commits: the database never holds a write that overtook a journaled one. BEGIN and
    /// COMMIT are cached statements: GRDB's `write` prepares them anew each time.
    func write(_ state: inout State, _ updates: (Database) throws -> Void) throws(StoreError) {
        let journaled = state.journal.pending
        var refused = [ChangeJournal.Row]()
        var systemErrno: Int32 = 0
        do {
            try database.writeWithoutTransaction { db in
                do {
                    try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
                    refused = try Self.record(journaled: journaled, db)
                    try updates(db)
                    try db.cachedStatement(sql: "COMMIT").execute()
                } catch {
                    systemErrno = DiskRoom.systemErrno(db)  // before the rollback's calls replace it
                    if !db.isInsideTransaction { throw error }
                    try? db.execute(sql: "ROLLBACK")
                    throw error
                }
            }
        } catch {
            throw DiskRoom.storeError(error, systemErrno: systemErrno, path: database.path)
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
    static func record(journaled rows: [ChangeJournal.Row], _ db: Database) throws -> [ChangeJournal.Row] {
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
    /// this change or a later one (a journal replayed again after a crash). The row's base
    /// follows `ChangeMeta.base(after:)`, written beside it (`baseUpdateSQL`).
    static func record(_ change: ChangeJournal.Row, _ db: Database) throws {
        let statement = try db.cachedStatement(sql: """
            INSERT INTO entry (key, value, type, modifiedAt, sequence, counter, device, syncState) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, type = excluded.type,
                modifiedAt = excluded.modifiedAt, sequence = excluded.sequence, counter = excluded.counter,
                device = excluded.device, syncState = excluded.syncState,
                \(KeyValueStore.ChangeMeta.baseUpdateSQL)
            WHERE excluded.sequence > entry.sequence
            """)
        let row = DirectBinding(statement)
        try row.bind(1, change.key)
        try row.bind(2, change.entry?.xml)
        try row.bind(3, change.entry?.type.rawValue)
        try row.bind(4, change.stamp.time)
        try row.bind(5, change.sequence)
        try row.bind(6, Int64(change.stamp.counter))
        try row.bind(7, change.stamp.device)
        try row.bind(8, change.syncState.rawValue)
        try row.run(in: db)
    }

    static var limitNames: [(String, WritableKeyPath<QuotaLimits, Int>)] {
        [
        ("quota.totalBytes", \.totalBytes), ("quota.valueBytes", \.valueBytes),
        ("quota.keys", \.keys), ("quota.keyNameBytes", \.keyNameBytes),
        ]
    }

    static func saveLimits(_ limits: QuotaLimits, _ db: Database) throws {
        for (name, path) in limitNames {
            try SettingRecord(name: name, value: String(limits[keyPath: path])).save(db)
        }
    }

    static func loadLimits(_ db: Database) throws -> QuotaLimits {
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
