/// Why a remote could not be reached, as far as it decides what the user is told and which
/// errno a sync answers with: the words themselves travel beside it.
public enum Unreachability: Equatable, Sendable {
    /// Nothing listens at the address (ECONNREFUSED).
    case connectionRefused
    /// The connection or the answer took longer than allowed (ETIMEDOUT).
    case timedOut
    /// The host's name does not resolve, or no route leads to it (EHOSTUNREACH).
    case noRoute
    /// The server's TLS certificate is not one this mount trusts (ECONNABORTED).
    case notTrusted
    /// The connection was closed or reset before the answer was whole (ECONNRESET).
    case connectionLost
}
