import Glibc
import KVCloud
import NIOCore
import NIOPosix
import NIOSSL

/// The one owner of the words for a failed connection, for every client kvsfs runs: the sync
/// client and the PostgreSQL pool. A network library's errors name its own types; the user
/// reads what happened, where, and what to do about it.
public struct NetworkFailure: Equatable, Sendable, CustomStringConvertible {
    public var cause: Unreachability
    public var description: String

    public init(_ cause: Unreachability, _ description: String) {
        self.cause = cause
        self.description = description
    }

    /// The failure `error` is, when it is one of a connection to `host` (port `port`); nil for
    /// anything else, which the caller describes itself. `remedy` is what the caller's user
    /// can do about a certificate that could not be verified (an option of their command).
    public init?(_ error: any Error, host: String, port: Int, remedy: String? = nil) {
        let endpoint = "\(host):\(port)"
        switch error {
        case let error as NIOConnectionError:
            // Every address tried failed: the first connection failure says why; none at all
            // means the name gave no address.
            if let first = error.connectionErrors.first,
               let failure = NetworkFailure(first.error, host: host, port: port, remedy: remedy) {
                self = failure
            } else if error.connectionErrors.isEmpty {
                self.init(.noRoute, "the name \(host) was not resolved")
            } else {
                return nil
            }
        case let error as IOError:
            guard let failure = NetworkFailure(errno: error.errnoCode, endpoint: endpoint) else { return nil }
            self = failure
        case let error as SocketAddressError:
            if case .unknown = error {
                self.init(.noRoute, "the name \(host) was not resolved")
            } else {
                return nil
            }
        case let error as ChannelError:
            switch error {
            case .connectTimeout(let after): self.init(.timedOut, "no connection to \(endpoint) within \(Self.seconds(after))")
            case .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed, .inputClosed:
                self.init(.connectionLost, "the connection to \(endpoint) was closed")
            default: return nil
            }
        case let error as NIOSSLError:
            switch error {
            case .uncleanShutdown: self.init(.connectionLost, "the connection to \(endpoint) was closed in the middle of TLS")
            case .handshakeFailed(let reason): self.init(tls: "\(reason)", host: host, endpoint: endpoint, remedy: remedy)
            default: self.init(tls: "\(error)", host: host, endpoint: endpoint, remedy: remedy)
            }
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            self.init(.notTrusted, "the TLS certificate of \(endpoint) is not for the name \(host)")
        default:
            return nil
        }
    }

    /// A system call's errno on a connection; nil for one that says nothing of the way to the
    /// server (no descriptors left, no buffers), which its caller words.
    init?(errno code: Int32, endpoint: String) {
        switch code {
        case ECONNREFUSED: self.init(.connectionRefused, "connection refused by \(endpoint)")
        case ETIMEDOUT: self.init(.timedOut, "no answer from \(endpoint) in time")
        case ECONNRESET, EPIPE, ECONNABORTED: self.init(.connectionLost, "the connection to \(endpoint) was reset")
        case EHOSTUNREACH, ENETUNREACH, ENETDOWN, EHOSTDOWN:
            self.init(.noRoute, "\(endpoint): \(String(cString: strerror(code)).lowercased())")
        default: return nil
        }
    }

    /// A TLS handshake that failed: a certificate that could not be verified says so, with
    /// what would mend it; any other failure says only that TLS failed.
    init(tls detail: String, host: String, endpoint: String, remedy: String?) {
        let text = detail.uppercased()
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("SELF_SIGNED") || text.contains("UNABLE_TO_GET_ISSUER") {
            self.init(.notTrusted, "the TLS certificate of \(host) could not be verified (it is not signed by a trusted CA, "
                + "or has expired)" + (remedy.map { "; \($0)" } ?? ""))
        } else {
            self.init(.connectionLost, "the TLS handshake with \(endpoint) failed")
        }
    }

    public static func seconds(_ amount: TimeAmount) -> String {
        let seconds = Double(amount.nanoseconds) / 1e9
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension CloudError {
    /// The remote error a connection failure is.
    public init(_ failure: NetworkFailure) {
        self = .unreachable(failure.cause, failure.description)
    }
}
