import Foundation
import GRDB

/// The latest committed change of one key: its value, or a tombstone (nil value) once deleted.
/// Rows in `sequence` order are the store's change log.
/// Read only (`record` writes the table): the `entry` table's row, every column checked.
public struct ChangeRecord: FetchableRecord, Sendable, Equatable {
    public var key: String
    /// The canonical XML property list; nil when the change deleted the key.
    public var value: Data?
    public var type: ValueType?
    /// When the change was made, in milliseconds since 1970: the physical part of its stamp.
    public var modifiedAt: Int64
    /// Commit order, increasing across the whole store.
    public var sequence: Int64
    /// The rest of the change's stamp (see `ChangeStamp`).
    public var counter: Int32
    public var device: String
    public var syncState: SyncState
    /// What a pending change replaced (`KeyValueStore.ChangeMeta.base`): columns `baseTime`,
    /// `baseCounter`, `baseDevice`, all NULL for nothing, the device '' when not known (no
    /// stamp has an empty device id).
    public var base: Replaced

    public var stamp: ChangeStamp { ChangeStamp(time: modifiedAt, counter: counter, device: device) }

    /// Every row, its key read as bytes: GRDB reads text only up to a NUL, which a key may hold.
    static let selection = """
        SELECT CAST(key AS BLOB) AS key, value, type, modifiedAt, sequence, counter, device, syncState,
               baseTime, baseCounter, baseDevice FROM entry
        """

    /// A row of `selection`.
    /// Every column is read with its type checked: a row of the wrong type is an error, never
    /// a trap.
    public init(row: Row) throws {
        let keyBytes: Data = try row.decode(forColumn: "key")
        guard let key = String(validating: keyBytes, as: UTF8.self) else { throw DatabaseError(message: "a key is not UTF-8") }
        self.key = key
        value = try row.decode(forColumn: "value")
        type = try (row.decode(String?.self, forColumn: "type")).map { text in
            guard let type = ValueType(rawValue: text) else { throw DatabaseError(message: "unknown value type \(text)") }
            return type
        }
        modifiedAt = try row.decode(forColumn: "modifiedAt")
        sequence = try row.decode(forColumn: "sequence")
        counter = try row.decode(forColumn: "counter")
        device = try row.decode(forColumn: "device")
        guard let state = SyncState(rawValue: try row.decode(forColumn: "syncState")) else { throw DatabaseError(message: "unknown sync state") }
        syncState = state
        let baseDevice: String? = try row.decode(forColumn: "baseDevice")
        switch baseDevice {
        case nil: base = .nothing
        case "": base = .unknown
        case let device?:
            base = .change(ChangeStamp(time: try row.decode(forColumn: "baseTime"), counter: try row.decode(forColumn: "baseCounter"),
                                       device: device))
        }
    }
}

/// A per-store setting: the quota limits and the device identity.
struct SettingRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "setting"
    var name: String
    var value: String
}

enum StoreSchema {
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1 entries with their latest change, settings") { db in
            // One b-tree written per commit: a key's row is both its value and its latest change.
            try db.create(table: "entry", options: [.withoutRowID]) { t in
                t.primaryKey("key", .text)
                t.column("value", .blob)
                t.column("type", .text)
                    .check(sql: "type IN ('string','integer','real','boolean','date','data','array','dictionary')")
                t.column("modifiedAt", .integer).notNull()
                t.column("sequence", .integer).notNull()
                t.check(sql: "length(key) > 0")
                t.check(sql: "(value IS NULL) = (type IS NULL)")
            }
            try db.create(table: "setting") { t in
                t.primaryKey("name", .text)
                t.column("value", .text).notNull()
            }
        }
        migrator.registerMigration("v2 change stamps and sync state") { db in
            try db.alter(table: "entry") { t in
                t.add(column: "counter", .integer).notNull().defaults(to: 0)
                t.add(column: "device", .text).notNull().defaults(to: "")
                t.add(column: "syncState", .text).notNull().defaults(to: SyncState.pending.rawValue)
                    .check(sql: "syncState IN ('synced','pending','refused')")
            }
        }
        migrator.registerMigration("v3 checks without IN lists") { db in
            // A CHECK with an IN list makes SQLite build an ephemeral table for every statement
            // that writes the row, on the path of every commit. The same rules as comparisons.
            try rebuildEntryTable(db, keyCheck: "length(key) > 0")
        }
        migrator.registerMigration("v4 keys checked as bytes") { db in
            // SQLite's length() counts characters up to the first NUL, so `length(key) > 0`
            // refused a key that begins with one. A key may hold NUL (shown as %00).
            try rebuildEntryTable(db, keyCheck: "key <> ''")
        }
        migrator.registerMigration("v5 what pending changes replaced, open conflicts, unsent losses") { db in
            try db.alter(table: "entry") { t in
                t.add(column: "baseTime", .integer)
                t.add(column: "baseCounter", .integer)
                t.add(column: "baseDevice", .text)
            }
            // What a change pending from before is not known: its push decides no conflict.
            try db.execute(sql: "UPDATE entry SET baseTime = 0, baseCounter = 0, baseDevice = '' WHERE syncState = 'pending'")
            try db.create(table: "conflict", options: [.withoutRowID]) { t in
                t.primaryKey("key", .text)
                for side in ["lost", "won"] {
                    t.column("\(side)Value", .blob)
                    t.column("\(side)Type", .text)
                    t.column("\(side)Time", .integer).notNull()
                    t.column("\(side)Counter", .integer).notNull()
                    t.column("\(side)Device", .text).notNull()
                }
            }
            // Pending changes a newer remote change replaced before they were pushed: kept to be
            // pushed all the same, so that the remote keeps them as conflicts.
            try db.create(table: "unsentLoss", options: [.withoutRowID]) { t in
                t.column("key", .text).notNull()
                t.column("value", .blob)
                t.column("type", .text)
                t.column("time", .integer).notNull()
                t.column("counter", .integer).notNull()
                t.column("device", .text).notNull()
                t.column("baseTime", .integer)
                t.column("baseCounter", .integer)
                t.column("baseDevice", .text)
                t.primaryKey(["key", "time", "counter", "device"])
            }
        }
        migrator.registerMigration("v6 every change that lost") { db in
            // The changes that lost after the newest (KeptChangeList), as the remote gives them.
            try db.alter(table: "conflict") { t in t.add(column: "alsoLost", .blob) }
        }
        migrator.registerMigration("v7 device names") { db in
            // The names of other devices, as the remote gives them (DeviceName), and when each
            // was told, in sequence: those told longest ago go past DeviceName.keptPerStore.
            try db.create(table: "deviceName", options: [.withoutRowID]) { t in
                t.primaryKey("device", .text)
                t.column("name", .text).notNull()
                t.column("told", .integer).notNull()
            }
        }
        migrator.registerMigration("v8 the store's schema as the remote gave it") { db in
            // One row at most (HeldSchema): the remote's version and the property list as set.
            try db.execute(sql: """
                CREATE TABLE keySchema (
                    one INTEGER PRIMARY KEY CHECK (one = 1),
                    version INTEGER NOT NULL CHECK (version >= 0),
                    text BLOB
                )
                """)
        }
        return migrator
    }

    /// Rebuilds `entry` with the same rows and its rules written as comparisons, the key's as
    /// given. Spelled out: a migration must make the same table whatever the enums become.
    private static func rebuildEntryTable(_ db: Database, keyCheck: String) throws {
        let types = ["string", "integer", "real", "boolean", "date", "data", "array", "dictionary"]
            .map { "type = '\($0)'" }.joined(separator: " OR ")
        let states = ["synced", "pending", "refused"].map { "syncState = '\($0)'" }.joined(separator: " OR ")
        try db.execute(sql: """
            CREATE TABLE entry_rebuilt (
                key TEXT PRIMARY KEY NOT NULL,
                value BLOB,
                type TEXT CHECK (\(types)),
                modifiedAt INTEGER NOT NULL,
                sequence INTEGER NOT NULL,
                counter INTEGER NOT NULL DEFAULT 0,
                device TEXT NOT NULL DEFAULT '',
                syncState TEXT NOT NULL DEFAULT 'pending' CHECK (\(states)),
                CHECK (\(keyCheck)),
                CHECK ((value IS NULL) = (type IS NULL))
            ) WITHOUT ROWID;
            INSERT INTO entry_rebuilt (key, value, type, modifiedAt, sequence, counter, device, syncState)
                SELECT key, value, type, modifiedAt, sequence, counter, device, syncState FROM entry;
            DROP TABLE entry;
            ALTER TABLE entry_rebuilt RENAME TO entry;
            """)
    }
}
