import Foundation
import Logging
import Synchronization

/// What the server's log says of refused tokens: each by its id (never its secret) and the
/// reason. The same id refused for the same reason is said at most once a minute, and the log
/// says at most `budget` refusals a minute in all, then one line counting the rest: a client
/// retrying, or one making up tokens, cannot flood the log.
final class RefusedTokens: Sendable {
    private struct Minute {
        var start: ContinuousClock.Instant
        var said: Set<String> = []
        var unsaid = 0
    }

    static let budget = 20
    private let logger: Logger
    private let minute: Mutex<Minute>

    init(logger: Logger) {
        self.logger = logger
        minute = Mutex(Minute(start: .now))
    }

    func refused(_ token: String, reason: String) {
        let id = AccountDirectory.tokenID(of: token)
        let now = ContinuousClock.now
        let (say, summary): (Bool, Int) = minute.withLock { minute in
            var summary = 0
            if now - minute.start >= .seconds(60) {
                summary = minute.unsaid
                minute = Minute(start: now)
            }
            let entry = "\(id)\u{0}\(reason)"
            if minute.said.contains(entry) { return (false, summary) }
            guard minute.said.count < Self.budget else {
                minute.unsaid += 1
                return (false, summary)
            }
            minute.said.insert(entry)
            return (true, summary)
        }
        if summary > 0 { logger.warning("and \(summary) more refused tokens in the last minute") }
        if say { logger.warning("refused token \(id): \(reason)") }
    }
}
