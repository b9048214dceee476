import Foundation
import KVStore

/// A change log in storage this process opens itself and calls without waiting for anyone
/// but the disk: in memory (`MemoryCloudStorage`, for tests) or in a SQLite file
/// (`SQLiteCloudStorage`, the file remote, shared by every process that opens it, and the
/// single-machine server's stores). `EmbeddedChangeLog` makes one a `ChangeLog`; each call
/// means what `ChangeLog`'s of the same name does. The mark, when given, is checked in the
/// same transaction as the read or the push.
public protocol CloudStorage: Sendable {
    func identity() throws(CloudError) -> String
    func renewIdentity(replacing seen: String) throws(CloudError) -> Bool
    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) throws(CloudError) -> PushOutcome
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) throws(CloudError) -> ChangeBatch
    func cursor(of store: String) throws(CloudError) -> Int64
    func limits(of store: String) throws(CloudError) -> QuotaLimits
    func setLimits(_ limits: QuotaLimits, of store: String) throws(CloudError)
    func history(of key: String, in store: String) throws(CloudError) -> [KeyVersion]
    func version(_ version: Int64, of key: String, in store: String) throws(CloudError) -> KeyVersion?
    func historyPolicy(of store: String) throws(CloudError) -> HistoryPolicy
    /// Sets the parts of `store`'s policy that `change` names, in one transaction; returns the
    /// policy then held.
    func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) throws(CloudError) -> HistoryPolicy
    func schema(of store: String) throws(CloudError) -> RemoteSchema
    /// Sets or removes the store's schema in one transaction with the check of `ifVersion`.
    func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) throws(CloudError) -> RemoteSchema
    /// Whether what the storage opened is no longer where it was opened from.
    var replaced: Bool { get }
}

extension CloudStorage {
    /// Whether what this storage opened is no longer where it was opened from (a file moved
    /// away, or another put in its place): its opener opens it again. Never, unless a storage
    /// says otherwise.
    public var replaced: Bool { false }

    /// A push with no history mark to check.
    public func push(_ changes: [StampedChange], to store: String) throws(CloudError) -> PushOutcome {
        try push(changes, to: store, mark: nil)
    }

    /// The changes after `cursor`, with no history mark to check.
    public func changes(in store: String, after cursor: Int64, limit: Int) throws(CloudError) -> ChangeBatch {
        try changes(in: store, after: cursor, mark: nil, limit: limit)
    }
}
