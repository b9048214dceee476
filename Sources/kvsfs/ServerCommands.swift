import ArgumentParser
import Foundation
import Hummingbird
import KVCloud
import KVServer
import Logging
import Synchronization

/// Options naming the server's database.
struct DatabaseOptions: ParsableArguments {
    @Option(help: "Where the server keeps its data: sqlite:///path/db.sqlite.")
    var database: String

    func validate() throws {
        if database.hasPrefix("postgres://") || database.hasPrefix("postgresql://") {
            throw ValidationError("PostgreSQL is not supported by this version: use sqlite:///path/db.sqlite")
        }
        guard ServerDatabase.sqlitePath(database) != nil else {
            throw ValidationError("--database must be sqlite:///absolute/path")
        }
    }

    var path: String { ServerDatabase.sqlitePath(database)! }

    func accounts() throws -> AccountDirectory {
        do {
            return try AccountDirectory(path: path)
        } catch {
            throw CommandFailure("cannot open \(database): \(error)")
        }
    }

    /// Runs `body` on the accounts; its refusal becomes the command's one-line error.
    func withAccounts<T>(_ body: (AccountDirectory) throws(AccountError) -> T) throws -> T {
        let directory = try accounts()
        do {
            return try body(directory)
        } catch {
            throw CommandFailure(error.description)
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

    func validate() throws {
        guard address != nil else { throw ValidationError("--listen must be HOST:PORT") }
        guard rateLimit >= 0 else { throw ValidationError("--rate-limit must be 0 or more") }
    }

    private var address: (host: String, port: Int)? {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
              (0...65535).contains(port) else { return nil }
        return (String(listen[..<colon]), port)
    }

    func run() throws {
        let storage: SQLiteCloudStorage
        do {
            storage = try SQLiteCloudStorage(path: database.path)
        } catch {
            throw CommandFailure("cannot open \(database.database): \(error)")
        }
        let server = SyncServer(storage: storage, accounts: try database.accounts(), rateLimit: rateLimit)
        var logger = Logger(label: "kvsfs.serve")
        logger.logLevel = .info
        let (host, port) = address!
        let app = Application(
            router: server.makeRouter(),
            configuration: .init(address: .hostname(host, port: port), serverName: "kvsfs"),
            logger: logger)
        // A graceful shutdown waits for the requests in progress: end the long polls at once.
        let shutdown = [SIGTERM, SIGINT].map { signalNumber in
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { server.notifier.close() }
            source.resume()
            return source
        }
        try waitFor { try await app.runService() }
        withExtendedLifetime(shutdown) {}
    }
}

struct Account: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage the sync server's accounts.",
        subcommands: [Create.self])

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an account and print its first token (shown once; only its hash is kept).")

        @Argument(help: "Lowercase letters, digits, '_' and '-'.")
        var name: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            print(try database.withAccounts { accounts throws(AccountError) in try accounts.createAccount(name) })
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
            print(try database.withAccounts { accounts throws(AccountError) in
                try accounts.createToken(account: account, store: store, readOnly: readOnly)
            })
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token, by its id or the token itself; it stops working at once.")

        @Argument var token: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            try database.withAccounts { accounts throws(AccountError) in try accounts.revokeToken(token) }
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List an account's tokens: id, scope, state.")

        @Argument var account: String

        @OptionGroup var database: DatabaseOptions

        func run() throws {
            for token in try database.withAccounts({ accounts throws(AccountError) in try accounts.tokens(of: account) }) {
                let scope = (token.scope.store ?? "*") + (token.scope.readOnly ? " read-only" : " read-write")
                print("\(token.id)\t\(scope)\t\(token.revoked ? "revoked" : "active")")
            }
        }
    }
}
