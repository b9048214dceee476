import ArgumentParser
import Foundation
import Hummingbird
import KVCloud
import KVPostgres
import KVServer
import KVStore
import Logging
import Synchronization

/// Options naming the server's database.
struct DatabaseOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Where the server keeps its data: sqlite:///path/db.sqlite, or postgres://USER@HOST[:PORT]/DATABASE.",
        discussion: "A PostgreSQL password is read from PGPASSWORD when the URL has none."))
    var database: String

    func validate() throws {
        if PostgresLocation.isPostgresURL(database) {
            do {
                _ = try PostgresLocation(url: database)
            } catch {
                throw ValidationError("--database: \(error.description)")
            }
        } else if sqlitePath == nil {
            throw ValidationError("--database must be sqlite:///absolute/path or postgres://USER@HOST[:PORT]/DATABASE")
        }
    }

    /// The database as the log shows it: never a password.
    var shownLocation: String {
        if let path = sqlitePath { return path }
        return (try? PostgresLocation(url: database)).map { "\($0)" } ?? "PostgreSQL"
    }

    private var sqlitePath: String? {
        database.hasPrefix("sqlite:///") ? String(database.dropFirst("sqlite://".count)) : nil
    }

    /// Opens the database (creating its tables when new); pushes are admitted by `admission`.
    func open(logger: Logger, admission: AdmissionPolicy = .standard) async throws -> any ServerStorage {
        do {
            if let path = sqlitePath { return try SQLiteServerStorage(path: path, admission: admission) }
            return try await PostgresServerStorage.open(try PostgresLocation(url: database), logger: logger, admission: admission)
        } catch let error as CloudError {
            switch error {
            case .unavailable(let reason), .unreachable(_, let reason): throw CommandFailure("cannot open the database: \(reason)")
            default: throw CommandFailure(error.description)
            }
        }
    }

    /// Runs `body` on the accounts; its refusal becomes the command's one-line error.
    func withAccounts<T: Sendable>(_ body: @escaping @Sendable (AccountDirectory) async throws(AccountError) -> T) throws -> T {
        try waitFor {
            var logger = Logger(label: "kvsfs")
            logger.logLevel = .critical
            let storage = try await open(logger: logger)
            let result: Result<T, AccountError>
            do throws(AccountError) {
                result = .success(try await body(AccountDirectory(storage: storage.accounts)))
            } catch {
                result = .failure(error)
            }
            await storage.close()
            return try result.mapError { CommandFailure($0.description) }.get()
        }
    }
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve stores to mounts over HTTP: the sync server.",
        discussion: "Runs until SIGTERM or SIGINT, then finishes the requests in progress. See kvsfs(1), SERVER.")

    @Option(help: "HOST:PORT to listen on.")
    var listen: String = "127.0.0.1:8780"

    @OptionGroup var database: DatabaseOptions

    @Option(name: .customLong("rate-limit"), help: "Requests per second per token, in bursts of twice that (0: no limit).")
    var rateLimit: Double = 1000

    @Option(name: .customLong("max-stores-per-account"), help: ArgumentHelp(
        "The most stores one account may hold (1 to 1000000).",
        discussion: "A push that would make one more store is refused with 403 and the reason; the stores held go on."))
    var maxStoresPerAccount: Int = SyncServer.defaultMaxStoresPerAccount

    @Option(name: .customLong("max-clock-skew"), help: ArgumentHelp(
        "How many seconds ahead of this server's clock a pushed change's stamp may be.",
        discussion: "A change stamped further ahead is refused with its reason, as a quota refusal is."))
    var maxClockSkew: Int = Int(StampRule.maximumSkew / 1000)

    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp(
        "Close a connection that sends no whole request for this many seconds.",
        discussion: "Long polls and event streams, whose requests have arrived, are not cut."))
    var idleTimeout: Double = 30

    @Option(name: .customLong("tls-cert"), help: "Serve HTTPS with this certificate chain (PEM); needs --tls-key.")
    var tlsCertificate: String?

    @Option(name: .customLong("tls-key"), help: "The private key (PEM) of --tls-cert.")
    var tlsKey: String?

    @OptionGroup var log: LogOptions

    func validate() throws {
        guard address != nil else { throw ValidationError("--listen must be HOST:PORT") }
        guard rateLimit >= 0 else { throw ValidationError("--rate-limit must be 0 or more") }
        guard idleTimeout > 0, idleTimeout <= 86_400 else { throw ValidationError("--idle-timeout must be more than 0 and at most 86400 seconds") }
        guard (1...1_000_000).contains(maxStoresPerAccount) else { throw ValidationError("--max-stores-per-account must be 1 to 1000000") }
        guard (0...86_400).contains(maxClockSkew) else { throw ValidationError("--max-clock-skew must be 0 to 86400 seconds") }
        guard (tlsCertificate == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
    }

    private var address: (host: String, port: Int)? {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
              (0...65535).contains(port) else { return nil }
        return (String(listen[..<colon]), port)
    }

    func run() throws {
        ProcessLimits.allowManyOpenFiles()
        log.bootstrap()
        if let tlsCertificate, let tlsKey {
            try OwnFiles.checkRegularFile(tlsCertificate, what: "the TLS certificate")
            try OwnFiles.checkRegularFile(tlsKey, what: "the TLS key")
        }
        let logger = Logger(label: "kvsfs.serve")
        let certificate = tlsCertificate.map { ServerCertificate(certificatePath: $0, keyPath: tlsKey!) }
        let (host, port) = address!
        let place = "\(certificate == nil ? "http" : "https")://\(host):\(port) (TLS \(certificate == nil ? "off" : "on"))"
        let admission = AdmissionPolicy(stamps: StampRule(skew: Int64(maxClockSkew) * 1000))
        let idleTimeout = Duration.milliseconds(max(1, Int64((idleTimeout * 1000).rounded())))
        try waitFor { [database, rateLimit, maxStoresPerAccount, logger] in
            let storage = try await database.open(logger: logger, admission: admission)
            let server = SyncServer(storage: storage, rateLimit: rateLimit, maxStoresPerAccount: maxStoresPerAccount)
            let app: any ApplicationProtocol
            do {
                app = try server.application(host: host, port: port, certificate: certificate, idleTimeout: idleTimeout, logger: logger,
                                             listening: {
                                                 logger.info("serving on \(place); database \(database.shownLocation)")
                                                 Readiness.ready()
                                             })
            } catch {
                await storage.close()
                // The setup fails on the certificate and key (read when TLS is made): said in words.
                throw CommandFailure(certificate == nil ? "cannot serve on \(host):\(port)"
                    : "cannot serve TLS with \(tlsCertificate ?? "") and \(tlsKey ?? ""): they must be a PEM certificate chain and its private key")
            }
            // A graceful shutdown waits for the requests in progress: end the long polls at once.
            let stopping = StopNotice(server: server, logger: logger)
            let shutdown = [SIGTERM, SIGINT].map { signalNumber in
                signal(signalNumber, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
                source.setEventHandler { stopping.tell(signalNumber == SIGTERM ? "SIGTERM" : "SIGINT") }
                source.resume()
                return source
            }
            let follower = Task { await server.followOtherServers() }
            defer { follower.cancel() }
            try await app.runService()
            // The service's own signal handler may have ended it before this one ran.
            stopping.tell("a signal")
            follower.cancel()
            await follower.value
            await storage.close()
            logger.info("stopped")
            withExtendedLifetime(shutdown) {}
        }
    }
}

struct Account: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the sync server's accounts.",
        subcommands: [Create.self, HistoryPolicySetting.self, SchemaSetting.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an account and print its first token (shown once; only its hash is kept).")

        @Argument(help: "Lowercase letters, digits, '_' and '-'.")
        var name: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            print(try database.withAccounts { [name] accounts throws(AccountError) in try await accounts.createAccount(name) })
        }
    }
}

extension Account {
    struct HistoryPolicySetting: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "history",
            abstract: "Print, or set, what the server keeps of a store's past versions.",
            discussion: """
                Prints the store's policy (after setting it, when given an option): how many versions of each key \
                are kept (\(HistoryPolicy.versionRange.lowerBound) to \(HistoryPolicy.versionRange.upperBound), default 16) \
                and for how many days a removed key's history is kept (\(HistoryPolicy.retentionDayRange.lowerBound) to \
                \(HistoryPolicy.retentionDayRange.upperBound), default 30). Fewer versions take effect at once; older \
                versions are dropped at the key's next change.
                """)

        @Argument(help: "ACCOUNT/STORE.")
        var store: String

        @Option(help: "Versions kept of each key.")
        var versions: Int?

        @Option(name: .customLong("retention-days"), help: "Days a removed key's history is kept.")
        var retentionDays: Int?

        @OptionGroup var database: DatabaseOptions

        func validate() throws {
            _ = try Account.addressed(store)
            if let violation = HistoryPolicyChange(versions: versions, retentionDays: retentionDays).violation {
                throw ValidationError(violation)
            }
        }

        func run() throws {
            let (account, stored) = try Account.addressed(store)
            let change = HistoryPolicyChange(versions: versions, retentionDays: retentionDays)
            let policy = try waitFor { [database] in
                var logger = Logger(label: "kvsfs")
                logger.logLevel = .critical
                let storage = try await database.open(logger: logger)
                let result: Result<HistoryPolicy, CloudError>
                do throws(CloudError) {
                    guard try await Account.hasAccount(account, storage) else { throw .refused("there is no account \(account)") }
                    result = .success(change.isEmpty ? try await storage.historyPolicy(of: stored)
                                                     : try await storage.changeHistoryPolicy(change, of: stored))
                } catch {
                    result = .failure(error)
                }
                await storage.close()
                return try result.mapError { CommandFailure($0.description) }.get()
            }
            print("versions \(policy.versions)\nretention-days \(policy.retentionDays)")
        }
    }

    /// The account and the storage's name of a store named ACCOUNT/STORE.
    static func addressed(_ store: String) throws -> (account: String, stored: String) {
        let parts = store.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, let stored = AccountDirectory.storageName(account: parts[0], store: parts[1]) else {
            throw ValidationError("name the store as ACCOUNT/STORE, each by its rule (see kvsfs account create, kvsfs mount --store)")
        }
        return (parts[0], stored)
    }

    static func hasAccount(_ account: String, _ storage: any ServerStorage) async throws(CloudError) -> Bool {
        do {
            return try await storage.accounts.hasAccount(account)
        } catch {
            throw .unavailable(error.description)
        }
    }

    /// Runs `body` on the server's database, opened for it and closed after; a refusal
    /// becomes the command's one-line error. Refused for an account the database does not hold.
    static func withStore<T: Sendable>(_ database: DatabaseOptions, account: String,
                                       _ body: @escaping @Sendable (any ServerStorage) async throws(CloudError) -> T) throws -> T {
        try waitFor {
            var logger = Logger(label: "kvsfs")
            logger.logLevel = .critical
            let storage = try await database.open(logger: logger)
            let result: Result<T, CloudError>
            do throws(CloudError) {
                guard try await hasAccount(account, storage) else { throw .refused("there is no account \(account)") }
                result = .success(try await body(storage))
            } catch {
                result = .failure(error)
            }
            await storage.close()
            return try result.mapError { CommandFailure($0.description) }.get()
        }
    }
}

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the sync server's tokens.",
        subcommands: [Create.self, Revoke.self, List.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a token for an account and print it (shown once).")

        @Argument var account: String

        @Option(help: "Limit the token to this store.")
        var store: String?

        @Flag(name: .customLong("read-only"), help: "The token may read but not write.")
        var readOnly = false

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            print(try database.withAccounts { [account, store, readOnly] accounts throws(AccountError) in
                try await accounts.createToken(account: account, store: store, readOnly: readOnly)
            })
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token, by its id or the token itself; it stops working at once.")

        @Argument var token: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            try database.withAccounts { [token] accounts throws(AccountError) in try await accounts.revokeToken(token) }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List an account's tokens: id, scope, state.")

        @Argument var account: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            for token in try database.withAccounts({ [account] accounts throws(AccountError) in try await accounts.tokens(of: account) }) {
                let scope = (token.scope.store ?? "*") + (token.scope.readOnly ? " read-only" : " read-write")
                print("\(token.id)\t\(scope)\t\(token.revoked ? "revoked" : "active")")
            }
        }
    }
}

/// What serve does once when told to stop, whichever of its handlers hears the signal first:
/// systemd hears STOPPING=1, the long polls end, and the log says so.
private final class StopNotice: Sendable {
    private let told = Mutex(false)
    private let server: SyncServer
    private let logger: Logger

    init(server: SyncServer, logger: Logger) {
        self.server = server
        self.logger = logger
    }

    func tell(_ cause: String) {
        guard told.withLock({ told in
            defer { told = true }
            return !told
        }) else { return }
        Readiness.stopping()
        server.notifier.close()
        logger.notice("\(cause): finishing the requests in progress, then stopping")
    }
}
