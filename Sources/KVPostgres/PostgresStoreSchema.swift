import Foundation
import KVCloud
import KVStore
import Logging
import PostgresNIO

// A store's schema (`RemoteSchema`): its row of `kvsfs_schema` and its version in the store's
// row (migration v9), which a push reads under the store's lock.

extension PostgresServerStorage {
    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        return try await run {
            let rows = try await client.query("SELECT version, text FROM kvsfs_schema WHERE store = \(store)", logger: logger)
            for try await (version, text) in rows.decode((Int64, Data?).self) {
                return RemoteSchema(version: version, text: text.map { [UInt8]($0) })
            }
            return .none
        }
    }

    /// One transaction: the store's row made (as a first push makes it) and locked, so that a
    /// push through any instance is judged by the schema before it or after it; the version
    /// checked, the schema and the row's version written, and the store's waiters on other
    /// instances told, as a push tells them.
    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        _ = try SchemaAdmission.admit(text)
        let limits = QuotaLimits.modelled
        let set = try await run { () async throws -> RemoteSchema in
            try await client.withTransaction(logger: logger) { db in
                try await db.query("""
                    INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                    VALUES (\(store), 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes))
                    ON CONFLICT (id) DO NOTHING
                    """, logger: logger)
                let locked = try await db.query("SELECT schema_version FROM kvsfs_store WHERE id = \(store) FOR UPDATE", logger: logger)
                var current: Int64 = 0
                for try await version in locked.decode(Int64.self) { current = version }
                try SchemaAdmission.check(ifVersion, current: current)
                let set = RemoteSchema(version: current + 1, text: text)
                try await db.query("""
                    INSERT INTO kvsfs_schema (store, version, text) VALUES (\(store), \(set.version), \(text.map { ByteBuffer(bytes: $0) }))
                    ON CONFLICT (store) DO UPDATE SET version = excluded.version, text = excluded.text
                    """, logger: logger)
                try await db.query("""
                    UPDATE kvsfs_store SET schema_version = \(set.version) WHERE id = \(store)
                    RETURNING pg_notify(\(Self.channel), \(instance + " ") || id)
                    """, logger: logger)
                return set
            }
        }
        knownStores.withLock { _ = $0.insert(store) }
        return set
    }

    /// The store's schema version as its row holds it (0 without a row).
    func schemaVersion(of store: String) async throws(CloudError) -> Int64 {
        try await run {
            let rows = try await client.query("SELECT schema_version FROM kvsfs_store WHERE id = \(store)", logger: logger)
            for try await version in rows.decode(Int64.self) { return version }
            return 0
        }
    }

    /// The schema of each store at the version its locked row holds, inside the push's
    /// transaction: decoded once per version (`DecodedSchemas`), the text read only when the
    /// version moved. A store whose schema cannot be read has its error instead.
    static func schemas(at versions: [String: Int64], decoded: DecodedSchemas, _ db: PostgresConnection,
                        _ logger: Logger) async throws -> [String: Result<KeySchema?, CloudError>] {
        var schemas = [String: Result<KeySchema?, CloudError>]()
        var unknown = [String]()
        for (store, version) in versions {
            if let cached = decoded.cached(store, at: version) { schemas[store] = .success(cached) } else { unknown.append(store) }
        }
        guard !unknown.isEmpty else { return schemas }
        let rows = try await db.query("SELECT store, version, text FROM kvsfs_schema WHERE store = ANY(\(unknown))", logger: logger)
        for try await (store, version, text) in rows.decode((String, Int64, Data?).self) where version == versions[store] {
            schemas[store] = Result { () throws(CloudError) in try decoded.decode(text.map { [UInt8]($0) }, of: store, at: version) }
        }
        for store in unknown where schemas[store] == nil {
            schemas[store] = .failure(.unavailable("the schema of store \(store) (version \(versions[store] ?? 0)) has no row"))
        }
        return schemas
    }
}
