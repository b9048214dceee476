import Foundation
import KVCloud
import KVNetwork
import KVStore
import Logging
import PostgresNIO
import Synchronization

/// A server's storage in PostgreSQL, shared by any number of server instances: the same rows
/// as `SQLiteCloudStorage` (a store's totals, each key's latest change and the cursor it was
/// accepted at), decided by the same `CloudLedger`, plus the accounts and tokens.
///
/// A push locks its store's row (`SELECT ... FOR UPDATE`), so pushes to one store through any
/// instance take their cursors one after the other and commit in that order; it ends with
/// `NOTIFY kvsfs_changes, 'STORE'`, which every instance `LISTEN`s to and turns into wake-ups
/// of its long polls. Pushes arriving together share one transaction (`PushGroups`).
public final class PostgresServerStorage: ServerStorage, AccountStorage {
    public static let channel = "kvsfs_changes"
    /// Notified with a token's id when it is revoked.
    public static let tokenChannel = "kvsfs_tokens"

    /// The pool for reads, listening and accounts: one connection listens for good, and a
    /// store's event streams share one read per change (`StoreReads`), so a few serve
    /// thousands of streams.
    static let readConnections = (kept: 2, most: 16)
    /// The pool group commit takes its connections from: one group commits at a time
    /// (`PushGroups`).
    static let pushConnections = (kept: 1, most: 2)

    let client: PostgresClient
    /// The group commits' own connections: a push never waits behind the reads of the
    /// stores' event streams for a connection.
    let pushClient: PostgresClient
    private let runner: Task<Void, Never>
    let logger: Logger
    public let location: PostgresLocation
    /// Names this instance in its notifications, so that it skips its own.
    let instance = UUID().uuidString.lowercased()
    let tokenCache = TokenCache()
    let admission: AdmissionPolicy
    /// Pushes that arrive together commit together (`PushGroups`).
    let pushGroups = PushGroups<GroupedPush>()
    /// The stores' schemas as last decoded: a push reads only the version.
    let decodedSchemas = DecodedSchemas()
    /// Stores whose row this instance has seen made (`createStores`).
    let knownStores = Mutex(Set<String>())
    /// Device names this instance kept, or found kept, by store and device (`keepNames`): a push
    /// naming its device as kept costs no statement. At most `DeviceName.keptPerStore` times
    /// 64 entries; past that it starts again.
    let toldNames = Mutex([DeviceNameKey: String]())

    /// How many transactions pushes took, and how many pushes they held, since the storage
    /// opened: pushes per transaction is what group commit saves.
    public var pushTransactions: (transactions: Int, pushes: Int) {
        let committed = pushGroups.committed
        return (committed.groups, committed.pushes)
    }

    public var accounts: any AccountStorage { self }

    /// `synchronousCommit`: the setting every session asks for as it connects
    /// (`SynchronousCommit`).
    private init(location: PostgresLocation, logger: Logger, admission: AdmissionPolicy, synchronousCommit: String) {
        self.location = location
        self.admission = admission
        self.logger = logger
        let session = (SynchronousCommit.parameter, synchronousCommit)
        var configuration = location.clientConfiguration(kept: Self.readConnections.kept, most: Self.readConnections.most)
        configuration.options.additionalStartupParameters.append(session)
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        var pushes = location.clientConfiguration(kept: Self.pushConnections.kept, most: Self.pushConnections.most)
        pushes.options.additionalStartupParameters.append(session)
        let pushClient = PostgresClient(configuration: pushes, backgroundLogger: logger)
        self.client = client
        self.pushClient = pushClient
        runner = Task {
            await withDiscardingTaskGroup { group in
                group.addTask { await client.run() }
                group.addTask { await pushClient.run() }
            }
        }
    }

    /// Connects to the database and applies the schema's migrations it lacks (see
    /// `PostgresSchema`). Pushes are admitted by `admission` (the stamp rule and its clock).
    /// A database whose commits do not wait for the disk gets sessions that do
    /// (`SynchronousCommit`), with a warning.
    public static func open(_ location: PostgresLocation, logger: Logger,
                            admission: AdmissionPolicy = .standard) async throws(CloudError) -> PostgresServerStorage {
        let setting: String
        do {
            setting = try await migrate(location, logger)
        } catch {
            throw Self.cloudError(error, at: location)
        }
        let asked = SynchronousCommit.asked(given: setting)
        if SynchronousCommit.isWeak(setting) {
            logger.warning("""
                the database's synchronous_commit is \(setting): kvsfs's sessions set it to \(asked), so that a push \
                is answered only once it is on disk
                """)
        }
        return PostgresServerStorage(location: location, logger: logger, admission: admission, synchronousCommit: asked)
    }

    public func close() async {
        runner.cancel()
        await runner.value
    }

    /// On a connection of its own, so that a failure to connect says why. Returns the
    /// `synchronous_commit` the database gives a session of this role.
    private static func migrate(_ location: PostgresLocation, _ logger: Logger) async throws -> String {
        let db = try await PostgresConnection.connect(configuration: location.connectionConfiguration(), id: 0, logger: logger)
        let setting: String
        do {
            try await PostgresSchema.migrate(db, logger: logger)
            setting = try await SynchronousCommit.current(db, logger)
        } catch {
            try? await db.close()
            throw error
        }
        try await db.close()
        return setting
    }

    /// The `synchronous_commit` a push's transaction runs with: for tests, which cannot cut
    /// the power.
    package func pushSynchronousCommit() async throws(CloudError) -> String {
        try await run { try await pushClient.withConnection { db in try await SynchronousCommit.current(db, logger) } }
    }

    // MARK: - Settings

    public func identity() async throws(CloudError) -> String {
        try await run {
            let rows = try await client.query("SELECT value FROM kvsfs_setting WHERE name = 'identity'", logger: logger)
            for try await value in rows.decode(String.self) { return value }
            return ""
        }
    }

    public var description: String { location.description }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try await run {
            let rows = try await client.query("""
                UPDATE kvsfs_setting SET value = \(UUID().uuidString.lowercased()) WHERE name = 'identity' AND value = \(seen)
                RETURNING name
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    /// Looks at the store's cursor every 10 ms, for tools and tests: a server waits through its
    /// `ChangeNotifier` instead, which `followChanges` keeps told of other instances' pushes.
    /// The mark is checked by the fetch that follows.
    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                if try await self.cursor(of: store) > cursor { return true }
            } catch {
                if Task.isCancelled { return false }  // the query was cut short: the waiter gave up
                throw error
            }
            guard ContinuousClock.now < deadline else { return false }
            do {
                try await Task.sleep(for: .milliseconds(10))
            } catch {
                return false
            }
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

    // MARK: - History policy

    /// What `store` keeps of each key's past (`HistoryPolicy.standard` until set).
    public func historyPolicy(of store: String) async throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        return try await run {
            let rows = try await client.query("SELECT history_versions, history_days FROM kvsfs_store WHERE id = \(store)", logger: logger)
            for try await (versions, days) in rows.decode((Int, Int).self) {
                return try Self.checked(HistoryPolicy(versions: versions, retentionDays: days))
            }
            return .standard
        }
    }

    /// One statement: makes the store's row if it has none (with the limits a push would give
    /// it), or changes only the parts named. Versions beyond a lowered count go when their key
    /// is next written.
    public func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) async throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        try change.check()
        let limits = QuotaLimits.modelled
        let standard = HistoryPolicy.standard
        let policy = try await run { () async throws -> HistoryPolicy in
            let rows = try await client.query("""
                INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes,
                                         history_versions, history_days)
                VALUES (\(store), 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes),
                        coalesce(\(change.versions)::integer, \(standard.versions)), coalesce(\(change.retentionDays)::integer, \(standard.retentionDays)))
                ON CONFLICT (id) DO UPDATE SET
                    history_versions = coalesce(\(change.versions)::integer, kvsfs_store.history_versions),
                    history_days = coalesce(\(change.retentionDays)::integer, kvsfs_store.history_days)
                -- Only to a policy in its ranges: a broken part the change does not name stays as it is.
                WHERE coalesce(\(change.versions)::integer, kvsfs_store.history_versions)
                          BETWEEN \(HistoryPolicy.versionRange.lowerBound) AND \(HistoryPolicy.versionRange.upperBound)
                      AND coalesce(\(change.retentionDays)::integer, kvsfs_store.history_days)
                          BETWEEN \(HistoryPolicy.retentionDayRange.lowerBound) AND \(HistoryPolicy.retentionDayRange.upperBound)
                RETURNING history_versions, history_days
                """, logger: logger)
            for try await (versions, days) in rows.decode((Int, Int).self) {
                return try Self.checked(HistoryPolicy(versions: versions, retentionDays: days))
            }
            let stored = try await historyPolicyAsStored(of: store)
            throw CloudError.refused("nothing was set: the store's history policy would still be outside the rule ("
                                     + "\(HistoryPolicyChange(versions: stored.versions, retentionDays: stored.retentionDays).violation ?? "unreadable")"
                                     + "); name that part too")
        }
        knownStores.withLock { _ = $0.insert(store) }
        return policy
    }

    /// The policy as stored, unchecked (what a refused change names as still broken).
    private func historyPolicyAsStored(of store: String) async throws -> HistoryPolicy {
        let rows = try await client.query("SELECT history_versions, history_days FROM kvsfs_store WHERE id = \(store)", logger: logger)
        for try await (versions, days) in rows.decode((Int, Int).self) { return HistoryPolicy(versions: versions, retentionDays: days) }
        return .standard
    }

    /// A stored policy, which the schema's checks keep in its ranges.
    private static func checked(_ policy: HistoryPolicy) throws(CloudError) -> HistoryPolicy {
        do {
            try policy.check()
        } catch {
            throw .unavailable("the store's history policy is outside the rule: \(error)")
        }
        return policy
    }

    // MARK: - Errors

    func run<T>(_ body: () async throws -> T) async throws(CloudError) -> T {
        do {
            return try await body()
        } catch let error as CloudError {
            throw error
        } catch let error as PostgresTransactionError where error.closureError is CloudError {
            // A refusal decided inside the transaction (which rolled it back).
            throw error.closureError as! CloudError
        } catch {
            throw Self.cloudError(error, at: location)
        }
    }

    func account<T>(_ body: () async throws -> T) async throws(AccountError) -> T {
        do {
            return try await body()
        } catch {
            throw .database(Self.describe(error, at: location))
        }
    }

    /// The remote error a failure to reach or use the database at `location` is.
    static func cloudError(_ error: any Error, at location: PostgresLocation) -> CloudError {
        if let failure = networkFailure(error, at: location) {
            return .unreachable(failure.cause, "PostgreSQL unreachable at \(location.host):\(location.port): \(failure)")
        }
        return .unavailable(describe(error, at: location))
    }

    /// The connection failure `error` is, or holds, if it is one.
    static func networkFailure(_ error: any Error, at location: PostgresLocation) -> NetworkFailure? {
        if let error = error as? PostgresTransactionError {
            return (error.beginError ?? error.commitError).flatMap { networkFailure($0, at: location) }
        }
        return NetworkFailure((error as? PSQLError)?.underlying ?? error, host: location.host, port: location.port)
    }

    /// What went wrong, in words: the server's own message, the connection's failure, or the
    /// kind of failure PostgresNIO names; never a library's type. PSQLError keeps its details
    /// out of `description`.
    static func describe(_ error: any Error, at location: PostgresLocation? = nil) -> String {
        if let error = error as? PostgresTransactionError {
            return (error.beginError ?? error.closureError ?? error.commitError).map { describe($0, at: location) } ?? "the transaction failed"
        }
        let place = location.map { "PostgreSQL at \($0.host):\($0.port)" } ?? "PostgreSQL"
        if let location, let failure = networkFailure(error, at: location) { return "\(place) unreachable: \(failure)" }
        if let error = error as? CloudError { return error.reason }
        guard let error = error as? PSQLError else { return "\(place) failed: the request did not complete" }
        if let message = error.serverInfo?[.message] { return "\(place): \(message)" }
        if let underlying = error.underlying, let failure = NetworkFailure(underlying, host: location?.host ?? "PostgreSQL", port: location?.port ?? 5432) {
            return "\(place) unreachable: \(failure)"
        }
        return "\(place) failed (\(error.code))"
    }
}

/// A device of a store, as `PostgresServerStorage.toldNames` knows its name.
struct DeviceNameKey: Hashable {
    let store: String
    let device: String
}
