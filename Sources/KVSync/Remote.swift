import Foundation
import KVCloud
import KVStore
import Synchronization

/// Where a mount's changes go and come from: one store on a remote. Its errors are the
/// change log's (`CloudError`), which say what the engine does next: retry after a backoff
/// or the remote's Retry-After, or resynchronise on a history mismatch.
public protocol Remote: Sendable {
    /// Names the remote in messages (a URL).
    var description: String { get }
    /// The remote's account id (see `ChangeLog.identity()`).
    func identity() async throws -> String
    /// Offers changes to the remote. With the pusher's `mark`, throws a history mismatch
    /// instead, pushing nothing, when the remote's history is not the one the pusher saw (as
    /// `fetch` checks it): changes pushed into another history would hide that it lost some.
    func push(_ changes: [StampedChange], mark: HistoryMark?) async throws -> PushOutcome
    /// The changes after `cursor`. With the caller's `mark` (the latest change it knows the
    /// remote accepted), throws a history mismatch when the remote's row for the mark's key does
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
    /// new identity if it still has `seen` (see `ChangeLog.renewIdentity(replacing:)`), so
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

/// A mount's remote: one store of a change log (the file remote's `EmbeddedChangeLog`, or a
/// server's `HTTPChangeLog`).
public final class ChangeLogRemote: Remote {
    private let log: any ChangeLog
    private let store: String

    public init(_ log: any ChangeLog, store: String) {
        self.log = log
        self.store = store
    }

    public var description: String { log.description }

    public func identity() async throws -> String {
        try await log.identity()
    }

    public func renewIdentity(replacing seen: String) async throws {
        _ = try await log.renewIdentity(replacing: seen)
    }

    public func push(_ changes: [StampedChange], mark: HistoryMark?) async throws -> PushOutcome {
        try await log.push(changes, to: store, mark: mark)
    }

    public func fetch(after cursor: Int64, mark: HistoryMark?) async throws -> ChangeBatch {
        try await log.changes(in: store, after: cursor, mark: mark, limit: Self.batchLimit)
    }

    /// Throws `CancellationError` when the waiting task is cancelled.
    public func waitForChanges(after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws -> Bool {
        let changed = try await log.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
        try Task.checkCancellation()
        return changed
    }

    public func readOnlyReason() async throws -> String? {
        try await log.readOnlyReason(of: store)
    }

    public func discardPrefetched() {
        log.discardPrefetched()
    }

    /// The most changes one fetch asks for.
    static let batchLimit = 4096
}

/// A remote's record of one store's keys: the versions it keeps of each (`HistoryPolicy`).
/// Read on request (`kvsfs history`), never on the sync path.
public protocol RemoteHistory: Sendable {
    /// The versions kept of `key`, newest first, without their values.
    func history(of key: String) async throws -> [KeyVersion]
    /// One version of `key` with its value; nil when the remote keeps no such version.
    func version(_ version: Int64, of key: String) async throws -> KeyVersion?
}

extension ChangeLogRemote: RemoteHistory {
    public func history(of key: String) async throws -> [KeyVersion] {
        try await log.history(of: key, in: store)
    }

    public func version(_ version: Int64, of key: String) async throws -> KeyVersion? {
        try await log.version(version, of: key, in: store)
    }
}
