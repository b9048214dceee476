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

    /// For the pool of connections a server uses.
    var clientConfiguration: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS = switch (tlsConfiguration, sslMode) {
        case (nil, _): .disable
        case (let tls?, "prefer"): .prefer(tls)
        case (let tls?, _): .require(tls)
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        configuration.options.maximumConnections = 16
        return configuration
    }

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
