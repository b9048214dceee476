import Synchronization

/// The looks again that open event streams take at their tokens (`stillActiveToken`), shared by
/// every stream of a token: a token is looked up at most once per `maximumAge`, however many
/// streams hold it. For a storage that cannot hear revocations made by other processes (a
/// SQLite file that `kvsfs token revoke` writes): a revoked token's streams end within
/// `maximumAge` plus their own `SyncServer.streamTokenRecheck`.
final class TokenRechecks: Sendable {
    static let maximumAge = Duration.milliseconds(500)
    /// Enough for every device of a large deployment; past it the lookups start afresh.
    private static let capacity = 100_000

    private struct Look {
        var at: ContinuousClock.Instant
        var record: TokenRecord?
    }

    private let looks = Mutex<[String: Look]>([:])

    /// Token `id`'s record as a look less than `maximumAge` old found it, or as `lookUp` finds
    /// it now. A failed lookup is not kept.
    func record(_ id: String, lookUp: () async throws(AccountError) -> TokenRecord?) async throws(AccountError) -> TokenRecord? {
        let now = ContinuousClock.now
        if let look = looks.withLock({ $0[id] }), now - look.at < Self.maximumAge { return look.record }
        let record = try await lookUp()
        looks.withLock { looks in
            if looks.count >= Self.capacity { looks = [:] }
            looks[id] = Look(at: now, record: record)
        }
        return record
    }
}
