import Foundation
import NIOSSL
import PostgresNIO

/// A PostgreSQL database named by a `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=MODE]`
/// URL, read the way libpq reads one: the password may instead come from `PGPASSWORD` (so that
/// it need not appear on a command line), the port defaults to 5432, the database to the
/// user's name, and `sslmode` is `disable`, `prefer` (the default: encrypt when the server
/// offers it, without checking its certificate), `require` (the same, but refuse a server
/// without TLS) or `verify-full` (require TLS and a certificate the system trusts for HOST).
public struct PostgresLocation: Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var sslMode: String

    public static func isPostgresURL(_ url: String) -> Bool {
        url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
    }

    public init(url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(PostgresLocationError) {
        guard Self.isPostgresURL(url), let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            throw PostgresLocationError("expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        self.host = host
        port = components.port ?? 5432
        username = components.user.flatMap { $0.removingPercentEncoding } ?? environment["PGUSER"] ?? "postgres"
        password = components.password.flatMap { $0.removingPercentEncoding } ?? environment["PGPASSWORD"]
        let path = String(components.path.drop { $0 == "/" })
        database = path.isEmpty ? username : (path.removingPercentEncoding ?? path)
        sslMode = components.queryItems?.first { $0.name == "sslmode" }?.value ?? "prefer"
        guard ["disable", "prefer", "require", "verify-full"].contains(sslMode) else {
            throw PostgresLocationError("sslmode must be disable, prefer, require or verify-full, not \(sslMode)")
        }
    }

    /// The URL without its password, for messages.
    public var description: String { "postgres://\(username)@\(host):\(port)/\(database)" }

    private var tlsConfiguration: TLSConfiguration? {
        guard sslMode != "disable" else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if sslMode != "verify-full" { configuration.certificateVerification = .none }
        return configuration
    }

    /// For a pool of a server's: `kept` connections opened at start and kept open, and up to
    /// `most` when queries wait for one.
    ///
    /// The pool schedules a timer each time a connection goes back to it: a keep-alive, and an
    /// idle timeout for a connection beyond those kept. Each timer is a sleeping task that the
    /// next lease cancels, but a cancelled sleep keeps its task and its dispatch timer until its
    /// deadline: with the defaults (30 and 60 s), at thousands of queries a second, that was a
    /// hundred megabytes after a minute. So there is no keep-alive (the listening connection
    /// has its probe, `followChanges`, and a connection that closes is made again by the pool),
    /// and an extra connection is closed after `idleTimeout` unused, which bounds what its
    /// cancelled timers hold to that many seconds of queries.
    func clientConfiguration(kept: Int, most: Int) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS = switch (tlsConfiguration, sslMode) {
        case (nil, _): .disable
        case (let tls?, "prefer"): .prefer(tls)
        case (let tls?, _): .require(tls)
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.minimumConnections = kept
        configuration.options.maximumConnections = most
        configuration.options.connectionIdleTimeout = Self.idleTimeout
        configuration.options.keepAliveBehavior = nil
        return configuration
    }

    static let idleTimeout = Duration.seconds(1)

    /// For one connection (setting up the tables), whose failure tells why.
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS = switch (try tlsConfiguration.map(NIOSSLContext.init), sslMode) {
        case (nil, _): .disable
        case (let context?, "prefer"): .prefer(context)
        case (let context?, _): .require(context)
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }
}

public struct PostgresLocationError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
