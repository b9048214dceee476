import Foundation
import GRDB
import KVCloud
import KVStore

/// A server's storage in one SQLite file: stores through `SQLiteCloudStorage` (the file
/// remote's code, as an `EmbeddedChangeLog`), accounts in tables of the same file. One server
/// per file.
///
/// GRDB's calls block their thread: every one runs on `BlockingThreads.sqlite`, never on the
/// caller's. (A push suspends in GRDB's own async write instead.)
///
/// A push is answered once it is on disk (`SQLiteCloudStorage`: synchronous = FULL). Pushes
/// that arrive together commit together (`PushGroups`), sharing one transaction and so one
/// flush to disk, each with its own outcome.
public final class SQLiteServerStorage: ServerStorage {
    private let cloud: SQLiteCloudStorage
    private let log: EmbeddedChangeLog<ContinuousClock>
    public let accounts: any AccountStorage
    private let threads = BlockingThreads.sqlite
    private let pushGroups = PushGroups<SQLiteCloudStorage.AdmittedPush>()

    public init(path: String, admission: AdmissionPolicy = .standard) throws(CloudError) {
        // It holds the token hashes: 0600, even if an older kvsfs made it readable to others.
        if let failure = OwnerOnlyFile.restrict(path) { throw .unavailable(failure) }
        let cloud = try SQLiteCloudStorage(path: path, readers: 4, admission: admission)
        self.cloud = cloud
        log = EmbeddedChangeLog(description: path, clock: ContinuousClock(), threads: .sqlite) { cloud }
        do {
            accounts = try SQLiteAccountStorage(path: path)
        } catch {
            throw .unavailable(error.description)
        }
    }

    public var description: String { log.description }

    public func identity() async throws(CloudError) -> String {
        try await log.identity()
    }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try await log.renewIdentity(replacing: seen)
    }

    public func generation(of account: String) async throws(CloudError) -> String? {
        try await threads.run { [cloud] () throws(CloudError) in try cloud.setting("generation:" + account) }
    }

    public func renewGeneration(of account: String) async throws(CloudError) {
        try await threads.run { [cloud] () throws(CloudError) in
            try cloud.setSetting("generation:" + account, to: UUID().uuidString.lowercased())
        }
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        let push = try cloud.admit(changes, to: store, mark: mark)
        return try await pushGroups.submit(push, changes: push.admitted.entries.count) { [cloud] group in await cloud.commit(group) }
    }

    public var pushTransactions: (transactions: Int, pushes: Int) {
        let committed = pushGroups.committed
        return (committed.groups, committed.pushes)
    }

    /// The `synchronous` setting of the connection that commits pushes (2 is FULL): for tests.
    package func commitSynchronous() async throws(CloudError) -> Int {
        try await threads.run { [cloud] () throws(CloudError) in try cloud.commitSynchronous() }
    }

    public func makeStore(_ store: String, of account: String, limit: Int) async throws(CloudError) -> Bool {
        try await threads.run { [cloud] () throws(CloudError) in
            try cloud.makeStore(store, amongStoresStartingWith: account + ".", limit: limit)
        }
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try await log.changes(in: store, after: cursor, mark: mark, limit: limit)
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try await log.cursor(of: store)
    }

    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        try await log.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
    }

    public func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion] {
        try await log.history(of: key, in: store)
    }

    public func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion? {
        try await log.version(version, of: key, in: store)
    }

    public func historyPolicy(of store: String) async throws(CloudError) -> HistoryPolicy {
        try await threads.run { [cloud] () throws(CloudError) in try cloud.historyPolicy(of: store) }
    }

    public func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) async throws(CloudError) -> HistoryPolicy {
        try await threads.run { [cloud] () throws(CloudError) in try cloud.changeHistoryPolicy(change, of: store) }
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try await log.schema(of: store)
    }

    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try await log.setSchema(text, of: store, ifVersion: ifVersion)
    }

    /// Nobody else writes this file: every change comes through this server.
    public func followChanges(_ changed: @escaping @Sendable (String) -> Void, resync: @escaping @Sendable () -> Void) async {}

    public func close() async {}
}

/// Accounts and tokens in tables of a SQLite file (the single-machine server's database).
/// Like the stores', every call runs on threads of its own: `BlockingThreads.sqliteAccounts`.
public final class SQLiteAccountStorage: AccountStorage {
    private let database: DatabasePool
    private let rechecks = TokenRechecks()

    public init(path: String) throws(AccountError) {
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            database = try DatabasePool(path: path, configuration: configuration)
            // As the stores': a token or account answered for is on disk.
            try SQLiteCloudStorage.commitDurably(database)
            var migrator = DatabaseMigrator()
            migrator.registerMigration("server v1 accounts and tokens") { db in
                try db.create(table: "account") { t in
                    t.primaryKey("name", .text)
                    t.column("createdAt", .datetime).notNull()
                }
                try db.create(table: "token") { t in
                    t.primaryKey("id", .text)
                    t.column("account", .text).notNull().references("account", onDelete: .cascade)
                    t.column("secretHash", .text).notNull().unique()
                    t.column("store", .text)
                    t.column("readOnly", .boolean).notNull()
                    t.column("createdAt", .datetime).notNull()
                    t.column("revokedAt", .datetime)
                }
            }
            try migrator.migrate(database)
        } catch {
            throw .database(String(describing: error))
        }
    }

    public func addAccount(_ name: String, at date: Date) async throws(AccountError) {
        try await run {
            try self.database.write { db in
                if try Bool.fetchOne(db, sql: "SELECT 1 FROM account WHERE name = ?", arguments: [name]) ?? false {
                    throw AccountError.accountExists(name)
                }
                try db.execute(sql: "INSERT INTO account (name, createdAt) VALUES (?, ?)", arguments: [name, date])
            }
        }
    }

    public func hasAccount(_ name: String) async throws(AccountError) -> Bool {
        try await run { try self.database.read { db in try Bool.fetchOne(db, sql: "SELECT 1 FROM account WHERE name = ?", arguments: [name]) ?? false } }
    }

    public func addToken(_ token: TokenRecord) async throws(AccountError) {
        try await run {
            try self.database.write { db in
                try db.execute(sql: """
                    INSERT INTO token (id, account, secretHash, store, readOnly, createdAt) VALUES (?, ?, ?, ?, ?, ?)
                    """, arguments: [token.id, token.scope.account, token.secretHash, token.scope.store, token.scope.readOnly, token.createdAt])
            }
        }
    }

    public func revokeToken(id: String, at date: Date) async throws(AccountError) -> Bool {
        try await run {
            try self.database.write { db -> Bool in
                try db.execute(sql: "UPDATE token SET revokedAt = ? WHERE id = ? AND revokedAt IS NULL", arguments: [date, id])
                return db.changesCount > 0
            }
        }
    }

    public func tokens(of account: String) async throws(AccountError) -> [TokenInfo] {
        try await run {
            try self.database.read { db in
                try Row.fetchAll(db, sql: "SELECT * FROM token WHERE account = ? ORDER BY createdAt", arguments: [account]).map { row in
                    TokenInfo(id: try row.decode(forColumn: "id"), scope: try Self.scope(row), createdAt: try row.decode(forColumn: "createdAt"),
                              revoked: try row.decode(Date?.self, forColumn: "revokedAt") != nil)
                }
            }
        }
    }

    /// A token row's scope, its columns' types checked.
    private static func scope(_ row: Row) throws -> TokenScope {
        TokenScope(account: try row.decode(forColumn: "account"), store: try row.decode(forColumn: "store"),
                   readOnly: try row.decode(forColumn: "readOnly"))
    }

    /// Streams' looks again at their tokens, shared (`TokenRechecks`): other processes revoke
    /// tokens in this file unheard.
    public func stillActiveToken(id: String) async throws(AccountError) -> TokenRecord? {
        try await rechecks.record(id) { () throws(AccountError) in try await self.activeToken(id: id) }
    }

    public func activeToken(id: String) async throws(AccountError) -> TokenRecord? {
        try await run {
            // Checked on every request: one statement, no transaction around it.
            try self.database.unsafeRead { db in
                try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM token WHERE id = ? AND revokedAt IS NULL"), arguments: [id]).map { row in
                    TokenRecord(id: try row.decode(forColumn: "id"), secretHash: try row.decode(forColumn: "secretHash"),
                                scope: try Self.scope(row), createdAt: try row.decode(forColumn: "createdAt"))
                }
            }
        }
    }

    /// Runs `body` on `BlockingThreads.sqliteAccounts`; an error other than an `AccountError` is the
    /// database's.
    private func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws(AccountError) -> T {
        try await BlockingThreads.sqliteAccounts.run { () throws(AccountError) in
            do {
                return try body()
            } catch let error as AccountError {
                throw error
            } catch {
                throw .database(String(describing: error))
            }
        }
    }
}
