import Foundation
import Hummingbird
import KVCloud
import KVWire
import Logging

// How the routes' failures become HTTP answers: the client gets the status and the reason,
// the log gets what names the database.

extension SyncServer {
    /// A refusal of the request's form as HTTP: 413 for a body over the limit, else 400, with
    /// the reason. (A push is refused whole when malformed; quotas are judged per change by
    /// the storage.)
    func wire<T>(_ read: () throws(WireError) -> T) throws -> T {
        do {
            return try read()
        } catch {
            if case .bodyTooLarge = error { throw HTTPError(.contentTooLarge, message: error.description) }
            throw HTTPError(.badRequest, message: error.description)
        }
    }

    /// Storage failures as HTTP: a bad store name is 404, a history that is not the reader's
    /// 409 (the client resynchronises), anything else 503 with Retry-After. An answer decided
    /// already passes as it is.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let answer as HTTPError {
            throw answer
        } catch CloudError.invalidStoreName(let name) {
            throw HTTPError(.notFound, message: "no store \(name)")
        } catch let error as CloudError {
            // The client saw a history this store no longer has: it must resynchronise.
            guard error.isHistoryMismatch else { throw HTTPError.storageUnavailable(error, logger: logger) }
            throw HTTPError(.conflict, message: error.description)
        } catch {
            throw HTTPError.storageUnavailable(error, logger: logger)
        }
    }
}

extension HTTPError {
    /// 503 with Retry-After; the error itself (which names the database) goes to the log.
    static func storageUnavailable(_ error: any Error, logger: Logger) -> HTTPError {
        logger.error("storage unavailable", metadata: ["error": "\(error)"])
        return HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "the server's storage is unavailable; retry later")
    }
}
