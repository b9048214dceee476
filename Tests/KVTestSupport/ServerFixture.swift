import Foundation

/// A `kvsfs serve` on a fresh test database with account alice, whose token is in `tokenFile`.
public struct ServerFixture: Sendable {
    public let server: ServerProcess
    public let database: TestDatabase
    /// alice's token.
    public let token: String
    /// Where the fixture keeps its files (the SQLite database among them); removed afterwards.
    public let directory: TemporaryDirectory
    public var tokenFile: String { directory.path + "/token" }

    /// Mounts alice's store `default` as `directory/NAME` (data in `directory/data-NAME`),
    /// through `remote` (a proxy in front of the server, say) or the server itself.
    public func mount(_ name: String, remote: String? = nil, extraArguments: [String] = []) throws -> DaemonMount {
        try DaemonMount(name, in: directory, remote: remote ?? server.url, tokenFile: tokenFile, extraArguments: extraArguments)
    }
}

/// Starts a server on a fresh `backend` database in a temporary directory labelled `label`,
/// creates account alice, runs `body`, and always stops the server and removes the database
/// and the directory.
public func withTestServer<T>(_ backend: ServerBackend = .sqlite, label: String = "kvsfs-server", extraArguments: [String] = [],
                              _ body: (ServerFixture) throws -> T) throws -> T {
    let directory = TemporaryDirectory(label)
    defer { directory.remove() }
    let database = try TestDatabase(backend, in: directory)
    defer { database.remove() }
    let server = try ServerProcess(database: database.url, extraArguments: extraArguments)
    defer { server.stop() }
    let token = try server.admin(["account", "create", "alice"])
    try writeTokenFile(token, to: directory.path + "/token")
    return try body(ServerFixture(server: server, database: database, token: token, directory: directory))
}

extension DaemonMount {
    /// Mounts the store `default` as `directory/NAME` (data in `directory/data-NAME`), syncing
    /// with the server at `remote` with the token in `tokenFile`.
    public convenience init(_ name: String, in directory: TemporaryDirectory, remote: String, tokenFile: String,
                            extraArguments: [String] = []) throws {
        try self.init(mountpoint: directory.subdirectory(name), dataDirectory: directory.subdirectory("data-" + name),
                      extraArguments: ["--remote", remote, "--token-file", tokenFile] + extraArguments)
    }
}
