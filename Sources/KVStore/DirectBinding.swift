import Foundation
import GRDB
import GRDBSQLite

/// Runs a prepared statement that writes, with its arguments bound straight through SQLite's
/// C API rather than GRDB's `execute(arguments:)`, which boxes every argument: it is on the
/// path of every commit (one per write or unlink through the mount) and of the file remote's
/// push, which runs in the mount's process.
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
    /// Every bind throws SQLite's refusal (an index out of range, a value over SQLite's
    /// length limit) rather than leaving the parameter NULL.
    public func bind(_ index: Int32, _ text: String?) throws {
        guard let text else { return }  // cleared bindings are NULL
        try check(text.withCString { characters in
            guard let length = Int32(exactly: text.utf8.count) else { return SQLITE_TOOBIG }
            return sqlite3_bind_text(handle, index, characters, length, Self.transient)
        })
    }

    public func bind(_ index: Int32, _ bytes: [UInt8]?) throws {
        guard let bytes else { return }
        try check(bytes.withUnsafeBytes { bind(index, $0) })
    }

    public func bind(_ index: Int32, _ data: Data?) throws {
        guard let data else { return }
        try check(data.withUnsafeBytes { bind(index, $0) })
    }

    public func bind(_ index: Int32, _ number: Int64) throws {
        try check(sqlite3_bind_int64(handle, index, number))
    }

    private func bind(_ index: Int32, _ buffer: UnsafeRawBufferPointer) -> Int32 {
        guard let length = Int32(exactly: buffer.count) else { return SQLITE_TOOBIG }
        // A NULL pointer would bind NULL, not an empty blob.
        guard let bytes = buffer.baseAddress, length > 0 else { return sqlite3_bind_zeroblob(handle, index, 0) }
        return sqlite3_bind_blob(handle, index, bytes, length, Self.transient)
    }

    private func check(_ code: Int32) throws {
        guard code == SQLITE_OK else {
            throw DatabaseError(resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errstr(code)), sql: statement.sql)
        }
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
