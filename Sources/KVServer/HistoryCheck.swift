import Foundation
import Hummingbird
import KVCloud
import Synchronization

// A reader's history against the store's: 409 when they differ, and the renewal of the
// account's generation that makes the account's other mounts find out too.

extension SyncServer {
    /// At most one renewal per account in this time: one restore needs one renewal, whatever
    /// clients send.
    static let identityRenewalInterval = Duration.seconds(600)

    /// Runs a request of the storage's that checks a reader's history (its `after` and its
    /// mark). When the store's history is not the one the reader saw, the answer is 409, and
    /// the account's other mounts must resynchronise too (their own marks may not show it):
    /// the server renews the account's generation, part of the identity they look at. Only for
    /// a token that may write the store (a reader cannot make others work), and at most once
    /// per `identityRenewalInterval` per account.
    func checkingHistory<T>(of store: String, scope: TokenScope, _ body: () async throws(CloudError) -> T) async throws -> T {
        do {
            return try await body()
        } catch where error.isHistoryMismatch {
            if !scope.readOnly, renewals.mayRenew(scope.account, now: .now, every: Self.identityRenewalInterval) {
                do {
                    try await storage.renewGeneration(of: scope.account)
                    logger.warning("a client saw another history than this one; the account's generation is renewed",
                                   metadata: ["store": "\(store)", "reason": "\(error)"])
                } catch {
                    logger.error("a client saw another history, and the account's generation could not be renewed",
                                 metadata: ["error": "\(error)"])
                }
            }
            throw HTTPError(.conflict, message: error.description)
        } catch {
            return try await run { throw error }
        }
    }
}

/// When the server last renewed each account's generation, so that renewals stay rare
/// whatever clients send (one entry per account that ever had one).
final class IdentityRenewals: Sendable {
    private let last = Mutex<[String: ContinuousClock.Instant]>([:])

    /// Whether `account`'s generation may be renewed now; if so, it counts as done.
    func mayRenew(_ account: String, now: ContinuousClock.Instant, every interval: Duration) -> Bool {
        last.withLock { last in
            if let previous = last[account], now - previous < interval { return false }
            last[account] = now
            return true
        }
    }
}
