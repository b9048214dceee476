import Foundation
import Hummingbird
import KVCloud
import Synchronization

/// The most stores one account may hold on this server (`kvsfs serve
/// --max-stores-per-account`). A store is made by the first push to it; a push to a store its
/// account does not hold yet makes it only while the account holds fewer than `limit`, and is
/// otherwise answered 403 with the reason, storing nothing. The stores the account holds
/// already go on as before, even past a lowered limit. The storage counts and makes in one
/// transaction (`ServerStorage.makeStore`, the rule's twin in SQL), so that pushes through
/// several servers sharing a PostgreSQL database never pass it together.
final class StoreCap: Sendable {
    static let defaultLimit = 256

    let limit: Int
    /// Stores this server has seen held: their pushes are not counted again. (A store's row
    /// goes only with its account.)
    private let held = Mutex(Set<String>())

    init(limit: Int) {
        self.limit = limit
    }

    /// Lets a push to `store` on when the store is held, or made now within the limit.
    func admit(_ store: AddressedStore, storage: any ServerStorage) async throws(CloudError) {
        if held.withLock({ $0.contains(store.name) }) { return }
        guard try await storage.makeStore(store.name, of: store.account, limit: limit) else {
            throw .storeLimit("the server holds its limit of \(limit) stores for account \(store.account) "
                              + "(--max-stores-per-account): store \(store.shown) is not made")
        }
        held.withLock { _ = $0.insert(store.name) }
    }
}

extension AddressedStore {
    /// ACCOUNT/STORE, as the request addressed it.
    var shown: String { account + "/" + name.dropFirst(account.count + 1) }
}
