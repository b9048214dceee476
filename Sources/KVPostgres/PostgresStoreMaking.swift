import Foundation
import KVCloud
import KVStore
import PostgresNIO

// A store's row made under its account's cap (`ServerStorage.makeStore`), however many
// instances make stores for the account at once.

extension PostgresServerStorage {
    /// One transaction: the account's row locked, then the count of its stores and the new row.
    /// Every instance making a store for the account waits for that lock, so the count each
    /// sees includes every store made before it; `FOR NO KEY UPDATE` leaves token rows free to
    /// be made meanwhile (they only share the account row's key). A store this instance has
    /// seen made is not counted again.
    public func makeStore(_ store: String, of account: String, limit: Int) async throws(CloudError) -> Bool {
        try StoreName.check(store)
        if knownStores.withLock({ $0.contains(store) }) { return true }
        let limits = QuotaLimits.modelled
        let made = try await run { () async throws -> Bool in
            try await client.withTransaction(logger: logger) { db in
                let owner = try await db.query("SELECT name FROM kvsfs_account WHERE name = \(account) FOR NO KEY UPDATE", logger: logger)
                var locked = false
                for try await _ in owner.decode(String.self) { locked = true }
                // Its token was accepted a moment ago: the account went since.
                guard locked else { throw CloudError.notAuthorized("there is no account \(account)") }
                let counted = try await db.query("""
                    SELECT count(*) FILTER (WHERE id = \(store)), count(*) FROM kvsfs_store WHERE starts_with(id, \(account + "."))
                    """, logger: logger)
                var (exists, held) = (false, 0)
                for try await (same, all) in counted.decode((Int, Int).self) { (exists, held) = (same > 0, all) }
                if exists { return true }
                guard held < limit else { return false }
                try await db.query("""
                    INSERT INTO kvsfs_store (id, cursor, bytes, keys, total_bytes, value_bytes, max_keys, key_name_bytes)
                    VALUES (\(store), 0, 0, 0, \(limits.totalBytes), \(limits.valueBytes), \(limits.keys), \(limits.keyNameBytes))
                    ON CONFLICT (id) DO NOTHING
                    """, logger: logger)
                return true
            }
        }
        if made { knownStores.withLock { _ = $0.insert(store) } }
        return made
    }
}
