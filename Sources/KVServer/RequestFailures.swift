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
    /// 409 (the client resynchronises), a refused request 400 and a refused token 403 (with
    /// their reasons), anything else 503 with Retry-After. An answer decided already passes
    /// as it is.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let answer as HTTPError {
            throw answer
        } catch CloudError.invalidStoreName(let name) {
            throw HTTPError(.notFound, message: "no store \(name)")
        } catch let error as CloudError {
            switch error {
            case .cursorAhead, .historyDiffers, .historyMismatch:
                // The client saw a history this store no longer has: it must resynchronise.
                throw HTTPError(.conflict, message: error.description)
            case .refused(let reason): throw HTTPError(.badRequest, message: reason)
            case .schemaMoved(let current):
                throw HTTPError(.preconditionFailed, headers: [.init(RefusalHeader.schemaVersion)!: String(current)],
                                message: error.description)
            case .notAuthorized(let reason): throw HTTPError(.forbidden, message: reason)
            // 403 as before (a 409 would make the client resynchronise), marked so that a
            // client tells it from a refused token.
            case .storeLimit(let reason):
                throw HTTPError(.forbidden, headers: [.init(RefusalHeader.name)!: RefusalHeader.storeLimit], message: reason)
            case .busy(let after, _):
                let seconds = after.map { max(1, $0.components.seconds) } ?? 1
                logger.warning("answered 503, the storage is busy: \(error.reason)")
                throw HTTPError(.serviceUnavailable, headers: [.retryAfter: String(seconds)], message: "the server is busy; retry later")
            case .unavailable, .unreachable, .notProtocol, .invalidStoreName:
                throw HTTPError.storageUnavailable(error, logger: logger)
            }
        } catch {
            throw HTTPError.storageUnavailable(error, logger: logger)
        }
    }
}

extension HTTPError {
    /// 503 with Retry-After; the error itself (which names the database) goes to the log.
    static func storageUnavailable(_ error: any Error, logger: Logger) -> HTTPError {
        // The storage's own words: this server's database, not a remote it could not reach.
        let reason = (error as? CloudError)?.reason ?? "\(error)"
        logger.error("answered 503, the storage is unavailable: \(reason)")
        return HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "the server's storage is unavailable; retry later")
    }
}
