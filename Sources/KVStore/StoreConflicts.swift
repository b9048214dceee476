import Foundation
import GRDB

/// The keys' open conflicts as the remote gives them with its changes, kept in table
/// `conflict`, and the write that settles one by keeping the value the key shows.
extension KeyValueStore {
    /// Every open conflict, by key.
    public func conflicts() -> [KeyConflict] {
        state.withLock { $0.conflicts.values.sorted { $0.key < $1.key } }
    }

    /// How many keys have an open conflict.
    public var conflictCount: Int {
        state.withLock { $0.conflicts.count }
    }

    /// `key`'s open conflict; nil when it has none.
    public func conflict(forKey key: String) -> KeyConflict? {
        state.withLock { $0.conflicts[key] }
    }

    /// Takes in the conflicts that fetched `changes` (in the order the remote gave them) say
    /// their keys have: each key's last change is what the remote holds now, so its `lost`
    /// opens, replaces or (nil) settles the key's conflict. With `replacingAll`, the keys not
    /// among `changes` have none (the store now follows the whole of another history).
    /// Returns the keys whose conflict is new: opened, or another change lost since.
    @discardableResult
    public func takeConflicts(from changes: [StampedChange], replacingAll: Bool = false) throws(StoreError) -> [String] {
        var latest = [String: StampedChange]()
        for change in changes { latest[change.key] = change }
        return try state.withLock { (state: inout State) throws(StoreError) -> [String] in
            var updated = [String: KeyConflict?]()
            for (key, change) in latest {
                let conflict = change.lost.map { KeyConflict(key: key, lost: $0, won: change.kept) }
                if state.conflicts[key] != conflict { updated[key] = .some(conflict) }
            }
            if replacingAll {
                for key in state.conflicts.keys where latest[key] == nil { updated[key] = .some(nil) }
            }
            guard !updated.isEmpty else { return [] }
            let opened = updated.compactMap { key, conflict in
                conflict.flatMap { $0.lost != state.conflicts[key]?.lost ? key : nil }
            }
            try write(&state) { db in try Self.saveConflicts(updated, db) }
            for (key, conflict) in updated { state.conflicts[key] = conflict }
            return opened.sorted()
        }
    }

    /// Writes `key`'s value (or its removal) again as a new local change, pending a push, even
    /// though it is the one the store holds: how a conflict is settled by keeping what the key
    /// shows. Refused like any write on a read-only store; a key never written has nothing to
    /// write again.
    public func rewrite(_ key: String) throws(StoreError) {
        if let reason = readOnlyReason.withLock({ $0 }) { throw .readOnly(reason) }
        try state.withLock { (state: inout State) throws(StoreError) in
            guard let previous = state.changes[key] else { throw .noSuchKey(key) }
            var clock = state.clock
            let stamp = clock.stamp(physical: milliseconds(now()), after: previous.stamp)
            let entry = state.entries[key].map { Entry(key: key, xml: $0.xml, type: $0.type, modifiedAt: stamp.date) }
            try commit([(key, entry, stamp, .pending)], in: &state)
            state.clock = clock
        }
        changeObserver.withLock { $0 }?.notify()
    }

    static func saveConflicts(_ updated: [String: KeyConflict?], _ db: Database) throws {
        let delete = try db.cachedStatement(sql: "DELETE FROM conflict WHERE key = ?")
        let upsert = try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO conflict (key, lostValue, lostType, lostTime, lostCounter, lostDevice,
                wonValue, wonType, wonTime, wonCounter, wonDevice) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
            var column: Int32 = 2
            for side in [conflict.lost, conflict.won] {
                try row.bind(column, side.value)
                try row.bind(column + 1, side.type?.rawValue)
                try row.bind(column + 2, side.stamp.time)
                try row.bind(column + 3, Int64(side.stamp.counter))
                try row.bind(column + 4, side.stamp.device)
                column += 5
            }
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
            conflicts[key] = KeyConflict(key: key, lost: try side("lost"), won: try side("won"))
        }
        return conflicts
    }
}
