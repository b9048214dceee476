import Foundation
import KVCloud
import Logging
import PostgresNIO

// What one instance hears of the others: `LISTEN` on the changes channel (long polls to wake)
// and the tokens channel (revocations, for `TokenCache`), on one connection that is probed
// and made again when it fails.

extension PostgresServerStorage {
    public func followChanges(_ changed: @escaping @Sendable (String) -> Void, resync: @escaping @Sendable () -> Void) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await connection.listen(on: Self.channel) { notifications in
                                // Listening (again): changes made before now were not heard.
                                resync()
                                for try await notification in notifications {
                                    let (sender, store) = Self.parse(notification.payload)
                                    if sender != self.instance { changed(store) }
                                }
                            }
                        }
                        group.addTask {
                            try await connection.listen(on: Self.tokenChannel) { notifications in
                                // Hearing revocations from now on: tokens may be kept.
                                self.tokenCache.setListening(true)
                                for try await _ in notifications { self.tokenCache.forgetAll() }
                            }
                        }
                        group.addTask {
                            // A connection that died without closing would never end the loop above.
                            while true {
                                try await Task.sleep(for: .seconds(15))
                                do {
                                    try await Self.probe(connection, logger: self.logger)
                                } catch {
                                    try? await connection.close()  // ends the notifications too
                                    throw error
                                }
                            }
                        }
                        defer { self.tokenCache.setListening(false) }
                        try await group.next()
                        group.cancelAll()
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("listening for other servers' changes failed; retrying", metadata: ["error": "\(Self.describe(error))"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private static func parse(_ payload: String) -> (sender: String, store: String) {
        guard let space = payload.firstIndex(of: " ") else { return ("", payload) }
        return (String(payload[..<space]), String(payload[payload.index(after: space)...]))
    }

    /// `SELECT 1` on `connection`, failing if it takes more than 5 seconds.
    private static func probe(_ connection: PostgresConnection, logger: Logger) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { _ = try await connection.query("SELECT 1", logger: logger) }
            group.addTask {
                try await Task.sleep(for: .seconds(5))
                throw CloudError.unavailable("PostgreSQL did not answer within 5 s")
            }
            try await group.next()
            group.cancelAll()
        }
    }
}
