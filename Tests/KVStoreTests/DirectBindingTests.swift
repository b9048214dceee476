import Foundation
import GRDB
import KVStore
import Testing

@Suite("Statements bound through SQLite's C API")
struct DirectBindingTests {
    @Test("a parameter SQLite refuses is an error, never a NULL written in its place")
    func refusedBindThrows() throws {
        let database = try DatabaseQueue()
        try database.write { db in
            try db.execute(sql: "CREATE TABLE t (a TEXT, b BLOB)")
            let statement = try db.makeStatement(sql: "INSERT INTO t (a, b) VALUES (?, ?)")
            let row = DirectBinding(statement)
            #expect(throws: DatabaseError.self) { try row.bind(3, "no such parameter") }
            #expect(throws: DatabaseError.self) { try row.bind(0, Int64(1)) }
            try row.bind(1, "a\0b")
            try row.bind(2, [UInt8]())
            try row.run(in: db)
            let stored = try Row.fetchOne(db, sql: "SELECT a, length(CAST(a AS BLOB)), b IS NULL, length(b) FROM t")!
            #expect(stored[1] as Int == 3, "every byte of the text, NUL included")
            #expect(stored[2] as Bool == false && stored[3] as Int == 0, "an empty blob is a blob, not NULL")
        }
    }
}
