import Foundation
import GRDB
import GRDBSQLite

/// Runs a prepared statement that writes, with its arguments bound straight through SQLite's
/// C API. GRDB's `execute(arguments:)` boxes every argument and nests a closure per argument;
/// on the path of every commit (one per write or unlink through the mount) that was about a
/// sixth of the daemon's user time. Also used by the file remote's push, which runs in the
/// mount's process.
public struct DirectBinding {
    private let statement: Statement
    private var handle: OpaquePointer { statement.sqliteStatement }
    /// SQLite copies what is bound (SQLITE_TRANSIENT).
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    public init(_ statement: Statement) {
        self.statement = statement
        sqlite3_reset(statement.sqliteStatement)
        sqlite3_clear_bindings(statement.sqliteStatement)
    }

    /// Binds every byte of `text`, NUL characters included (GRDB's binding ends at the first).
    public func bind(_ index: Int32, _ text: String?) {
        guard let text else { return }  // cleared bindings are NULL
        text.withCString { _ = sqlite3_bind_text(handle, index, $0, Int32(text.utf8.count), Self.transient) }
    }

    public func bind(_ index: Int32, _ bytes: [UInt8]?) {
        guard let bytes else { return }
        bytes.withUnsafeBytes { _ = sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), Self.transient) }
    }

    public func bind(_ index: Int32, _ data: Data?) {
        guard let data else { return }
        data.withUnsafeBytes { _ = sqlite3_bind_blob(handle, index, $0.baseAddress, Int32($0.count), Self.transient) }
    }

    public func bind(_ index: Int32, _ number: Int64) {
        sqlite3_bind_int64(handle, index, number)
    }

    /// Steps the statement to its end; throws SQLite's error (a constraint, say).
    public func run(in db: Database) throws {
        let code = sqlite3_step(handle)
        sqlite3_reset(handle)
        guard code == SQLITE_DONE else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(db.sqliteConnection)),
                                sql: statement.sql)
        }
    }
}
