import Foundation
import GRDB

// The keys' open conflicts as the remote gives them with its changes, kept in table
// `conflict`, and the write that settles one; the unsent losses (table `unsentLoss`).

/// What taking in fetched conflicts did: the keys whose conflict is new (opened, or another
/// change lost since), and those whose conflict was not kept, as it would have made the
/// store keep more than its total quota of changes that lost.
public struct ConflictIntake: Equatable, Sendable {
    public var opened: [String]
    public var notKept: [String]

    public init(opened: [String], notKept: [String]) {
        self.opened = opened
        self.notKept = notKept
    }
}

/// A key's open conflict as a mount knows it: the changes that lost, kept (newest first, one
/// per device, never none), and the one that won, as the remote decided them.
public struct KeyConflict: Hashable, Sendable, Codable {
    public var key: String
    public var lost: [KeptChange]
    public var won: KeptChange

    public init(key: String, lost: [KeptChange], won: KeptChange) {
        self.key = key
        self.lost = lost
        self.won = won
    }

    /// The devices that made its changes.
    public var devices: Set<String> { Set((lost + [won]).map(\.stamp.device)) }

    private enum CodingKeys: String, CodingKey { case key, lost, won }

    /// Also as a daemon that kept one change that lost gives it: `lost` one object.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        key = try container.decode(String.self, forKey: .key)
        won = try container.decode(KeptChange.self, forKey: .won)
        do {
            lost = try container.decode([KeptChange].self, forKey: .lost)
        } catch DecodingError.typeMismatch {
            lost = [try container.decode(KeptChange.self, forKey: .lost)]
        }
    }
}

extension KeyConflict {
    /// The change that lost that keeping the local side keeps: `device`'s, when one is named;
    /// otherwise the one `local` (this store's device) lost, or the only one. Nil when there is
    /// no such change, or several lost and none is named or local.
    public func lostChange(of device: String?, local: String) -> KeptChange? {
        if let device { return lost.first { $0.stamp.device == device } }
        return lost.first { $0.stamp.device == local } ?? (lost.count == 1 ? lost.first : nil)
    }
}

extension KeyValueStore {
    /// Every open conflict, by key.
    public func conflicts() -> [KeyConflict] {
        state.withLock { $0.sync.conflicts.values.sorted { $0.key < $1.key } }
    }

    /// How many keys have an open conflict.
    public var conflictCount: Int {
        state.withLock { $0.sync.conflicts.count }
    }

    /// The bytes of the values the open conflicts keep (the changes that lost and won), which
    /// the database holds beside the store's values.
    public var conflictBytes: Int {
        state.withLock { state in
            state.sync.conflicts.values.reduce(0) { total, conflict in
                conflict.lost.reduce(total + conflict.won.size) { $0 + $1.size }
            }
        }
    }

    /// `key`'s open conflict; nil when it has none.
    public func conflict(forKey key: String) -> KeyConflict? {
        state.withLock { $0.sync.conflicts[key] }
    }

    /// Takes in the conflicts that fetched `changes` (in the order the remote gave them) say
    /// their keys have: each key's last change is what the remote holds now, so its `lost`
    /// opens, replaces or (nil) settles the key's conflict. With `replacingAll`, the keys not
    /// among `changes` have none (the store now follows the whole of another history).
    ///
    /// What the conflicts keep of changes that lost is bounded by the store's total quota, as
    /// at the remote, and each value by its per-value quota: a conflict that would pass either
    /// is not kept (the key keeps what it had), and is named in the intake's `notKept`, for its
    /// caller to report.
    @discardableResult
    public func takeConflicts(from changes: [StampedChange], replacingAll: Bool = false) throws(StoreError) -> ConflictIntake {
        var latest = [String: StampedChange]()
        for change in changes { latest[change.key] = change }
        return try state.withLock { (state: inout State) throws(StoreError) -> ConflictIntake in
            var updated = [String: KeyConflict?]()
            for (key, change) in latest {
                let conflict = change.lost.isEmpty ? nil : KeyConflict(key: key, lost: change.lost, won: change.kept)
                if state.sync.conflicts[key] != conflict { updated[key] = .some(conflict) }
            }
            if replacingAll {
                for key in state.sync.conflicts.keys where latest[key] == nil { updated[key] = .some(nil) }
            }
            // What shrinks first, so that the room it frees counts; then what grows, by key.
            func lostBytes(_ conflict: KeyConflict?) -> Int { conflict?.lost.reduce(0) { $0 + $1.size } ?? 0 }
            let held = state.sync.conflicts
            var kept = held.values.reduce(0) { $0 + lostBytes($1) }
            var notKept = [String]()
            let growth = updated.mapValues { lostBytes($0) }.map { key, after in (key: key, grown: after - lostBytes(held[key])) }
            for (key, grown) in growth.sorted(by: { ($0.grown, $0.key) < ($1.grown, $1.key) }) {
                // A value no write here could make is not kept either.
                let oversized = (updated[key] ?? nil)?.lost.contains { $0.size > state.limits.valueBytes } ?? false
                if oversized || (grown > 0 && kept + grown > state.limits.totalBytes) {
                    updated[key] = nil
                    notKept.append(key)
                    continue
                }
                kept += grown
            }
            guard !updated.isEmpty else { return ConflictIntake(opened: [], notKept: notKept) }
            let opened = updated.compactMap { key, conflict in
                conflict.flatMap { conflict in
                    let known = Set((state.sync.conflicts[key]?.lost ?? []).map(\.stamp))
                    return conflict.lost.contains { !known.contains($0.stamp) } ? key : nil
                }
            }
            try write(&state) { db in try Self.saveConflicts(updated, db) }
            for (key, conflict) in updated { state.sync.conflicts[key] = conflict }
            return ConflictIntake(opened: opened.sorted(), notKept: notKept)
        }
    }

    /// Settles `conflict`, which must still be its key's open conflict, by keeping `side` (one
    /// of its lost changes or its won one): `side`'s value (or removal) becomes the key's latest change,
    /// pending a push, stamped after both the key's latest change and the winner, and replacing
    /// the winner, which the mount has seen: the remote takes it as sequential and settles the
    /// conflict everywhere (`ConflictRule`). A new change even when the key shows that value
    /// already. Checked against the quotas and the schema as any write. Returns the key's entry before and
    /// after.
    public func settle(_ conflict: KeyConflict, keeping side: KeptChange) throws(StoreError) -> (before: Entry?, after: Entry?) {
        if let reason = readOnlyReason.withLock({ $0 }) { throw .readOnly(reason) }
        let key = conflict.key
        var entry: Entry?
        if let xml = side.value {
            let value = try PropertyListCodec.decode([UInt8](xml))
            guard value.type == side.type else { throw .invalidPropertyList("the kept change is not a value of its type") }
            entry = try QuotaLedger(limits: limits).checkedEntry(key, value, modifiedAt: Date(timeIntervalSince1970: 0))
        }
        let settled = try state.withLock { (state: inout State) throws(StoreError) -> (before: Entry?, after: Entry?) in
            guard state.sync.conflicts[key] == conflict else { throw .conflictChanged(key) }
            // Under the lock: the schema the change is committed under is the one it meets.
            if let entry { try state.schema.check(key: key, xml: entry.xml) }
            let before = state.values[key]
            try QuotaLedger(limits: state.limits).checkReplacing(bytes: before?.size, with: entry?.size, usage: state.usage)
            var clock = state.clock
            let latest = max(state.sync.changes[key]?.stamp ?? conflict.won.stamp, conflict.won.stamp)
            let stamp = clock.stamp(physical: milliseconds(now()), after: latest)
            let after = entry.map { Entry(key: key, xml: $0.xml, type: $0.type, modifiedAt: stamp.date) }
            // The change and what it replaces (the winner, whatever was pending before) in one
            // transaction, past the journal: all of it or none, crash or not.
            let row = ChangeJournal.Row(key: key, entry: after, stamp: stamp, syncState: .pending, sequence: state.lastSequence + 1)
            try write(&state) { db in
                try Self.record(row, db)
                try Self.saveBase(conflict.won.stamp, of: key, db)
            }
            state.lastSequence = row.sequence
            state.values.set(after, forKey: key)
            state.sync.setChange(key, ChangeMeta(stamp: stamp, syncState: .pending, sequence: row.sequence, base: .change(conflict.won.stamp),
                                            settles: conflict.lost.map(\.stamp)))
            state.revision &+= 1
            state.clock = clock
            return (before, after)
        }
        changeObserver.withLock { $0 }?.notify()
        return settled
    }

    /// Sets what `key`'s change replaced: `base`, or not known (nil; the device '', as
    /// `ChangeRecord.base` reads it).
    static func saveBase(_ base: ChangeStamp?, of key: String, _ db: Database) throws {
        let update = DirectBinding(try db.cachedStatement(sql: "UPDATE entry SET baseTime = ?, baseCounter = ?, baseDevice = ? WHERE key = ?"))
        try update.bind(1, base?.time ?? 0)
        try update.bind(2, Int64(base?.counter ?? 0))
        try update.bind(3, base?.device ?? "")
        try update.bind(4, key)
        try update.run(in: db)
    }

    static func saveConflicts(_ updated: [String: KeyConflict?], _ db: Database) throws {
        let delete = try db.cachedStatement(sql: "DELETE FROM conflict WHERE key = ?")
        let upsert = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO conflict (key, lostValue, lostType, lostTime, lostCounter, lostDevice,
                wonValue, wonType, wonTime, wonCounter, wonDevice, alsoLost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        for (key, conflict) in updated {
            guard let conflict else {
                let row = DirectBinding(delete)
                try row.bind(1, key)
                try row.run(in: db)
                continue
            }
            let row = DirectBinding(upsert)
            try row.bind(1, key)
            guard let newest = conflict.lost.first else { throw DatabaseError(message: "a conflict of \(key) names no change that lost") }
            var column: Int32 = 2
            for side in [newest, conflict.won] {
                try row.bind(column, side.value)
                try row.bind(column + 1, side.type?.rawValue)
                try row.bind(column + 2, side.stamp.time)
                try row.bind(column + 3, Int64(side.stamp.counter))
                try row.bind(column + 4, side.stamp.device)
                column += 5
            }
            try row.bind(12, try KeptChangeList.encode(conflict.lost))
            try row.run(in: db)
        }
    }

    /// The stored conflicts, each column read with its type checked: a row of the wrong type
    /// is an error, never a trap.
    static func loadConflicts(_ db: Database) throws -> [String: KeyConflict] {
        var conflicts = [String: KeyConflict]()
        let rows = try Row.fetchCursor(db, sql: "SELECT *, CAST(key AS BLOB) AS keyBytes FROM conflict")
        while let row = try rows.next() {
            let keyBytes: Data = try row.decode(forColumn: "keyBytes")
            guard let key = String(validating: keyBytes, as: UTF8.self) else { throw DatabaseError(message: "a conflict's key is not UTF-8") }
            func side(_ name: String) throws -> KeptChange {
                let value: Data? = try row.decode(forColumn: "\(name)Value")
                let type = try (row.decode(String?.self, forColumn: "\(name)Type")).map { text in
                    guard let type = ValueType(rawValue: text) else { throw DatabaseError(message: "unknown value type \(text)") }
                    return type
                }
                guard (value == nil) == (type == nil) else { throw DatabaseError(message: "a conflict of \(key) has a value without a type") }
                return KeptChange(value: value, type: type, stamp: ChangeStamp(
                    time: try row.decode(forColumn: "\(name)Time"), counter: try row.decode(forColumn: "\(name)Counter"),
                    device: try row.decode(forColumn: "\(name)Device")))
            }
            let lost: [KeptChange]
            do {
                lost = try KeptChangeList.decode(newest: try side("lost"), earlier: try row.decode(forColumn: "alsoLost"))
            } catch let error as UnreadableConflict {
                throw DatabaseError(message: "the conflict of \(key) cannot be read: \(error)")
            }
            conflicts[key] = KeyConflict(key: key, lost: lost, won: try side("won"))
        }
        return conflicts
    }
}

/// A change by its key and stamp: what a push answer names it by (an unsent loss the remote
/// answered for, a change it could not judge).
package struct ChangeName: Hashable {
    package let key: String
    package let stamp: ChangeStamp

    package init(_ change: StampedChange) {
        key = change.key
        stamp = change.stamp
    }
}

extension KeyValueStore {
    static func saveUnsentLosses(_ losses: [StampedChange], _ db: Database) throws {
        let insert = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO unsentLoss (key, value, type, time, counter, device, baseTime, baseCounter, baseDevice)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        for loss in losses {
            let row = DirectBinding(insert)
            try row.bind(1, loss.key)
            try row.bind(2, loss.value)
            try row.bind(3, loss.type?.rawValue)
            try row.bind(4, loss.stamp.time)
            try row.bind(5, Int64(loss.stamp.counter))
            try row.bind(6, loss.stamp.device)
            switch loss.replaces {
            case .change(let base)?:
                try row.bind(7, base.time)
                try row.bind(8, Int64(base.counter))
                try row.bind(9, base.device)
            case .unknown?, nil:
                try row.bind(7, Int64(0))
                try row.bind(8, Int64(0))
                try row.bind(9, "")  // as `ChangeRecord.base` reads it: not known
            case .nothing?:
                break
            }
            try row.run(in: db)
        }
    }

    static func deleteUnsentLosses(_ losses: [StampedChange], _ db: Database) throws {
        let delete = try db.cachedStatement(sql: "DELETE FROM unsentLoss WHERE key = ? AND time = ? AND counter = ? AND device = ?")
        for loss in losses {
            let row = DirectBinding(delete)
            try row.bind(1, loss.key)
            try row.bind(2, loss.stamp.time)
            try row.bind(3, Int64(loss.stamp.counter))
            try row.bind(4, loss.stamp.device)
            try row.run(in: db)
        }
    }

    /// The unsent losses, oldest first, each column read with its type checked.
    static func loadUnsentLosses(_ db: Database) throws -> [StampedChange] {
        let rows = try Row.fetchAll(db, sql: """
            SELECT CAST(key AS BLOB) AS key, value, type, modifiedAt, 0 AS sequence, counter, device, 'pending' AS syncState,
                   baseTime, baseCounter, baseDevice FROM (SELECT *, time AS modifiedAt FROM unsentLoss) ORDER BY time, counter, device
            """)
        return try rows.map { row in
            let record = try ChangeRecord(row: row)
            return StampedChange(key: record.key, value: record.value, type: record.type, stamp: record.stamp, replaces: record.base)
        }
    }
}
