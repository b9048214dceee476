import Foundation
import KVCloud
import PostgresNIO

// Accounts and token rows (`kvsfs_account`, `kvsfs_token`), as `AccountDirectory` keeps them.

extension PostgresServerStorage {
    public func addAccount(_ name: String, at date: Date) async throws(AccountError) {
        let added = try await account {
            let rows = try await client.query("""
                INSERT INTO kvsfs_account (name, created_at) VALUES (\(name), \(date)) ON CONFLICT (name) DO NOTHING RETURNING name
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
        if !added { throw .accountExists(name) }
    }

    public func hasAccount(_ name: String) async throws(AccountError) -> Bool {
        try await account {
            let rows = try await client.query("SELECT name FROM kvsfs_account WHERE name = \(name)", logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func addToken(_ token: TokenRecord) async throws(AccountError) {
        _ = try await account {
            try await client.query("""
                INSERT INTO kvsfs_token (id, account, secret_hash, store, read_only, created_at)
                VALUES (\(token.id), \(token.scope.account), \(token.secretHash), \(token.scope.store), \(token.scope.readOnly), \(token.createdAt))
                """, logger: logger)
        }
    }

    public func revokeToken(id: String, at date: Date) async throws(AccountError) -> Bool {
        try await account {
            // Every instance hears of it when this commits, and stops trusting the token.
            let rows = try await client.query("""
                WITH revoked AS (UPDATE kvsfs_token SET revoked_at = \(date) WHERE id = \(id) AND revoked_at IS NULL RETURNING id)
                SELECT id FROM revoked, pg_notify(\(Self.tokenChannel), id)
                """, logger: logger)
            for try await _ in rows.decode(String.self) { return true }
            return false
        }
    }

    public func tokens(of account: String) async throws(AccountError) -> [TokenInfo] {
        try await self.account {
            let rows = try await client.query("""
                SELECT id, account, store, read_only, created_at, revoked_at IS NOT NULL FROM kvsfs_token
                WHERE account = \(account) ORDER BY created_at
                """, logger: logger)
            var tokens = [TokenInfo]()
            for try await (id, account, store, readOnly, createdAt, revoked) in rows.decode((String, String, String?, Bool, Date, Bool).self) {
                tokens.append(TokenInfo(id: id, scope: TokenScope(account: account, store: store, readOnly: readOnly), createdAt: createdAt, revoked: revoked))
            }
            return tokens
        }
    }

    /// Kept in memory while this instance hears revocations (see `TokenCache`): every open
    /// stream looks its token up again once a second.
    public func stillActiveToken(id: String) async throws(AccountError) -> TokenRecord? {
        if let kept = tokenCache.record(id) { return kept }
        return try await activeToken(id: id)
    }

    /// Always asks the database, so that a revoke stops requests at once on every instance.
    public func activeToken(id: String) async throws(AccountError) -> TokenRecord? {
        let generation = tokenCache.generation
        let record: TokenRecord? = try await account {
            let rows = try await client.query("""
                SELECT id, secret_hash, account, store, read_only, created_at FROM kvsfs_token WHERE id = \(id) AND revoked_at IS NULL
                """, logger: logger)
            for try await (id, hash, account, store, readOnly, createdAt) in rows.decode((String, String, String, String?, Bool, Date).self) {
                return TokenRecord(id: id, secretHash: hash, scope: TokenScope(account: account, store: store, readOnly: readOnly), createdAt: createdAt)
            }
            return nil
        }
        if let record { tokenCache.keep(record, readUnder: generation) }
        return record
    }
}
