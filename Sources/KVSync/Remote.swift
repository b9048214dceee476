import Foundation
import KVCloud
import KVStore
import Synchronization

/// Where a mount's changes go and come from: one store on a remote.
public protocol Remote: Sendable {
    /// Names the remote in messages (a URL).
    var description: String { get }
    /// The remote's account id (see `CloudStorage.identity()`).
    func identity() async throws -> String
    /// Offers changes to the remote. With the pusher's `mark`, throws `historyMismatch`
    /// instead, pushing nothing, when the remote's history is not the one the pusher saw (as
    /// `fetch` checks it): changes pushed into another history would hide that it lost some.
    func push(_ changes: [StampedChange], mark: HistoryMark?) async throws -> PushOutcome
    /// The changes after `cursor`. With the caller's `mark` (the latest change it knows the
    /// remote accepted), throws `historyMismatch` when the remote's row for the mark's key does
    /// not fit it, as when it has not reached `cursor`.
    func fetch(after cursor: Int64, mark: HistoryMark?) async throws -> ChangeBatch
    /// Returns true as soon as the remote has changes after `cursor`, false after `timeout`;
    /// `mark` as for `fetch`.
    func waitForChanges(after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws -> Bool
    /// Why this device may only read the store (a read-only token), or nil when it may write.
    func readOnlyReason() async throws -> String?
    /// Forgets any batch a wait fetched ahead, so that the next fetch asks the remote itself:
    /// what `synchronize()` returns after must include everything the remote had when called.
    func discardPrefetched()
    /// After this mount found the remote's history is not the one it saw: gives the remote a
    /// new identity if it still has `seen` (see `CloudStorage.renewIdentity(replacing:)`), so
    /// that its other mounts resynchronise too. A server does this itself.
    func renewIdentity(replacing seen: String) async throws
}

extension Remote {
    public func readOnlyReason() async throws -> String? { nil }
    public func discardPrefetched() {}
    public func renewIdentity(replacing seen: String) async throws {}

    /// A push with no history mark to check.
    public func push(_ changes: [StampedChange]) async throws -> PushOutcome {
        try await push(changes, mark: nil)
    }

    /// Every change after `cursor`, with no history mark to check.
    public func fetch(after cursor: Int64) async throws -> ChangeBatch {
        try await fetch(after: cursor, mark: nil)
    }

    public func waitForChanges(after cursor: Int64, timeout: Duration) async throws -> Bool {
        try await waitForChanges(after: cursor, mark: nil, timeout: timeout)
    }
}

/// Why a remote could not serve a request.
public enum RemoteError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Not reachable now: retry with backoff.
    case unreachable(String)
    /// Busy or rate-limited: retry after the time given, if any.
    case retryLater(after: Duration?, String)
    /// The server refused the token (401: unknown or revoked; 403: it does not reach the
    /// store, or may only read it), with its reason: retrying does not help until the token
    /// changes, so retries back off.
    case authorizationRefused(String)
    /// The remote refused the request itself (an unknown store, a malformed request):
    /// retrying does not help until something changes, so retries back off.
    case refused(String)
    /// The remote's history is not the one this mount saw: it has not reached the mount's
    /// cursor, or holds another change than the mount's mark (emptied, replaced, restored
    /// from a backup). The mount resynchronises.
    case historyMismatch(String)

    public var retryAfter: Duration? {
        if case .retryLater(let after, _) = self { return after }
        return nil
    }

    public var description: String {
        switch self {
        case .unreachable(let reason): "the remote cannot be reached: \(reason)"
        case .retryLater(let after, let reason):
            "the remote asked to retry later\(after.map { " (in \($0))" } ?? ""): \(reason)"
        case .authorizationRefused(let reason): "the server refused this token: \(reason)"
        case .refused(let reason): "the remote refused: \(reason)"
        case .historyMismatch(let reason): "the remote's history is not the one this mount saw: \(reason)"
        }
    }
}

/// A remote whose data lives in a `CloudStorage` this process opens itself: the embedded
/// file remote (`SQLiteCloudStorage`, shared by every process that opens the same file) or
/// the in-memory one for tests. The storage is opened on first use and again after a failure,
/// so a remote that cannot be opened now is retried rather than fatal.
public final class CloudRemote<C: Clock>: Remote where C.Duration == Duration {
    public let description: String
    private let store: String
    private let open: @Sendable () throws(CloudError) -> any CloudStorage
    private let storage = Mutex<(any CloudStorage)?>(nil)
    private let clock: C
    private let pollInterval: Duration
    private let watchedFiles: [String]
    private let watchedFallback: Duration

    /// `pollInterval` is how often `waitForChanges` looks at the storage's cursor. With
    /// `watchedFiles` (the files every commit to the storage writes), it looks when one of them
    /// is written instead, and every `watchedFallback` in case a write went unseen.
    public init(description: String, store: String, clock: C, pollInterval: Duration = .milliseconds(5),
                watchedFiles: [String] = [], watchedFallback: Duration = .seconds(1),
                open: @escaping @Sendable () throws(CloudError) -> any CloudStorage) {
        self.description = description
        self.store = store
        self.open = open
        self.clock = clock
        self.pollInterval = pollInterval
        self.watchedFiles = watchedFiles
        self.watchedFallback = watchedFallback
    }

    public func identity() async throws -> String {
        try withStorage { storage throws(CloudError) in try storage.identity() }
    }

    public func renewIdentity(replacing seen: String) async throws {
        _ = try withStorage { storage throws(CloudError) in try storage.renewIdentity(replacing: seen) }
    }

    public func push(_ changes: [StampedChange], mark: HistoryMark?) async throws -> PushOutcome {
        try withStorage { storage throws(CloudError) in
            try check(mark, in: storage)
            return try storage.push(changes, to: store)
        }
    }

    public func fetch(after cursor: Int64, mark: HistoryMark?) async throws -> ChangeBatch {
        try withStorage { storage throws(CloudError) in
            try check(mark, in: storage)
            return try storage.changes(in: store, after: cursor, limit: 4096)
        }
    }

    private func check(_ mark: HistoryMark?, in storage: any CloudStorage) throws(CloudError) {
        guard let mark else { return }
        try mark.check(newest: try storage.cursor(of: store), held: try storage.mark(in: store, key: mark.key))
    }

    /// The mark is checked by the fetch that follows a wake-up.
    public func waitForChanges(after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws -> Bool {
        let deadline = clock.now.advanced(by: timeout)
        func changed() throws -> Bool {
            try withStorage({ storage throws(CloudError) in try storage.cursor(of: store) }) > cursor
        }
        if try changed() { return true }
        // Made once the storage is open (its files exist) and before the next look: a commit
        // after that look rings it. One per call, so that callers never share a waiter.
        var bell = makeBell()
        var settling: [Duration] = []
        while true {
            try Task.checkCancellation()
            if try changed() { return true }
            let now = clock.now
            if now >= deadline { return false }
            if !settling.isEmpty {
                try await clock.sleep(for: settling.removeFirst())
            } else if let listening = bell, !listening.isBroken {
                // A commit writes the log first and shows in SQLite's shared-memory index just
                // after, which raises no event: when a ring comes before the commit shows (or
                // the committing process is descheduled in between), look again a few times.
                if await listening.wait(upTo: min(watchedFallback, now.duration(to: deadline)), on: clock) {
                    settling = [.milliseconds(1), .milliseconds(4), .milliseconds(16), .milliseconds(64), .milliseconds(250)]
                }
            } else {
                if bell != nil { bell = makeBell() }  // its file went away: watch what is there now
                try await clock.sleep(for: pollInterval)
            }
        }
    }

    private func makeBell() -> FileChangeBell? {
        watchedFiles.isEmpty ? nil : FileChangeBell(paths: watchedFiles)
    }

    private func withStorage<T>(_ body: (any CloudStorage) throws(CloudError) -> T) throws(RemoteError) -> T {
        do {
            let opened = try storage.withLock { (current: inout (any CloudStorage)?) throws(CloudError) -> any CloudStorage in
                if let current { return current }
                let made = try open()
                current = made
                return made
            }
            return try body(opened)
        } catch {
            if error.isHistoryMismatch { throw .historyMismatch(error.description) }
            storage.withLock { $0 = nil }
            throw .unreachable(error.description)
        }
    }
}

extension CloudRemote where C == ContinuousClock {
    /// The embedded remote: a shared SQLite database at `path`. `limits`, when given, become
    /// the store's limits on the remote each time it is opened.
    public static func file(path: String, store: String, limits: QuotaLimits? = nil) -> CloudRemote<ContinuousClock> {
        // Every commit writes the write-ahead log (and a checkpoint, the database).
        CloudRemote(description: "file://\(path)", store: store, clock: ContinuousClock(),
                    watchedFiles: [path + "-wal", path]) { () throws(CloudError) in
            guard FileManager.default.fileExists(atPath: (path as NSString).deletingLastPathComponent) else {
                throw .unavailable("the directory of \(path) does not exist")
            }
            let storage = try SQLiteCloudStorage(path: path)
            if let limits { try storage.setLimits(limits, of: store) }
            return storage
        }
    }
}
