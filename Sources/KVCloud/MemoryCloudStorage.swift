import Foundation
import KVStore
import Synchronization

/// Cloud storage in memory, for tests: the same merge rule and quotas as the SQLite one.
public final class MemoryCloudStorage: CloudStorage {
    private struct StoreRows {
        var limits = QuotaLimits.modelled
        var usage = QuotaUsage(bytes: 0, keys: 0)
        var cursor: Int64 = 0
        var latest: [String: (change: StampedChange, cursor: Int64)] = [:]
    }

    private let stores = Mutex<[String: StoreRows]>([:])
    private let id: String

    public init(identity: String = UUID().uuidString.lowercased()) {
        id = identity
    }

    public func identity() throws(CloudError) -> String { id }

    public func push(_ changes: [StampedChange], to store: String) throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        return stores.withLock { stores in
            var table = Table(rows: stores[store] ?? StoreRows())
            let outcome = (try? CloudLedger.push(changes, into: &table)) ?? PushOutcome()
            stores[store] = table.rows
            return outcome
        }
    }

    public func changes(in store: String, after cursor: Int64, limit: Int) throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        return stores.withLock { stores in
            let newer = (stores[store]?.latest.values ?? [:].values).filter { $0.cursor > cursor }.sorted { $0.cursor < $1.cursor }
            let batch = newer.prefix(limit)
            return ChangeBatch(changes: batch.map(\.change), cursor: batch.last?.cursor ?? cursor, complete: newer.count <= limit)
        }
    }

    public func cursor(of store: String) throws(CloudError) -> Int64 {
        stores.withLock { $0[store]?.cursor ?? 0 }
    }

    public func limits(of store: String) throws(CloudError) -> QuotaLimits {
        stores.withLock { $0[store]?.limits ?? .modelled }
    }

    public func setLimits(_ limits: QuotaLimits, of store: String) throws(CloudError) {
        try StoreName.check(store)
        stores.withLock { $0[store, default: StoreRows()].limits = limits }
    }

    private struct Table: CloudTable {
        var rows: StoreRows
        var limits: QuotaLimits { rows.limits }
        var usage: QuotaUsage { rows.usage }
        var cursor: Int64 { rows.cursor }

        func current(_ key: String) -> StampedChange? { rows.latest[key]?.change }

        mutating func record(_ change: StampedChange, cursor: Int64, usage: QuotaUsage) {
            rows.latest[change.key] = (change, cursor)
            rows.cursor = cursor
            rows.usage = usage
        }
    }
}
