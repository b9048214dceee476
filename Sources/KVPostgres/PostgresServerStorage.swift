import Foundation
import KVCloud
import KVServer
import KVStore
import Logging
import PostgresNIO

/// A server's storage in PostgreSQL, shared by any number of server instances: the same rows
/// as `SQLiteCloudStorage` (a store's totals, each key's latest change and the cursor it was
/// accepted at), decided by the same `CloudLedger`, plus the accounts and tokens.
///
/// A push locks its store's row (`SELECT ... FOR UPDATE`), so pushes to one store through any
/// instance take their cursors one after the other and commit in that order; it ends with
/// `NOTIFY kvsfs_changes, 'STORE'`, which every instance `LISTEN`s to and turns into wake-ups
/// of its long polls.
public final class PostgresServerStorage: ServerStorage, AccountStorage {
    public static let channel = "kvsfs_changes"
    /// Notified with a token's id when it is revoked.
    public static let tokenChannel = "kvsfs_tokens"

    private let client: PostgresClient
    private let runner: Task<Void, Never>
    private let logger: Logger
    public let location: PostgresLocation
    /// Names this instance in its notifications, so that it skips its own.
    private let instance = UUID().uuidString.lowercased()
    private let tokenCache = TokenCache()
    private let admission: AdmissionPolicy

    public var accounts: any AccountStorage { self }

    private init(location: PostgresLocation, logger: Logger, admission: AdmissionPolicy) {
        self.location = location
        self.admission = admission
        self.logger = logger
        let client = PostgresClient(configuration: location.clientConfiguration, backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
    }

    /// Connects to the database and creates or upgrades its tables.
    /// Pushes are admitted by `admission` (the stamp rule and its clock).
    public static func open(_ location: PostgresLocation, logger: Logger,
                            admission: AdmissionPolicy = .standard) async throws(CloudError) -> PostgresServerStorage {
        let storage = PostgresServerStorage(location: location, logger: logger, admission: admission)
        do {
            try await storage.migrate()
        } catch {
            await storage.close()
            throw .unavailable("\(location): \(Self.describe(error))")
        }
        return storage
    }

    public func close() async {
        runner.cancel()
        await runner.value
    }

    // MARK: - Schema

    /// On a connection of its own, so that a failure to connect says why.
    private func migrate() async throws {
        let db = try await PostgresConnection.connect(configuration: location.connectionConfiguration(), id: 0, logger: logger)
        do {
            try await db.withTransaction(logger: logger) { db in
                // Instances starting together take turns.
                try await db.query("SELECT pg_advisory_xact_lock(72017001)", logger: logger)
                for statement in Self.schema { try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                try await db.query("""
                    INSERT INTO kvsfs_setting (name, value) VALUES ('identity', \(UUID().uuidString.lowercased()))
                    ON CONFLICT (name) DO NOTHING
                    """, logger: logger)
            }
        } catch {
            try? await db.close()
            throw error
        }
        try await db.close()
    }

    private static let schema = [
        "CREATE TABLE IF NOT EXISTS kvsfs_setting (name text PRIMARY KEY, value text NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS kvsfs_store (
            id text PRIMARY KEY, cursor bigint NOT NULL, bytes bigint NOT NULL, keys bigint NOT NULL,
            total_bytes bigint NOT NULL, value_bytes bigint NOT NULL, max_keys bigint NOT NULL, key_name_bytes bigint NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS kvsfs_change (
            store text NOT NULL REFERENCES kvsfs_store ON DELETE CASCADE, key text NOT NULL, value bytea, type text,
            time bigint NOT NULL, counter integer NOT NULL, device text NOT NULL, cursor bigint NOT NULL,
            PRIMARY KEY (store, key), CHECK ((value IS NULL) = (type IS NULL)))
        """,
        "CREATE UNIQUE INDEX IF NOT EXISTS kvsfs_change_by_cursor ON kvsfs_change (store, cursor)",
        "CREATE TABLE IF NOT EXISTS kvsfs_account (name text PRIMARY KEY, created_at timestamptz NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS kvsfs_token (
            id text PRIMARY KEY, account text NOT NULL REFERENCES kvsfs_account ON DELETE CASCADE,
            secret_hash text NOT NULL UNIQUE, store text, read_only boolean NOT NULL,
            created_at timestamptz NOT NULL, revoked_at timestamptz)
        """,
    ]

    // MARK: - Stores

    public func identity() async throws(CloudError) -> String {
        try await run {
            let rows = try await client.query("SELECT value FROM kvsfs_setting WHERE name = 'identity'", logger: logger)
            for try await value in rows.decode(String.self) { return value }
            return ""
        }
    }

    public func generation(of account: String) async throws(CloudError) -> String? {
        try await run {
            let rows = try await client.query("SELECT value FROM kvsfs_setting WHERE name = \("generation:" + account)", logger: logger)
            for try await value in rows.decode(String.self) { return value }
            return nil
        }
    }

    public func renewGeneration(of account: String) async throws(CloudError) {
        try await run {
            try await client.query("""
                INSERT INTO kvsfs_setting (name, value) VALUES (\("generation:" + account), \(UUID().uuidString.lowercased()))
                ON CONFLICT (name) DO UPDATE SET value = excluded.value
                """, logger: logger)
        }
    }

    public func push(_ changes: [StampedChange], to store: String) async throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        let admitted = ChangeAdmission.admit(changes, policy: admission)
        let keys = Array(admitted.keys.filter { !$0.utf8.contains(0) })  // text cannot hold NUL: refused below
        return try await run {
            try await client.withTransaction(logger: logger) { db in
                // Round trips are what a push costs here (each one resumes the task between
                // other requests), so the lock, the store's state and the keys' current changes
                // come back together; the store's row is made on its first push.
                var locked = try await Self.lockState(of: store, keys: keys, db, logger)
                if locked == nil {
                    let limits = QuotaLimits.modelled
                    try await db.query("""
                        INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                        VALUES (\(store), 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes))
                        ON CONFLICT (id) DO NOTHING
                        """, logger: logger)
                    locked = try await Self.lockState(of: store, keys: keys, db, logger)
                }
                guard let (state, current) = locked else { throw CloudError.unavailable("store \(store) vanished during a push") }
                let decision = CloudLedger.decide(admitted, current: current, state: state, storesNUL: false)
                guard !decision.writes.isEmpty else { return decision.outcome }
                for (change, cursor) in decision.writes {
                    try await db.query("""
                        INSERT INTO kvsfs_change (store, key, value, type, time, counter, device, cursor)
                        VALUES (\(store), \(change.key), \(change.value), \(change.type?.rawValue), \(change.stamp.time),
                                \(change.stamp.counter), \(change.stamp.device), \(cursor))
                        ON CONFLICT (store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                            counter = excluded.counter, device = excluded.device, cursor = excluded.cursor
                        """, logger: logger)
                }
                // The notification reaches every listening instance when the transaction commits.
                try await db.query("""
                    WITH updated AS (
                        UPDATE kvsfs_store SET cursor = \(decision.state.cursor), bytes = \(decision.state.usage.bytes),
                            keys = \(decision.state.usage.keys) WHERE id = \(store) RETURNING id)
                    SELECT pg_notify(\(Self.channel), \(instance + " " + store)) FROM updated
                    """, logger: logger)
                return decision.outcome
            }
        }
    }

    public func changes(in store: String, after cursor: Int64, limit: Int) async throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        return try await run {
            let rows = try await client.query("""
                SELECT key, value, type, time, counter, device, cursor FROM kvsfs_change
                WHERE store = \(store) AND cursor > \(cursor) ORDER BY cursor LIMIT \(limit + 1)
                """, logger: logger)
            var changes = [StampedChange]()
            var last = cursor
            var more = false
            for try await row in rows.decode(ChangeRow.self) {
                if changes.count == limit {
                    more = true
                    continue
                }
                changes.append(Self.change(row))
                last = row.6
            }
            let mark = changes.last.map { HistoryMark(key: $0.key, cursor: last, stamp: $0.stamp) }
            if changes.isEmpty {
                // Past the store's newest change: asked by a reader that saw another history.
                let newest = try await self.cursor(of: store)
                if cursor > newest { throw CloudError.cursorAhead(asked: cursor, store: newest) }
            }
            return ChangeBatch(changes: changes, cursor: last, complete: !more, mark: mark)
        }
    }

    public func mark(in store: String, key: String) async throws(CloudError) -> HistoryMark? {
        try StoreName.check(store)
        // PostgreSQL's text holds no NUL: no row can have such a key.
        guard !key.utf8.contains(0) else { return nil }
        return try await run {
            let rows = try await client.query("""
                SELECT time, counter, device, cursor FROM kvsfs_change WHERE store = \(store) AND key = \(key)
                """, logger: logger)
            for try await (time, counter, device, cursor) in rows.decode((Int64, Int32, String, Int64).self) {
                return HistoryMark(key: key, cursor: cursor, stamp: ChangeStamp(time: time, counter: counter, device: device))
            }
            return nil
        }
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try StoreName.check(store)
        return try await run {
            let rows = try await client.query("SELECT cursor FROM kvsfs_store WHERE id = \(store)", logger: logger)
            for try await cursor in rows.decode(Int64.self) { return cursor }
            return 0
        }
    }

    public func followChanges(_ changed: @escaping @Sendable (String) -> Void, resync: @escaping @Sendable () -> Void) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await connection.listen(on: Self.channel) { notifications in
                                // Listening (again): changes made before now were not heard.
                                resync()
                                for try await notification in notifications {
                                    let (sender, store) = Self.parse(notification.payload)
                                    if sender != self.instance { changed(store) }
                                }
                            }
                        }
                        group.addTask {
                            try await connection.listen(on: Self.tokenChannel) { notifications in
                                // Hearing revocations from now on: tokens may be kept.
                                self.tokenCache.setListening(true)
                                for try await _ in notifications { self.tokenCache.forgetAll() }
                            }
                        }
                        group.addTask {
                            // A connection that died without closing would never end the loop above.
                            while true {
                                try await Task.sleep(for: .seconds(15))
                                do {
                                    try await Self.probe(connection, logger: self.logger)
                                } catch {
                                    try? await connection.close()  // ends the notifications too
                                    throw error
                                }
                            }
                        }
                        defer { self.tokenCache.setListening(false) }
                        try await group.next()
                        group.cancelAll()
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("listening for other servers' changes failed; retrying", metadata: ["error": "\(Self.describe(error))"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private static func parse(_ payload: String) -> (sender: String, store: String) {
        guard let space = payload.firstIndex(of: " ") else { return ("", payload) }
        return (String(payload[..<space]), String(payload[payload.index(after: space)...]))
    }

    /// `SELECT 1` on `connection`, failing if it takes more than 5 seconds.
    private static func probe(_ connection: PostgresConnection, logger: Logger) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { _ = try await connection.query("SELECT 1", logger: logger) }
            group.addTask {
                try await Task.sleep(for: .seconds(5))
                throw CloudError.unavailable("PostgreSQL did not answer within 5 s")
            }
            try await group.next()
            group.cancelAll()
        }
    }

    private typealias ChangeRow = (String, Data?, String?, Int64, Int32, String, Int64)

    private static func change(_ row: ChangeRow) -> StampedChange {
        StampedChange(key: row.0, value: row.1, type: row.2.flatMap(ValueType.init(rawValue:)),
                      stamp: ChangeStamp(time: row.3, counter: row.4, device: row.5))
    }

    /// Locks `store`'s row and reads its state with the latest changes of `keys`; nil when
    /// the store has no row yet.
    private static func lockState(of store: String, keys: [String], _ db: PostgresConnection, _ logger: Logger) async throws
        -> (CloudStoreState, [String: StampedChange])? {
        let rows = try await db.query("""
            SELECT s.cursor, s.bytes, s.keys, s.total_bytes, s.value_bytes, s.max_keys, s.key_name_bytes,
                   c.key, c.value, c.type, c.time, c.counter, c.device
            FROM kvsfs_store s LEFT JOIN kvsfs_change c ON c.store = s.id AND c.key = ANY(\(keys))
            WHERE s.id = \(store) FOR UPDATE OF s
            """, logger: logger)
        var state: CloudStoreState?
        var current = [String: StampedChange]()
        for try await row in rows.decode((Int64, Int, Int, Int, Int, Int, Int, String?, Data?, String?, Int64?, Int32?, String?).self) {
            let (cursor, bytes, count, totalBytes, valueBytes, maxKeys, keyNameBytes, key, value, type, time, counter, device) = row
            state = CloudStoreState(limits: QuotaLimits(totalBytes: totalBytes, valueBytes: valueBytes, keys: maxKeys, keyNameBytes: keyNameBytes),
                                    usage: QuotaUsage(bytes: bytes, keys: count), cursor: cursor)
            if let key, let time, let counter, let device {
                current[key] = StampedChange(key: key, value: value, type: type.flatMap(ValueType.init(rawValue:)),
                                             stamp: ChangeStamp(time: time, counter: counter, device: device))
            }
        }
        return state.map { ($0, current) }
    }

    // MARK: - Accounts

    public func addAccount(_ name: String, at date: Date) async throws(AccountError) {
        let added = try await account {
            let rows = try await client.query("""
                INSERT INTO kvsfs_account (name, created_at) VALUES (\(name), \(date)) ON CONFLICT (name) DO NOTHING RETURNING name
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
        if !added { throw .accountExists(name) }
    }

    public func hasAccount(_ name: String) async throws(AccountError) -> Bool {
        try await account {
            let rows = try await client.query("SELECT name FROM kvsfs_account WHERE name = \(name)", logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func addToken(_ token: TokenRecord) async throws(AccountError) {
        _ = try await account {
            try await client.query("""
                INSERT INTO kvsfs_token (id, account, secret_hash, store, read_only, created_at)
                VALUES (\(token.id), \(token.scope.account), \(token.secretHash), \(token.scope.store), \(token.scope.readOnly), \(token.createdAt))
                """, logger: logger)
        }
    }

    public func revokeToken(id: String, at date: Date) async throws(AccountError) -> Bool {
        try await account {
            // Every instance hears of it when this commits, and stops trusting the token.
            let rows = try await client.query("""
                WITH revoked AS (UPDATE kvsfs_token SET revoked_at = \(date) WHERE id = \(id) AND revoked_at IS NULL RETURNING id)
                SELECT id FROM revoked, pg_notify(\(Self.tokenChannel), id)
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func tokens(of account: String) async throws(AccountError) -> [TokenInfo] {
        try await self.account {
            let rows = try await client.query("""
                SELECT id, account, store, read_only, created_at, revoked_at IS NOT NULL FROM kvsfs_token
                WHERE account = \(account) ORDER BY created_at
                """, logger: logger)
            var tokens = [TokenInfo]()
            for try await (id, account, store, readOnly, createdAt, revoked) in rows.decode((String, String, String?, Bool, Date, Bool).self) {
                tokens.append(TokenInfo(id: id, scope: TokenScope(account: account, store: store, readOnly: readOnly), createdAt: createdAt, revoked: revoked))
            }
            return tokens
        }
    }

    /// Kept in memory while this instance hears revocations: open streams look their tokens up
    /// again once a second, which was most of what a busy instance asked the database.
    public func stillActiveToken(id: String) async throws(AccountError) -> TokenRecord? {
        if let kept = tokenCache.record(id) { return kept }
        return try await activeToken(id: id)
    }

    /// Always asks the database, so that a revoke stops requests at once on every instance.
    public func activeToken(id: String) async throws(AccountError) -> TokenRecord? {
        let generation = tokenCache.generation
        let record: TokenRecord? = try await account {
            let rows = try await client.query("""
                SELECT id, secret_hash, account, store, read_only, created_at FROM kvsfs_token WHERE id = \(id) AND revoked_at IS NULL
                """, logger: logger)
            for try await (id, hash, account, store, readOnly, createdAt) in rows.decode((String, String, String, String?, Bool, Date).self) {
                return TokenRecord(id: id, secretHash: hash, scope: TokenScope(account: account, store: store, readOnly: readOnly), createdAt: createdAt)
            }
            return nil
        }
        if let record { tokenCache.keep(record, readUnder: generation) }
        return record
    }

    // MARK: - Errors

    private func run<T>(_ body: () async throws -> T) async throws(CloudError) -> T {
        do {
            return try await body()
        } catch let error as CloudError {
            throw error
        } catch {
            throw .unavailable("\(location): \(Self.describe(error))")
        }
    }

    private func account<T>(_ body: () async throws -> T) async throws(AccountError) -> T {
        do {
            return try await body()
        } catch {
            throw .database("\(location): \(Self.describe(error))")
        }
    }

    /// PSQLError keeps its details out of `description`; a message names the server's words
    /// or the connection's failure.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PostgresTransactionError {
            return (error.beginError ?? error.closureError ?? error.commitError).map(describe) ?? "the transaction failed"
        }
        guard let error = error as? PSQLError else { return String(describing: error) }
        if let message = error.serverInfo?[.message] { return message }
        if let underlying = error.underlying { return String(describing: underlying) }
        return String(describing: error.code)
    }
}
