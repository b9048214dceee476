import Foundation
import KVStore
import Synchronization

/// Cloud storage in memory, for tests: the same merge rule and quotas as the SQLite one.
public final class MemoryCloudStorage: CloudStorage {
    private struct StoreRows {
        var limits = QuotaLimits.modelled
        var usage = QuotaUsage(bytes: 0, keys: 0)
        var cursor: Int64 = 0
        var keptBytes = 0
        var latest: [String: (change: StampedChange, cursor: Int64)] = [:]
        var history = HistoryPolicy.standard
        /// Per key, the versions the policy keeps, oldest first.
        var versions: [String: [KeyVersion]] = [:]
        var devices = DeviceNameBook()
        var schema = RemoteSchema.none
        /// `schema`'s text decoded.
        var decodedSchema: KeySchema?

        /// Newest first, as `history(of:in:)` answers; none once a removal is past retention.
        func kept(_ key: String, now: Int64) -> [KeyVersion] {
            let held = (versions[key] ?? []).suffix(history.versions).reversed()
            guard let latest = held.first, history.keeps(latest: latest, now: now) else { return [] }
            return Array(held)
        }

        /// Past the bound on the versions' bytes (`HistoryPolicy.byteBound`), drops the oldest
        /// versions, whatever their keys, but never a key's newest.
        mutating func evictOldestVersions() {
            let held = versions.values.joined().reduce(0) { $0 + ($1.value?.count ?? 0) }
            var excess = history.bytesToEvict(held: held, limits: limits)
            guard excess > 0 else { return }
            let older = versions.values.flatMap { $0.dropLast() }.sorted { $0.version < $1.version }
            var dropped = Set<Int64>()
            for version in older where excess > 0 {
                dropped.insert(version.version)
                excess -= version.value?.count ?? 0
            }
            for key in versions.keys { versions[key]?.removeAll { dropped.contains($0.version) } }
        }

        /// `versions`, each with the name kept of its device.
        func named(_ versions: [KeyVersion]) -> [KeyVersion] {
            versions.named(by: devices.names(of: versions.map(\.stamp.device)))
        }

        func check(_ mark: HistoryMark?) throws(CloudError) {
            guard let mark else { return }
            try mark.check(newest: cursor, held: latest[mark.key].map { HistoryMark(key: mark.key, cursor: $0.cursor, stamp: $0.change.stamp) })
        }
    }

    private let stores = Mutex<[String: StoreRows]>([:])
    private let id: Mutex<String>
    private let admission: AdmissionPolicy

    public init(identity: String = UUID().uuidString.lowercased(), admission: AdmissionPolicy = .standard) {
        id = Mutex(identity)
        self.admission = admission
    }

    public func identity() throws(CloudError) -> String { id.withLock { $0 } }

    public func renewIdentity(replacing seen: String) throws(CloudError) -> Bool {
        id.withLock { id in
            guard id == seen else { return false }
            id = UUID().uuidString.lowercased()
            return true
        }
    }

    /// A copy of everything held now, with the same identity: a backup to restore later.
    public func snapshot() -> MemoryCloudStorage {
        let copy = MemoryCloudStorage(identity: id.withLock { $0 }, admission: admission)
        let held = stores.withLock { $0 }
        copy.stores.withLock { $0 = held }
        return copy
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        let admitted = ChangeAdmission.admit(changes, policy: admission)
        return try stores.withLock { (stores) throws(CloudError) -> PushOutcome in
            var rows = stores[store] ?? StoreRows()
            try rows.check(mark)
            var current = [String: StampedChange]()
            var versions = [String: Int64]()
            for key in admitted.keys {
                guard let row = rows.latest[key] else { continue }
                current[key] = row.change
                // A key's newest version is never dropped; the row's cursor for a key held
                // before versions were kept.
                versions[key] = rows.versions[key]?.last?.version ?? row.cursor
            }
            let decision = CloudLedger.decide(admitted, current: current, versions: versions,
                                              state: CloudStoreState(limits: rows.limits, usage: rows.usage, cursor: rows.cursor,
                                                                     keptBytes: rows.keptBytes, schema: rows.decodedSchema))
            for write in decision.writes {
                let change = write.change
                rows.latest[change.key] = (change, write.cursor)
                guard write.isVersion else { continue }
                // A key removed longer ago than the retention time has no history.
                var versions = Array(rows.kept(change.key, now: admitted.now).reversed())
                versions.append(KeyVersion(change, at: write.cursor, acceptedAt: admitted.now, withValue: true))
                rows.versions[change.key] = Array(versions.suffix(rows.history.versions))
            }
            rows.evictOldestVersions()
            rows.devices.keep(decision.outcome.deviceNames)
            rows.usage = decision.state.usage
            rows.cursor = decision.state.cursor
            rows.keptBytes = decision.state.keptBytes
            stores[store] = rows
            return decision.outcome
        }
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        return try stores.withLock { (stores) throws(CloudError) -> ChangeBatch in
            try (stores[store] ?? StoreRows()).check(mark)
            let newest = stores[store]?.cursor ?? 0
            if cursor > newest { throw .cursorAhead(asked: cursor, store: newest) }
            let newer = (stores[store]?.latest.values ?? [:].values).filter { $0.cursor > cursor }.sorted { $0.cursor < $1.cursor }
            let batch = newer.prefix(limit)
            var answer = ChangeBatch(changes: batch.map(\.change), cursor: batch.last?.cursor ?? cursor, complete: newer.count <= limit,
                                     mark: batch.last.map { HistoryMark(key: $0.change.key, cursor: $0.cursor, stamp: $0.change.stamp) })
            answer.devices = stores[store]?.devices.names(of: answer.deviceIDs) ?? [:]
            answer.schemaVersion = stores[store]?.schema.version ?? 0
            return answer
        }
    }

    public func mark(in store: String, key: String) throws(CloudError) -> HistoryMark? {
        try StoreName.check(store)
        return stores.withLock { stores in
            stores[store]?.latest[key].map { HistoryMark(key: key, cursor: $0.cursor, stamp: $0.change.stamp) }
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

    public func history(of key: String, in store: String) throws(CloudError) -> [KeyVersion] {
        try StoreName.check(store)
        let key = try HistoryPolicy.requestedKey(key)
        let now = admission.now()
        return stores.withLock { stores in
            (stores[store]?.named(stores[store]?.kept(key, now: now) ?? []) ?? []).map { version in
                var listed = version
                listed.value = nil
                return listed
            }
        }
    }

    public func version(_ version: Int64, of key: String, in store: String) throws(CloudError) -> KeyVersion? {
        try StoreName.check(store)
        let key = try HistoryPolicy.requestedKey(key)
        let now = admission.now()
        return stores.withLock { stores in stores[store].map { $0.named($0.kept(key, now: now)) }?.first { $0.version == version } }
    }

    public func historyPolicy(of store: String) throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        return stores.withLock { $0[store]?.history ?? .standard }
    }

    public func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        try change.check()
        return stores.withLock { stores in
            let policy = change.applied(to: stores[store]?.history ?? .standard)
            stores[store, default: StoreRows()].history = policy
            return policy
        }
    }

    public func schema(of store: String) throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        return stores.withLock { $0[store]?.schema ?? .none }
    }

    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        let decoded = try SchemaAdmission.admit(text)
        return try stores.withLock { (stores) throws(CloudError) -> RemoteSchema in
            var rows = stores[store] ?? StoreRows()
            try SchemaAdmission.check(ifVersion, current: rows.schema.version)
            rows.schema = RemoteSchema(version: rows.schema.version + 1, text: text)
            rows.decodedSchema = decoded
            stores[store] = rows
            return rows.schema
        }
    }
}
