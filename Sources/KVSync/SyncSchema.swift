import KVCloud
import KVStore

/// The store's schema as sync brings it: taken from the remote when a fetch says its version
/// moved, and told; fetched values that break it told too.
extension SyncEngine {
    /// The most violations one `schema-violation` event words; the rest are counted.
    static let violationsWorded = 5

    /// Takes the remote's schema when `version` (what a fetch said the remote holds) is not
    /// the one the store holds, and says so in a `schema-change` event.
    func takeSchema(seen version: Int64) async throws {
        guard version != store.schema.version, version != refusedSchemaVersion.withLock({ $0 }) else { return }
        let given = try await remote.schema(of: remoteStore)
        // A batch read ahead may say a version this store took since (set through this mount).
        guard given.version != store.schema.version else { return }
        let held: HeldSchema
        do throws(StoreError) {
            held = try store.takeSchema(version: given.version, text: given.text)
        } catch {
            guard case .invalidSchema(let reason) = error else { throw error }
            // What the remote gave is not one the store can hold: the one held stays, and sync
            // goes on; said once per version.
            refusedSchemaVersion.withLock { $0 = version }
            onEvent(SyncEvent(reason: .schemaChange, keys: [],
                              message: "the remote gave a schema (version \(given.version)) this mount cannot hold: \(reason); the one held (version \(store.schema.version)) stays"))
            return
        }
        let words: String
        if held.text == nil {
            words = "the store's schema was removed (version \(held.version)): values are checked against the quotas alone"
        } else if let reason = held.unreadable {
            words = "the store's schema is now version \(held.version), which this kvsfs cannot read (\(reason)): the remote still judges every push against it"
        } else {
            let breaking = store.violationCount
            words = "the store's schema is now version \(held.version): \(breaking) key\(breaking == 1 ? "" : "s") hold\(breaking == 1 ? "s" : "") values that break it (kvsfs schema check lists them)"
        }
        onEvent(SyncEvent(reason: .schemaChange, keys: [], message: words))
    }

    /// Tells of the changes taken in whose values break the held schema: the remote keeps
    /// values set before its schema, and so does the store.
    func reportSchemaBreaches(in changes: [StampedChange]) {
        guard let rules = store.schema.rules else { return }
        var violations = [SchemaViolation]()
        for change in changes.sorted(by: { $0.key < $1.key }) {
            guard let xml = change.value else { continue }
            // A value the change rule admitted decodes; one that does not is not the schema's to judge.
            guard let value = try? PropertyListCodec.decode(xml) else { continue }
            if let violation = rules.violation(key: change.key, value: value) { violations.append(violation) }
        }
        guard !violations.isEmpty else { return }
        var words = violations.prefix(Self.violationsWorded).map(\.description).joined(separator: "; ")
        if violations.count > Self.violationsWorded { words += "; and \(violations.count - Self.violationsWorded) more" }
        onEvent(SyncEvent(reason: .schemaViolation, keys: violations.map(\.key), message: words))
    }
}
