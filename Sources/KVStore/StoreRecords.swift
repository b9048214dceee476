import Foundation
import GRDB

/// One key and its value, as the `entry` table holds it.
struct EntryRecord: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "entry"
    var key: String
    /// The canonical XML property list.
    var value: Data
    var type: ValueType
    /// Milliseconds since 1970.
    var modifiedAt: Int64
}

/// The latest committed change of one key, in commit order (`sequence`).
public struct ChangeRecord: Codable, FetchableRecord, PersistableRecord, Sendable, Equatable {
    public static let databaseTableName = "change"
    public var sequence: Int64?
    public var key: String
    /// The canonical XML property list; nil when the change deleted the key.
    public var value: Data?
    public var type: ValueType?
    /// Milliseconds since 1970.
    public var changedAt: Int64
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
        migrator.registerMigration("v1 entries, change log, settings") { db in
            try db.create(table: "entry") { t in
                t.primaryKey("key", .text)
                t.column("value", .blob).notNull()
                t.column("type", .text).notNull()
                    .check(sql: "type IN ('string','integer','real','boolean','date','data','array','dictionary')")
                t.column("modifiedAt", .integer).notNull()
                t.check(sql: "length(key) > 0")
            }
            try db.create(table: "change") { t in
                t.autoIncrementedPrimaryKey("sequence")
                t.column("key", .text).notNull().unique(onConflict: .replace)
                t.column("value", .blob)
                t.column("type", .text)
                t.column("changedAt", .integer).notNull()
                t.check(sql: "(value IS NULL) = (type IS NULL)")
            }
            try db.create(table: "setting") { t in
                t.primaryKey("name", .text)
                t.column("value", .text).notNull()
            }
        }
        return migrator
    }
}
