import FoundationEssentials
import FuseKit
import KVStore

/// The one door between a mount and whatever keeps its store in sync with a remote: the
/// mount knows nothing else of sync. Wired by whoever runs both.
///
/// Remote changes reach the mount through its applier (`MountApplier`), not through this door;
/// acts on the whole store (`kvsfs sync`) come through the mount's control socket, which
/// holds the synchronizer itself.
public protocol MountSynchronizer: Sendable {
    /// Pushes what is pending and starts a round that fetches and applies, not waited for.
    /// Returns at once; `answer` is called once, when the remote has what was pending or with
    /// the `SyncFailure` the push failed with, from whatever thread ends the wait (the
    /// caller's own when it is refused at once). It answers a request (fsync of the root):
    /// whatever waits on the remote, no FUSE request thread does.
    func pushNow(then answer: @escaping @Sendable (Result<Void, SyncFailure>) -> Void)

    /// Extended attributes of the mount's root (`user.kvsfs.sync`, `user.kvsfs.events`, ...):
    /// facts only; reading one changes nothing.
    func rootAttributes() -> [String: String]

    /// Where sync stands now, for the mount's status (`MountStatus`).
    func standing() -> SyncStanding

    /// Records in the mount's event log that a local write to `key` was refused, and why
    /// (`refused-local-write`): the mount told the writer only an errno.
    func record(refusedWriteOf key: String, reason: String)
}

/// Where sync stands, in the terms the mount's status shows.
public struct SyncStanding: Sendable, Equatable {
    /// The outcome of the last round with the remote.
    public enum Reachability: Sendable, Equatable {
        /// No round has ended yet.
        case connecting
        /// The last round succeeded.
        case reachable
        /// The last round failed, for this reason.
        case offline(String)
    }

    /// The remote as the mount names it (`user.kvsfs.remote`).
    public var remote: String
    public var reachability: Reachability
    /// When a round last succeeded (wall-clock time); nil if none has.
    public var lastSync: Date?
    /// The event log's path and the cursor of its last event (0 before the first).
    public var eventLog: String
    public var eventCursor: Int64
    /// The cursor of the remote's history up to which the mount has taken in every change;
    /// nil before it knows (`kvsfs import --if-unchanged-since`).
    public var remoteCursor: Int64?

    public init(remote: String, reachability: Reachability, lastSync: Date?, eventLog: String, eventCursor: Int64,
                remoteCursor: Int64? = nil) {
        self.remote = remote
        self.remoteCursor = remoteCursor
        self.reachability = reachability
        self.lastSync = lastSync
        self.eventLog = eventLog
        self.eventCursor = eventCursor
    }
}

/// Why a request that waits on the remote (`kvsfs sync`, fsync of the root) failed.
public enum SyncFailure: Error, Equatable, Sendable {
    /// Nothing listens at the remote's address.
    case connectionRefused(String)
    /// The remote did not answer in time.
    case timedOut(String)
    /// The remote's name does not resolve, or no route leads to it.
    case unreachable(String)
    /// The remote's TLS certificate is not trusted.
    case notTrusted(String)
    /// The connection was closed or reset before the answer was whole.
    case connectionLost(String)
    /// The remote answered, or was opened, but could not serve (a database it cannot read,
    /// an answer that is not the protocol's, a refusal).
    case unavailable(String)
    /// The remote is busy or rate-limited, or too many requests wait on it: try again later.
    case busy(String)
    /// The sync server refused the mount's token (unknown, revoked, or not for this store).
    case authorizationRefused(String)
    /// The sync server holds as many stores for the account as it keeps, and this store is
    /// not one of them.
    case storeLimit(String)
}

extension SyncFailure: CustomStringConvertible {
    public var description: String {
        switch self {
        case .connectionRefused(let reason), .timedOut(let reason), .unreachable(let reason), .notTrusted(let reason),
             .connectionLost(let reason):
            "the remote cannot be reached: \(reason)"
        case .unavailable(let reason): "the remote could not serve: \(reason)"
        case .busy(let reason): "the remote is busy: \(reason)"
        case .authorizationRefused(let reason): "the server refused this token: \(reason)"
        case .storeLimit(let reason): reason
        }
    }
}
