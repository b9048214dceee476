import Foundation

/// Why a change log could not serve a request: the one error of the `ChangeLog` seam, whether
/// the log is a database this process opens or a server it reaches over the network.
public enum CloudError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The storage cannot be opened or read (a missing directory, a locked or corrupt file, a
    /// database or server that does not answer): retry with backoff.
    case unavailable(String)
    /// The remote could not be reached over the network (`Unreachability` says how, the
    /// words where): retry with backoff.
    case unreachable(Unreachability, String)
    /// The remote answered, but not in the protocol (not a kvsfs server: a proxy's page, a
    /// service of another kind on the port): it was reached, so no route is missing; retry
    /// with backoff.
    case notProtocol(String)
    /// Busy or rate-limited (a server's 429 or 503): retry after the time given, if any.
    case busy(retryAfter: Duration?, String)
    /// A server refused the token (401: unknown or revoked; 403: it does not reach the store,
    /// or may only read it): retrying does not help until the token changes.
    case notAuthorized(String)
    /// A server holds as many stores for the account as it keeps (its 403 marked
    /// `Kvsfs-Refusal: store-limit`, `kvsfs serve --max-stores-per-account`), and the push
    /// would make another: retrying does not help until a store goes or the limit is raised.
    case storeLimit(String)
    /// The request itself was refused (a malformed request, an unknown store): retrying does
    /// not help until something changes.
    case refused(String)
    case invalidStoreName(String)
    /// Changes were asked for after a cursor the store has not reached: the reader saw a
    /// history this store no longer has (it was emptied, replaced or restored from a backup).
    case cursorAhead(asked: Int64, store: Int64)
    /// The reader's `HistoryMark` names another change than the one the store holds at its
    /// cursor: the store's history is not the one the reader saw (restored, then written to).
    case historyDiffers(seen: String, held: String)
    /// A server found one of the two above, in its words (its 409).
    case historyMismatch(String)
    /// A schema was set only while the store's was at a version it no longer is
    /// (`ChangeLog.setSchema(_:of:ifVersion:)`): `current` is the version it is at.
    case schemaMoved(current: Int64)

    /// How long a busy remote asked to be left alone, if it said.
    public var retryAfter: Duration? {
        if case .busy(let after, _) = self { return after }
        return nil
    }

    /// The words of the error without the prefix `description` gives them.
    public var reason: String {
        switch self {
        case .unavailable(let reason), .unreachable(_, let reason), .notProtocol(let reason), .busy(_, let reason),
             .notAuthorized(let reason), .storeLimit(let reason), .refused(let reason), .historyMismatch(let reason): reason
        default: description
        }
    }

    /// Whether the error says the reader saw another history than the store's.
    public var isHistoryMismatch: Bool {
        switch self {
        case .cursorAhead, .historyDiffers, .historyMismatch: true
        default: false
        }
    }

    public var description: String {
        switch self {
        case .unavailable(let reason): "the remote cannot be reached: \(reason)"
        case .unreachable(_, let words): "the remote cannot be reached: \(words)"
        case .notProtocol(let reason): "the remote does not speak kvsfs's protocol: \(reason)"
        case .busy(let after, let reason):
            "the remote asked to retry later\(after.map { " (in \($0))" } ?? ""): \(reason)"
        case .notAuthorized(let reason): "the server refused this token: \(reason)"
        // The server's words name the limit, the account and the store.
        case .storeLimit(let reason): reason
        case .refused(let reason): "the remote refused: \(reason)"
        case .invalidStoreName(let name): "invalid store name \(name)"
        case .cursorAhead(let asked, let store):
            "changes after cursor \(asked) were asked for, but the store's history ends at \(store)"
        case .historyDiffers(let seen, let held):
            "the reader saw \(seen), but the store holds \(held)"
        case .historyMismatch(let reason): reason
        case .schemaMoved(let current): "the store's schema is no longer at the version given: it is at version \(current)"
        }
    }
}
