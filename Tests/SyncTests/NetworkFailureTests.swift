import Glibc
import KVCloud
import KVNetwork
import NIOCore
import NIOSSL
import Testing

/// The words and causes of connection failures: what a user reads instead of a library's
/// type names, and the cause the mount's errno follows.
@Suite("Connection failures in words")
struct NetworkFailureTests {
    @Test("each failure of a connection has its cause and words")
    func table() {
        let cases: [(any Error, Unreachability, String)] = [
            (IOError(errnoCode: ECONNREFUSED, reason: "connect"), .connectionRefused, "connection refused by h.example:8780"),
            (IOError(errnoCode: ECONNRESET, reason: "read"), .connectionLost, "the connection to h.example:8780 was reset"),
            (IOError(errnoCode: EHOSTUNREACH, reason: "connect"), .noRoute, "h.example:8780: no route to host"),
            (SocketAddressError.unknown(host: "h.example", port: 8780), .noRoute, "the name h.example was not resolved"),
            (ChannelError.connectTimeout(.seconds(10)), .timedOut, "no connection to h.example:8780 within 10 s"),
            (NIOSSLError.uncleanShutdown, .connectionLost, "the connection to h.example:8780 was closed in the middle of TLS"),
        ]
        for (error, cause, words) in cases {
            let failure = NetworkFailure(error, host: "h.example", port: 8780)
            #expect(failure?.cause == cause, "\(error)")
            #expect(failure?.description == words, "\(error)")
        }
    }

    @Test("an error that is not a connection's is left to its caller")
    func other() {
        struct Unrelated: Error {}
        #expect(NetworkFailure(Unrelated(), host: "h", port: 1) == nil)
    }

    @Test("the remote error says the remote cannot be reached, in the failure's words")
    func cloudError() {
        let failure = NetworkFailure(.connectionRefused, "connection refused by h:1")
        #expect(CloudError(failure) == .unreachable(.connectionRefused, "connection refused by h:1"))
        #expect(CloudError(failure).description == "the remote cannot be reached: connection refused by h:1")
    }
}
