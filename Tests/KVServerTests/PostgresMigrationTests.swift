import Foundation
import KVCloud
@testable import KVPostgres
import KVServer
import KVStore
import KVTestSupport
import Logging
import Testing

/// The PostgreSQL schema's migrations, on a real database ($KVSFS_TEST_POSTGRES, which
/// scripts/test sets; `bash scripts/postgres` starts the server and prints it).
@Suite("PostgreSQL schema migrations")
struct PostgresMigrationTests {
    private let logger = Logger(label: "kvsfs.test")

    /// The schema as kvsfs made it before migrations were recorded: every table, no
    /// `kvsfs_migration`.
    private static let unversionedSchema = """
        CREATE TABLE IF NOT EXISTS kvsfs_setting (name text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE IF NOT EXISTS kvsfs_store (
            id text PRIMARY KEY, cursor bigint NOT NULL, bytes bigint NOT NULL, keys bigint NOT NULL,
            total_bytes bigint NOT NULL, value_bytes bigint NOT NULL, max_keys bigint NOT NULL, key_name_bytes bigint NOT NULL);
        CREATE TABLE IF NOT EXISTS kvsfs_change (
            store text NOT NULL REFERENCES kvsfs_store ON DELETE CASCADE, key text NOT NULL, value bytea, type text,
            time bigint NOT NULL, counter integer NOT NULL, device text NOT NULL, cursor bigint NOT NULL,
            PRIMARY KEY (store, key), CHECK ((value IS NULL) = (type IS NULL)));
        CREATE UNIQUE INDEX IF NOT EXISTS kvsfs_change_by_cursor ON kvsfs_change (store, cursor);
        CREATE TABLE IF NOT EXISTS kvsfs_account (name text PRIMARY KEY, created_at timestamptz NOT NULL);
        CREATE TABLE IF NOT EXISTS kvsfs_token (
            id text PRIMARY KEY, account text NOT NULL REFERENCES kvsfs_account ON DELETE CASCADE,
            secret_hash text NOT NULL UNIQUE, store text, read_only boolean NOT NULL,
            created_at timestamptz NOT NULL, revoked_at timestamptz);
        """

    /// alice's store `default` with a value and a deletion, her account and a token, the
    /// remote's identity and her generation.
    private static let rows = """
        INSERT INTO kvsfs_setting (name, value) VALUES ('identity', 'remote-before'), ('generation:alice', 'generation-before');
        INSERT INTO kvsfs_store VALUES ('alice.default', 2, 17, 1, 1048576, 1048576, 1024, 65536);
        INSERT INTO kvsfs_change VALUES
            ('alice.default', 'a', convert_to('<string>x</string>', 'UTF8'), 'string', 1700000000000, 0, 'laptop', 1),
            ('alice.default', 'b', NULL, NULL, 1700000000001, 0, 'laptop', 2);
        INSERT INTO kvsfs_account VALUES ('alice', '2024-01-01T00:00:00Z');
        INSERT INTO kvsfs_token VALUES ('t1', 'alice', 'hash-of-secret', NULL, false, '2024-01-01T00:00:00Z', NULL);
        """

    private var migrationNames: [String] { PostgresSchema.migrations.map(\.name) }

    @Test("a database made before migrations were recorded keeps its rows, lists the migrations and takes pushes")
    func adoptsUnversionedDatabase() async throws {
        try await withDatabase { database in
            try psql(database, Self.unversionedSchema + Self.rows)
            let storage = try await PostgresServerStorage.open(PostgresLocation(url: database.url), logger: logger)
            #expect(try await storage.identity() == "remote-before")
            #expect(try await storage.generation(of: "alice") == "generation-before")
            let batch = try await storage.changes(in: "alice.default", after: 0, limit: 10)
            #expect(batch.changes.map(\.key) == ["a", "b"])
            #expect(batch.changes.first?.value == Data("<string>x</string>".utf8))
            #expect(batch.cursor == 2)
            #expect(try await storage.activeToken(id: "t1")?.secretHash == "hash-of-secret")
            #expect(try await storage.hasAccount("alice"))
            // Each key's latest change is its first version; b's removal (2023) is past the 30 days kept.
            #expect(try await storage.history(of: "a", in: "alice.default").map(\.version) == [1])
            #expect(try await storage.version(1, of: "a", in: "alice.default")?.value == Data("<string>x</string>".utf8))
            #expect(try await storage.history(of: "b", in: "alice.default").isEmpty)
            let change = StampedChange(key: "c", value: Data("<string>y</string>".utf8), type: .string,
                                       stamp: ChangeStamp(time: Int64(Date().timeIntervalSince1970 * 1000), counter: 0, device: "phone"))
            let outcome = try await storage.push([change], to: "alice.default")
            #expect(outcome.accepted.map(\.key) == ["c"])
            #expect(try await storage.cursor(of: "alice.default") == 3)
            #expect(try await storage.history(of: "c", in: "alice.default").map(\.version) == [3])
            await storage.close()
            #expect(try psql(database, "SELECT name FROM kvsfs_migration ORDER BY name") == migrationNames.sorted())
        }
    }

    @Test("opening a database again applies no migration again, and keeps its identity")
    func opensTwice() async throws {
        try await withDatabase { database in
            let location = try PostgresLocation(url: database.url)
            let first = try await PostgresServerStorage.open(location, logger: logger)
            let identity = try await first.identity()
            await first.close()
            let recorded = try psql(database, "SELECT name || ' ' || applied_at FROM kvsfs_migration ORDER BY name")
            #expect(recorded.count == migrationNames.count)
            let second = try await PostgresServerStorage.open(location, logger: logger)
            #expect(try await second.identity() == identity)
            await second.close()
            #expect(try psql(database, "SELECT name || ' ' || applied_at FROM kvsfs_migration ORDER BY name") == recorded)
        }
    }

    @Test("servers opening a new database at once take turns: each migration is applied once")
    func opensTogether() async throws {
        try await withDatabase { database in
            let location = try PostgresLocation(url: database.url)
            async let one = PostgresServerStorage.open(location, logger: logger)
            async let two = PostgresServerStorage.open(location, logger: logger)
            let (a, b) = try await (one, two)
            #expect(try await a.identity() == (try await b.identity()))
            await a.close()
            await b.close()
            #expect(try psql(database, "SELECT name FROM kvsfs_migration ORDER BY name") == migrationNames.sorted())
        }
    }

    /// A fresh database, dropped afterwards.
    private func withDatabase(_ body: (TestDatabase) async throws -> Void) async throws {
        let directory = TemporaryDirectory("kvsfs-migrations")
        defer { directory.remove() }
        let database = try TestDatabase(.postgres, in: directory)
        defer { database.remove() }
        try await body(database)
    }

    /// Runs `sql` on the database; the rows it returns, one line each.
    @discardableResult
    private func psql(_ database: TestDatabase, _ sql: String) throws -> [String] {
        let result = try run("/usr/bin/psql", [database.url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        guard result.status == 0 else { throw PostgresTestError(description: "psql: \(result)") }
        return result.standardOutput.split(separator: "\n").map(String.init)
    }

    private struct PostgresTestError: Error, CustomStringConvertible {
        let description: String
    }
}
