import Foundation
import KVStore

/// Where a sync server keeps its stores and accounts: one SQLite file for a single machine,
/// or a PostgreSQL database that several server instances share. Its stores are a
/// `ChangeLog`; a store is named `ACCOUNT.STORE` in it. Its identity is the server's: what a
/// mount sees is that, its account and the account's generation, and a restore found out
/// renews the account's generation (`renewGeneration`), never the server's identity.
public protocol ServerStorage: ChangeLog {
    var accounts: any AccountStorage { get }

    /// The account's generation, nil until first renewed: part of the identity the server
    /// gives the account's mounts, renewed when one of them finds the account's history is not
    /// the one it saw (see `ChangeLog.renewIdentity(replacing:)`), so that the others
    /// resynchronise too, and no other account's mounts.
    func generation(of account: String) async throws(CloudError) -> String?
    func renewGeneration(of account: String) async throws(CloudError)

    /// Makes the row of `store`, a store of `account`, unless it has one, provided the account
    /// then holds at most `limit` stores; false, making nothing, when it holds `limit` already.
    /// The count and the new row are one transaction that every other server sharing the
    /// storage waits for, so that stores made at once through several servers never pass
    /// the limit. (The limit is `StoreCap`'s; this is its twin in each storage's SQL.) A store
    /// is named `ACCOUNT.STORE` and an account's name holds no `.`: the account's stores are
    /// those whose names start with `ACCOUNT.`.
    func makeStore(_ store: String, of account: String, limit: Int) async throws(CloudError) -> Bool

    /// What the store keeps of each key's past (`HistoryPolicy.standard` until set).
    func historyPolicy(of store: String) async throws(CloudError) -> HistoryPolicy
    /// Sets the parts of the policy `change` names, in one transaction; returns the policy then held.
    func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) async throws(CloudError) -> HistoryPolicy

    /// Calls `changed` with the name of each store that gains changes through another server
    /// sharing this storage, until the task is cancelled. `resync` is called when some may
    /// have been missed (a lost connection): every waiter should look again.
    func followChanges(_ changed: @escaping @Sendable (String) -> Void, resync: @escaping @Sendable () -> Void) async

    /// How many transactions pushes took, and how many pushes they held, since the storage
    /// opened: pushes arriving together share one (`PushGroups`), and one flush to disk.
    var pushTransactions: (transactions: Int, pushes: Int) { get }

    func close() async
}

/// Accounts and token rows, as `AccountDirectory` keeps them.
public protocol AccountStorage: Sendable {
    /// Adds an account; `AccountError.accountExists` when the name is taken.
    func addAccount(_ name: String, at date: Date) async throws(AccountError)
    func hasAccount(_ name: String) async throws(AccountError) -> Bool
    func addToken(_ token: TokenRecord) async throws(AccountError)
    /// Marks an active token revoked; false when there is no such active token.
    func revokeToken(id: String, at date: Date) async throws(AccountError) -> Bool
    func tokens(of account: String) async throws(AccountError) -> [TokenInfo]
    /// The active (not revoked) token with this id.
    func activeToken(id: String) async throws(AccountError) -> TokenRecord?
    /// The same, for an open event stream looking at its token again: a storage that hears of
    /// every revocation as it happens may answer from memory.
    func stillActiveToken(id: String) async throws(AccountError) -> TokenRecord?
}

extension AccountStorage {
    public func stillActiveToken(id: String) async throws(AccountError) -> TokenRecord? {
        try await activeToken(id: id)
    }
}
