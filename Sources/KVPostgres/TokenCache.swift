import KVCloud
import Synchronization

/// Active tokens an instance has looked up, kept while it hears every revocation.
///
/// Open event streams look their tokens up again once a second, each a round trip to
/// PostgreSQL unless kept here. A revoke notifies `kvsfs_tokens` in the transaction
/// that makes it, and every instance LISTENs on it: while that connection is up, a kept token
/// is known to be active (up to the notification's delivery). While it is down, nothing is kept
/// and every lookup asks the database. Requests other than streams always ask the database.
final class TokenCache: Sendable {
    private struct State {
        var listening = false
        /// Raised by every revocation heard and every change of `listening`: a lookup that
        /// began under an older generation must not be kept.
        var generation: UInt64 = 0
        var tokens: [String: TokenRecord] = [:]
    }

    /// Enough for every device of a large deployment; past it the cache starts afresh.
    private static let capacity = 100_000
    private let state = Mutex(State())

    /// The kept record of token `id`, if it may be trusted.
    func record(_ id: String) -> TokenRecord? {
        state.withLock { state in state.listening ? state.tokens[id] : nil }
    }

    /// To read before asking the database, and pass to `keep` with its answer.
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Keeps an active token read from the database under `generation`, unless a revocation
    /// was heard (or the listener went down) since.
    func keep(_ record: TokenRecord, readUnder generation: UInt64) {
        state.withLock { state in
            guard state.listening, state.generation == generation else { return }
            if state.tokens.count >= Self.capacity { state.tokens = [:] }
            state.tokens[record.id] = record
        }
    }

    /// A revocation was heard, or revocations may have been missed: forget every kept token.
    func forgetAll() {
        state.withLock { state in
            state.generation &+= 1
            state.tokens = [:]
        }
    }

    /// Whether the instance is hearing revocations now.
    func setListening(_ listening: Bool) {
        state.withLock { state in
            state.listening = listening
            state.generation &+= 1
            state.tokens = [:]
        }
    }
}
