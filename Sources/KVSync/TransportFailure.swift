import AsyncHTTPClient
import Foundation
import KVCloud
import KVNetwork
import NIOCore

/// The remote error a failed exchange with a sync server is, in words: the connection's
/// failures as `NetworkFailure` words them, the HTTP client's own timeouts and closings, and
/// an answer that is not the protocol's. No library type name reaches the user.
enum TransportFailure {
    /// `error`, thrown while exchanging with `base` (`http(s)://host:port`).
    static func cloudError(_ error: any Error, base: String) -> CloudError {
        let (host, port) = endpoint(of: base)
        if let failure = NetworkFailure(error, host: host, port: port, remedy: "give the CA that signed it with --tls-ca") {
            return CloudError(failure)
        }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .tlsHandshakeTimeout:
                return .unreachable(.timedOut, "no connection to \(host):\(port) in time")
            case .deadlineExceeded, .readTimeout, .writeTimeout, .getConnectionFromPoolTimeout:
                return .unreachable(.timedOut, "\(base) did not answer in time")
            case .remoteConnectionClosed, .uncleanShutdown, .cancelled:
                return .unreachable(.connectionLost, "the connection to \(host):\(port) was closed before the answer was whole")
            default:
                return .unavailable("the request to \(base) failed")
            }
        }
        if error is DecodingError { return .notProtocol("\(base) sent an answer that is not the protocol's") }
        if let error = error as? CloudError { return error }
        if let error = error as? IOError { return .unavailable("the request to \(base) failed: \(String(cString: strerror(error.errnoCode)))") }
        return .unavailable("the request to \(base) failed")
    }

    /// The host and port `base` names, the port defaulting to the scheme's.
    static func endpoint(of base: String) -> (String, Int) {
        guard let url = URL(string: base), let host = url.host else { return (base, 0) }
        return (host, url.port ?? (url.scheme == "https" ? 443 : 80))
    }
}
