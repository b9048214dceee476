import KVCloud
import KVStore

/// A change log around a real one, `base`, to which it passes every call it does not script
/// itself: a fake overrides only the calls it changes (a lost answer, a page, a made-up
/// refusal), and the rest stays the real log's behaviour.
public protocol ChangeLogWrapper: ChangeLog {
    var base: any ChangeLog { get }
}

extension ChangeLogWrapper {
    public var description: String { base.description }

    public func identity() async throws(CloudError) -> String {
        try await base.identity()
    }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try await base.renewIdentity(replacing: seen)
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try await base.push(changes, to: store, mark: mark)
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try await base.changes(in: store, after: cursor, mark: mark, limit: limit)
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try await base.cursor(of: store)
    }

    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        try await base.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
    }

    public func readOnlyReason(of store: String) async throws(CloudError) -> String? {
        try await base.readOnlyReason(of: store)
    }

    public func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion] {
        try await base.history(of: key, in: store)
    }

    public func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion? {
        try await base.version(version, of: key, in: store)
    }

    public func discardPrefetched() {
        base.discardPrefetched()
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try await base.schema(of: store)
    }

    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try await base.setSchema(text, of: store, ifVersion: ifVersion)
    }
}
