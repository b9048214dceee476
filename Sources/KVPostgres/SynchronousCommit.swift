import Logging
import PostgresNIO

/// What a commit waits for before kvsfs answers (PostgreSQL's `synchronous_commit`): a push,
/// or any other write, is acknowledged only once PostgreSQL has flushed it to its disk, and
/// once every synchronous standby has it when the cluster has some.
///
/// `off` answers before the flush (a crash of the database's machine loses acknowledged
/// pushes) and `local` before any synchronous standby has it (a failover to one loses them):
/// with either, the server logs a warning once. Every session of kvsfs's asks, as it
/// connects, for the setting found at start when that is `on`, `remote_write` or
/// `remote_apply` (each flushes locally before answering), else for `on`: a later
/// `ALTER DATABASE` or `ALTER ROLE` that turns it off does not reach kvsfs's sessions.
enum SynchronousCommit {
    static let parameter = "synchronous_commit"

    /// The setting kvsfs's sessions ask for when the database gives them `current`.
    static func asked(given current: String) -> String {
        let setting = current.lowercased()
        return ["on", "remote_write", "remote_apply"].contains(setting) ? setting : "on"
    }

    /// Whether `current` answers a commit before it is flushed where it must be.
    static func isWeak(_ current: String) -> Bool {
        asked(given: current) != current.lowercased()
    }

    /// The setting the session of `db` runs with.
    static func current(_ db: PostgresConnection, _ logger: Logger) async throws -> String {
        let rows = try await db.query("SHOW synchronous_commit", logger: logger)
        for try await setting in rows.decode(String.self) { return setting }
        return ""
    }
}
