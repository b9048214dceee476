import Foundation
import KVStore

/// A remote's change log, as every side of sync sees it: per store, each key's latest accepted
/// change and the order changes were accepted in (the cursor), behind one merge rule and the
/// store's quotas. A mount's sync engine syncs one store of it; a server keeps its stores in
/// one. Four implementations pass one conformance suite: in memory and in a SQLite file
/// (`EmbeddedChangeLog`), in PostgreSQL, and over HTTP (`HTTPChangeLog`, a `kvsfs serve`).
///
/// A `HistoryMark` given with a request is checked by the log itself, against its own rows:
/// a request from a reader that saw another history fails with a history mismatch
/// (`CloudError.isHistoryMismatch`) and changes nothing.
public protocol ChangeLog: Sendable {
    /// Names the log in messages (a path or a URL).
    var description: String { get }

    /// A stable id of this log (its account): a mount that finds another id than the one it
    /// last synced with has changed account, or the log was restored and renewed its id.
    func identity() async throws(CloudError) -> String

    /// Gives the log a new id once it was found to hold another history than a reader saw
    /// (restored from a backup), so that every mount resynchronises at its next look at the
    /// id, not only the one whose mark found it out. Only while the id is still `seen`: one
    /// restore needs one renewal. Returns whether this call renewed it. (A server renews by
    /// itself when a writer's request finds another history: over HTTP this changes nothing.)
    func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool

    /// Offers changes to `store`. Each is accepted (recorded, or already superseded by a newer
    /// change: pushing twice is harmless) or refused because it would break a quota. With the
    /// pusher's `mark`, a log whose history is not the pusher's stores nothing and throws a
    /// history mismatch: changes pushed into another history would hide that it lost some.
    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome

    /// The changes accepted after `cursor`, oldest first, at most `limit` of them. A history
    /// mismatch when the store has not reached `cursor`, or when its row for the mark's key
    /// does not fit `mark`.
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch

    /// The cursor of the store's newest accepted change (0 when it has none).
    func cursor(of store: String) async throws(CloudError) -> Int64

    /// True as soon as the store has changes after `cursor`; false once `timeout` passed with
    /// none, once the waiting task is cancelled, or when a server's keep-alive came first.
    /// `mark` as for `changes`: a log may check it here, or in the fetch that follows.
    func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                        timeout: Duration) async throws(CloudError) -> Bool

    /// Why this device may only read `store` (a server's read-only token), or nil when it may
    /// write.
    func readOnlyReason(of store: String) async throws(CloudError) -> String?

    /// The versions of `key` the store keeps (`HistoryPolicy`), newest first, without their
    /// values; none for a key it never held, or whose removal is past the retention time.
    func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion]

    /// One version of `key` with its value; nil when the store keeps no such version of it.
    func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion?

    /// Forgets any batch a wait fetched ahead, so that the next `changes` asks the storage
    /// itself.
    func discardPrefetched()

    /// The store's schema (version 0 and no text when it never had one).
    func schema(of store: String) async throws(CloudError) -> RemoteSchema

    /// Sets the store's schema to `text`, or removes it (nil), and returns the new version. With
    /// `ifVersion`, only while the store's schema is still at that version (else throws
    /// `CloudError.schemaMoved(current:)`). A text `KeySchema(decoding:)` refuses is refused
    /// with `CloudError.refused` and its words, and changes nothing. Every push after it is
    /// judged against it (`CloudLedger`); values already stored that break it stay. A store
    /// that does not exist yet is made, as by a first push.
    func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema
}

extension ChangeLog {
    public func readOnlyReason(of store: String) async throws(CloudError) -> String? { nil }
    public func discardPrefetched() {}

    /// A push with no history mark to check.
    public func push(_ changes: [StampedChange], to store: String) async throws(CloudError) -> PushOutcome {
        try await push(changes, to: store, mark: nil)
    }

    /// The changes after `cursor`, with no history mark to check.
    public func changes(in store: String, after cursor: Int64, limit: Int) async throws(CloudError) -> ChangeBatch {
        try await changes(in: store, after: cursor, mark: nil, limit: limit)
    }
}
