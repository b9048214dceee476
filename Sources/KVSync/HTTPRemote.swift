import AsyncHTTPClient
import Foundation
import KVCloud
import KVStore
import KVWire
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// A remote reached over HTTP: a `kvsfs serve` server (see its protocol in `SyncServer`).
/// `base` is `http(s)://host:port`, optionally followed by `/ACCOUNT`; without an account the
/// token's own account is asked for once. 429 and 503 answers become `retryLater` with the
/// server's Retry-After; 401 and 403 `authorizationRefused`; connection failures
/// `unreachable`; other refusals `refused`.
public final class HTTPRemote: Remote {
    public let description: String
    private let base: String
    private let store: String
    private let token: String
    private let client: HTTPClient
    private let account: Mutex<String?>
    private let prefetched = Mutex<Prefetched?>(nil)
    private let stream = Mutex<ChangeStream?>(nil)

    public init(url: String, store: String, token: String, client: HTTPClient = HTTPRemote.client) {
        description = url
        var base = url
        while base.hasSuffix("/") { base.removeLast() }
        let parts = base.split(separator: "/", omittingEmptySubsequences: false)
        // scheme:, "", host:port, [account]
        if parts.count == 4 {
            account = Mutex(String(parts[3]))
            base = parts[0...2].joined(separator: "/")
        } else {
            account = Mutex(nil)
        }
        self.base = base
        self.store = store
        self.token = token
        self.client = client
    }

    public func identity() async throws -> String {
        try await request(.GET, storePath(.identity), as: IdentityResponse.self).identity
    }

    public func readOnlyReason() async throws -> String? {
        let me = try await request(.GET, WirePath.whoAmI, as: WhoAmI.self)
        return me.readOnly ? "the token for \(description) may only read" : nil
    }

    /// One push, or several when the changes are more than the server takes in one
    /// (`WireLimits`): a device offline for long may have that many pending.
    public func push(_ changes: [StampedChange], mark: HistoryMark?) async throws -> PushOutcome {
        let path = try await storePath(.changes) + (mark.map { WireQuery.encode(mark: $0) } ?? "")
        var outcomes: [PushResponse] = []
        for body in try encodePushes(changes) {
            outcomes.append(try await request(.POST, path, body: Data(body), as: PushResponse.self))
        }
        return .joining(outcomes)
    }

    /// A batch the event stream brought is checked already: the stream was opened with the
    /// mark the caller had then, and everything it sends follows on from there.
    public func fetch(after cursor: Int64, mark: HistoryMark?) async throws -> ChangeBatch {
        if let batch = takePrefetched(after: cursor) { return batch }
        return try await request(.GET, storePath(.changes) + WireQuery.encode(after: cursor, mark: mark, limit: 4096),
                                 as: ChangesResponse.self)
    }

    /// The next batch of the server's event stream for this store (opened from `cursor`, and
    /// opened again whenever the caller's cursor is not where the stream has got to). The batch
    /// is kept for the fetch that follows, so that a change costs the mount no request at all.
    /// False after a keep-alive (every 10 s) with no change.
    public func waitForChanges(after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws -> Bool {
        let stream = try await changeStream(from: cursor, mark: mark)
        guard let batch = try await stream.next(), !batch.changes.isEmpty else { return false }
        prefetched.withLock { $0 = Prefetched(after: cursor, batch: batch, at: .now) }
        return true
    }

    private func changeStream(from cursor: Int64, mark: HistoryMark?) async throws -> ChangeStream {
        if let open = stream.withLock({ $0 }), open.position == cursor, !open.isFinished { return open }
        let path = try await storePath(.events) + WireQuery.encode(after: cursor, mark: mark)
        let opened = try await ChangeStream(response: send(.GET, path, timeout: .hours(24 * 365)),
                                            from: cursor, base: base)
        stream.withLock { $0 = opened }
        return opened
    }

    /// Changes the event stream brought, good for a fetch from the same cursor within a second
    /// (a batch that is a little old is still every change after the cursor up to its own).
    private struct Prefetched {
        var after: Int64
        var batch: ChangeBatch
        var at: ContinuousClock.Instant
    }

    public func discardPrefetched() {
        prefetched.withLock { $0 = nil }
    }

    private func takePrefetched(after cursor: Int64) -> ChangeBatch? {
        prefetched.withLock { prefetched in
            defer { prefetched = nil }
            guard let kept = prefetched, kept.after == cursor, ContinuousClock.now - kept.at < .seconds(1) else { return nil }
            return kept.batch
        }
    }

    /// The process's client: a connection that cannot be made fails the request at once (the
    /// sync engine retries with its own backoff), instead of being retried until a deadline.
    public static let client = makeClient()

    /// A client like `client` that also trusts the CA certificates in `caFile` (PEM) for
    /// https remotes, besides the system's. Like `client`, it lives as long as the process.
    public static func client(trusting caFile: String) throws -> HTTPClient {
        do {
            _ = try NIOSSLCertificate.fromPEMFile(caFile)
        } catch {
            throw RemoteError.refused("cannot read the CA certificate \(caFile): \(error)")
        }
        return trustingClients.withLock { clients in
            if let client = clients[caFile] { return client }
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.file(caFile)]
            let client = makeClient(tls: tls)
            clients[caFile] = client
            return client
        }
    }

    private static let trustingClients = Mutex<[String: HTTPClient]>([:])

    private static func makeClient(tls: TLSConfiguration? = nil) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(5)
        // Below the server's idle timeout (30 s by default): the client lets a pooled connection
        // go before the server closes it, rather than sending a request just as it does.
        configuration.connectionPool.idleTimeout = .seconds(20)
        if let tls { configuration.tlsConfiguration = tls }
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    private func storePath(_ resource: WirePath.StoreResource) async throws -> String {
        if let known = account.withLock({ $0 }) { return WirePath.store(account: known, store: store, resource) }
        let me = try await request(.GET, WirePath.whoAmI, as: WhoAmI.self)
        account.withLock { $0 = me.account }
        return WirePath.store(account: me.account, store: store, resource)
    }

    private func request<T: Decodable>(_ method: HTTPMethod, _ path: String, body: Data? = nil, as type: T.Type,
                                       timeout: TimeAmount = .seconds(30)) async throws -> T {
        let response = try await send(method, path, body: body, timeout: timeout)
        let data: Data
        do {
            data = Data(try await response.body.collect(upTo: 64 << 20).readableBytesView)
        } catch {
            throw RemoteError.unreachable("\(base): \(error)")
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch {
            throw RemoteError.unreachable("\(base)\(path): an answer that is not the protocol's: \(error)")
        }
    }

    /// Sends a request and returns a 200 response whose body is still to read; other answers
    /// become the `RemoteError` they mean.
    private func send(_ method: HTTPMethod, _ path: String, body: Data? = nil, timeout: TimeAmount) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: Array(body)))
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: timeout)
        } catch {
            throw RemoteError.unreachable("\(base): \(error)")
        }
        guard response.status == .ok else {
            let data = Data((try? await response.body.collect(upTo: 1 << 20))?.readableBytesView ?? ByteBuffer().readableBytesView)
            let message = (try? JSONDecoder().decode(ErrorResponse.self, from: data).error.message) ?? response.status.reasonPhrase
            switch response.status {
            case .tooManyRequests, .serviceUnavailable:
                let after = response.headers.first(name: "Retry-After").flatMap { Int64($0) }.map { Duration.seconds($0) }
                throw RemoteError.retryLater(after: after, "\(response.status.code) \(message)")
            case .unauthorized, .forbidden:
                throw RemoteError.authorizationRefused(message)
            case .conflict:
                throw RemoteError.historyMismatch(message)
            default:
                throw RemoteError.refused("\(response.status.code) \(message)")
            }
        }
        return response
    }
}
