import Logging
import PostgresNIO

/// What a commit waits for before kvsfs answers (PostgreSQL's `synchronous_commit`): a push,
/// or any other write, is acknowledged only once PostgreSQL has flushed it to its disk, and
/// once every synchronous standby has it when the cluster has some.
///
/// `off` answers before the flush (a crash of the database's machine loses acknowledged
/// pushes) and `local` before any synchronous standby has it (a failover to one loses them):
/// with either, kvsfs's own sessions ask for `on` as they connect, overriding the server's,
/// the database's or the role's setting for them only, and the server logs a warning once.
/// `on`, `remote_write` and `remote_apply` are kept: each flushes locally before answering.
enum SynchronousCommit {
    static let parameter = "synchronous_commit"

    /// The setting kvsfs's sessions ask for when the database gives them `current`; nil when
    /// `current` is kept.
    static func raised(from current: String) -> String? {
        ["off", "local"].contains(current.lowercased()) ? "on" : nil
    }

    /// The setting the session of `db` runs with.
    static func current(_ db: PostgresConnection, _ logger: Logger) async throws -> String {
        let rows = try await db.query("SHOW synchronous_commit", logger: logger)
        for try await setting in rows.decode(String.self) { return setting }
        return ""
    }
}
