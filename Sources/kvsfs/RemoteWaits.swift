import Dispatch
import KVSFS
import Synchronization

/// The FUSE request threads waiting on the remote (`kvsfs sync`, fsync of the mount's root),
/// bounded in number and in time.
///
/// Invariant: at most `limit` request threads wait here at once, each at most `timeout`. A
/// round of sync applies remote changes through the mount, which takes request threads of its
/// own: were every thread libfuse has (10) waiting on that round, it could never finish. A
/// caller over the limit is told to retry at once (EAGAIN), and a wait past the timeout ends
/// with EAGAIN too; the round itself goes on in the background either way.
final class RemoteWaits: Sendable {
    static let limit = 2
    static let timeout: Duration = .seconds(30)

    private let waiting = Atomic<Int>(0)

    /// Runs `work` and waits for it, or refuses at once when `limit` threads already wait.
    func run(_ work: @escaping @Sendable () async throws -> Void) throws {
        guard waiting.add(1, ordering: .acquiringAndReleasing).newValue <= Self.limit else {
            waiting.subtract(1, ordering: .acquiringAndReleasing)
            throw SyncFailure.busy("\(Self.limit) requests already wait on the remote: retry")
        }
        defer { waiting.subtract(1, ordering: .acquiringAndReleasing) }
        guard let result = waitFor(work, timeout: Self.timeout) else {
            throw SyncFailure.busy("the remote did not answer within \(Self.timeout)")
        }
        try result.get()
    }
}
