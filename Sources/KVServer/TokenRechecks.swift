import KVCloud
import Synchronization

/// The looks again that open event streams take at their tokens (`stillActiveToken`), shared by
/// every stream of a token: a token is looked up at most once per `maximumAge`, however many
/// streams hold it, and streams that ask while a lookup runs await that one. For a storage
/// that cannot hear revocations made by other processes (a SQLite file that `kvsfs token
/// revoke` writes): a revoked token's streams end within `maximumAge` plus their own
/// `SyncServer.streamTokenRecheck`.
final class TokenRechecks: Sendable {
    static let maximumAge = Duration.milliseconds(500)
    /// Enough for every device of a large deployment; past it the lookups start afresh.
    private static let capacity = 100_000

    private struct Look {
        var at: ContinuousClock.Instant
        var lookup: Task<TokenRecord?, any Error>
    }

    private let looks = Mutex<[String: Look]>([:])

    /// Token `id`'s record as a look begun less than `maximumAge` ago finds it, or as `lookUp`
    /// finds it now. A failed lookup is not kept.
    func record(_ id: String, lookUp: @escaping @Sendable () async throws(AccountError) -> TokenRecord?) async throws(AccountError) -> TokenRecord? {
        let now = ContinuousClock.now
        let lookup = looks.withLock { looks in
            if let look = looks[id], now - look.at < Self.maximumAge { return look.lookup }
            let lookup = Task { () async throws -> TokenRecord? in try await lookUp() }
            if looks.count >= Self.capacity { looks = [:] }
            looks[id] = Look(at: now, lookup: lookup)
            return lookup
        }
        do {
            return try await lookup.value
        } catch {
            looks.withLock { looks in
                if looks[id]?.lookup == lookup { looks[id] = nil }
            }
            if let error = error as? AccountError { throw error }
            throw .database(String(describing: error))
        }
    }
}
