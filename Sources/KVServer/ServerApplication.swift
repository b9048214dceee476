import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore

extension SyncServer {
    /// How long a connection may go without a whole request by default (see `application`).
    public static let defaultIdleTimeout = Duration.seconds(30)

    /// The HTTP (or, given a certificate, HTTPS) application serving this server on host:port.
    ///
    /// A connection is closed once `idleTimeout` passes with no request in progress and none
    /// arriving, or while a request's head or body stops coming (a client that sends half a
    /// request holds no socket for long). The clock stops once a request has arrived whole and
    /// starts again when its answer ends: a long poll or an event stream is never cut.
    /// `listening` runs once the server accepts connections.
    public func application(host: String, port: Int, certificate: ServerCertificate?,
                            idleTimeout: Duration = defaultIdleTimeout, logger: Logger,
                            listening: @escaping @Sendable () -> Void = {}) throws -> some ApplicationProtocol {
        let http1 = HTTPServerBuilder.http1(configuration: .init(idleTimeout: TimeAmount(idleTimeout)))
        let builder: HTTPServerBuilder = if let certificate {
            try .tls(http1, tlsConfiguration: certificate.tlsConfiguration())
        } else {
            http1
        }
        return Application(
            router: makeRouter(), server: builder,
            // Mounts reconnect together after a restart or a network fault: thousands of
            // connections may wait to be accepted at once (the kernel caps it at somaxconn).
            configuration: .init(address: .hostname(host, port: port), serverName: "kvsfs", backlog: 4096),
            onServerRunning: { _ in listening() },
            logger: logger)
    }
}

/// A certificate chain and its private key, PEM files, for HTTPS.
public struct ServerCertificate: Sendable {
    public var certificatePath: String
    public var keyPath: String

    public init(certificatePath: String, keyPath: String) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
    }

    /// Reads both files; a clear error when either is missing or not PEM.
    func tlsConfiguration() throws -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
        } catch {
            throw ServerSetupError("cannot read the certificate \(certificatePath): \(error)")
        }
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw ServerSetupError("cannot read the private key \(keyPath): \(error)")
        }
        guard !chain.isEmpty else { throw ServerSetupError("no certificate in \(certificatePath)") }
        return TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
    }
}

public struct ServerSetupError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
