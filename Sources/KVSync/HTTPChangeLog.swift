import AsyncHTTPClient
import Foundation
import KVCloud
import KVNetwork
import KVStore
import KVWire
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

/// A change log reached over HTTP: a `kvsfs serve` server (see its protocol in `SyncServer`).
/// `base` is `http(s)://host:port`, optionally followed by `/ACCOUNT`; without an account the
/// token's own account is asked for once. A store is one of that account's. 429 and 503
/// answers become `busy` with the server's Retry-After; 401 and 403 `notAuthorized`, but a
/// 403 marked as the store limit (`RefusalHeader`) `storeLimit`; 409 a history mismatch; 412
/// to a schema's condition `schemaMoved`;
/// connection failures `unavailable`; other refusals `refused`.
public final class HTTPChangeLog: ChangeLog {
    public let description: String
    private let base: String
    private let token: String
    private let client: HTTPClient
    private let identityStore: String?
    /// The account named in the URL, if any.
    private let account: String?
    private let scope = Mutex<WhoAmI?>(nil)
    /// Per store: the batch its event stream brought ahead of a fetch, and the stream.
    private let prefetched = Mutex<[String: Prefetched]>([:])
    private let streams = Mutex<[String: ChangeStream]>([:])

    /// `identityStore`: the store to ask the account's identity of (a mount's own, so that an
    /// answer names it); without one, the token's store, or any of the account's.
    public init(url: String, token: String, client: HTTPClient = HTTPChangeLog.client, identityStore: String? = nil) {
        description = url
        self.identityStore = identityStore
        var base = url
        while base.hasSuffix("/") { base.removeLast() }
        let parts = base.split(separator: "/", omittingEmptySubsequences: false)
        // scheme:, "", host:port, [account]
        if parts.count == 4 {
            account = String(parts[3])
            base = parts[0...2].joined(separator: "/")
        } else {
            account = nil
        }
        self.base = base
        self.token = token
        self.client = client
    }

    /// Asked of a store (see `identityStore`): each answers with the account's identity.
    public func identity() async throws(CloudError) -> String {
        let store = if let identityStore { identityStore } else { try await tokenScope().store ?? "default" }
        return try await request(.GET, storePath(store, .identity), as: IdentityResponse.self).identity
    }

    /// The server renews the account's generation by itself when a writer's request finds
    /// another history (see `SyncServer.checkingHistory`): nothing to ask for.
    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool { false }

    public func readOnlyReason(of store: String) async throws(CloudError) -> String? {
        let me = try await request(.GET, WirePath.whoAmI, as: WhoAmI.self)
        return me.readOnly ? "the token for \(description) may only read" : nil
    }

    /// One push, or several when the changes are more than the server takes in one
    /// (`WireLimits`): a device offline for long may have that many pending. Each carries the
    /// mark; a restore found out between two of them leaves the first ones stored (as a
    /// shorter push would have), and the pusher resynchronises.
    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        let path = try await storePath(store, .changes) + (mark.map { WireQuery.encode(mark: $0) } ?? "")
        let bodies: [[UInt8]]
        do {
            bodies = try encodePushes(changes)
        } catch {
            throw .refused("the changes cannot be sent: \(error)")
        }
        // Conditional changes are stored together or not at all: only within one push.
        if bodies.count > 1, changes.contains(where: { $0.condition != nil }) {
            throw .refused("the conditional changes are more than one push may carry (\(WireLimits.maximumChangesPerPush) changes, "
                           + "\(WireLimits.maximumPushBytes >> 20) MiB): make them in parts")
        }
        var outcomes: [PushResponse] = []
        for body in bodies {
            outcomes.append(try await request(.POST, path, body: Data(body), as: PushResponse.self))
        }
        return .joining(outcomes)
    }

    /// A batch the event stream brought is checked already: the stream was opened with the
    /// mark the caller had then, and everything it sends follows on from there.
    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        if let batch = takePrefetched(of: store, after: cursor, limit: limit) { return batch }
        return try await request(.GET, storePath(store, .changes) + WireQuery.encode(after: cursor, mark: mark, limit: limit),
                                 as: ChangesResponse.self)
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try await request(.GET, storePath(store, .cursor) + "?after=0", as: CursorResponse.self).cursor
    }

    public func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion] {
        try await request(.GET, storePath(store, .history) + WireQuery.encode(key: key), as: HistoryResponse.self).versions
    }

    public func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion? {
        try await request(.GET, storePath(store, .history) + WireQuery.encode(key: key, version: version),
                          as: VersionResponse.self).version
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try await request(.GET, storePath(store, .schema), as: SchemaResponse.self)
    }

    /// A read-only token is refused (`notAuthorized`), as its push would be.
    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        let path = try await storePath(store, .schema) + WireQuery.encode(ifVersion: ifVersion)
        if let text {
            return try await request(.PUT, path, body: Data(text), contentType: "application/octet-stream", as: SchemaResponse.self)
        }
        return try await request(.DELETE, path, as: SchemaResponse.self)
    }

    /// The next batch of the server's event stream for the store (opened from `cursor`, and
    /// opened again whenever the caller's cursor is not where the stream has got to). The batch
    /// is kept for the fetch that follows, so that a change costs the mount no request at all.
    /// False after a keep-alive (every 10 s) with no change, after `timeout`, or once the
    /// waiting task is cancelled.
    ///
    /// The time counts from when the stream is open: a server slow to answer is waited for,
    /// not asked again every `timeout` (each opening costs it a history check).
    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        let stream: ChangeStream
        do {
            stream = try await changeStream(of: store, from: cursor, mark: mark)
        } catch {
            if Task.isCancelled { return false }
            throw error
        }
        // A keep-alive (an empty batch, every 10 s of quiet) is not a change: wait on until the
        // time is up.
        let deadline = ContinuousClock.now + timeout
        var next: ChangeBatch?
        repeat {
            do {
                next = try await withThrowingTaskGroup(of: ChangeBatch?.self) { group in
                    group.addTask { try await stream.next() }
                    group.addTask {
                        try await Task.sleep(until: deadline, clock: .continuous)
                        return nil
                    }
                    defer { group.cancelAll() }
                    return try await group.next() ?? nil
                }
            } catch let error as CloudError where !Task.isCancelled {
                throw error
            } catch {
                // Cancelled: the waiter gave up.
                return false
            }
        } while next?.changes.isEmpty == true
        guard let batch = next else { return false }
        prefetched.withLock { $0[store] = Prefetched(after: cursor, batch: batch, at: .now) }
        return true
    }

    private func changeStream(of store: String, from cursor: Int64, mark: HistoryMark?) async throws(CloudError) -> ChangeStream {
        if let open = streams.withLock({ $0[store] }), open.position == cursor, !open.isFinished { return open }
        let path = try await storePath(store, .events) + WireQuery.encode(after: cursor, mark: mark)
        let opened = try await ChangeStream(response: send(.GET, path, timeout: .hours(24 * 365)),
                                            from: cursor, base: base)
        streams.withLock { $0[store] = opened }
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
        prefetched.withLock { $0 = [:] }
    }

    private func takePrefetched(of store: String, after cursor: Int64, limit: Int) -> ChangeBatch? {
        prefetched.withLock { prefetched in
            guard let kept = prefetched.removeValue(forKey: store), kept.after == cursor, kept.batch.changes.count <= limit,
                  ContinuousClock.now - kept.at < .seconds(1) else { return nil }
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
            throw CloudError.refused("cannot read the CA certificate \(caFile): it is not a file of PEM certificates")
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

    private func storePath(_ store: String, _ resource: WirePath.StoreResource) async throws(CloudError) -> String {
        if let known = account { return WirePath.store(account: known, store: store, resource) }
        return WirePath.store(account: try await tokenScope().account, store: store, resource)
    }

    /// What the token reaches, asked once: a token's scope never changes (a revoked one is
    /// refused instead).
    private func tokenScope() async throws(CloudError) -> WhoAmI {
        if let known = scope.withLock({ $0 }) { return known }
        let me = try await request(.GET, WirePath.whoAmI, as: WhoAmI.self)
        scope.withLock { $0 = me }
        return me
    }

    private func request<T: Decodable>(_ method: HTTPMethod, _ path: String, body: Data? = nil,
                                       contentType: String = "application/json", as type: T.Type,
                                       timeout: TimeAmount = .seconds(30)) async throws(CloudError) -> T {
        let response = try await send(method, path, body: body, contentType: contentType, timeout: timeout)
        let data: Data
        do {
            data = try await ResponseBody.collect(response, upTo: 64 << 20, within: timeout)
        } catch is ResponseBody.TimedOut {
            throw .unreachable(.timedOut, "\(base) did not send the whole answer within \(NetworkFailure.seconds(timeout))")
        } catch {
            throw TransportFailure.cloudError(error, base: base)
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch {
            throw .notProtocol("\(base)\(path) sent an answer that is not the protocol's")
        }
    }

    /// Sends a request and returns a 200 response whose body is still to read; other answers
    /// become the `CloudError` they mean.
    private func send(_ method: HTTPMethod, _ path: String, body: Data? = nil, contentType: String = "application/json",
                      timeout: TimeAmount) async throws(CloudError) -> HTTPClientResponse {
        var request = HTTPClientRequest(url: base + path)
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        if let body {
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .bytes(ByteBuffer(bytes: Array(body)))
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: timeout)
        } catch {
            throw TransportFailure.cloudError(error, base: base)
        }
        guard response.status == .ok else {
            // The refusal's words are the server's, and the server is not trusted: they are read
            // within the request's time, at most 64 KiB, and kept as one line of at most 1000
            // characters (`ServerWords`) wherever they go: stderr, xattrs, the event log.
            let body = await ServerWords.body(of: response, within: timeout)
            let said = (try? JSONDecoder().decode(ErrorResponse.self, from: body).error.message) ?? response.status.reasonPhrase
            let message = ServerWords.line(said)
            switch response.status {
            case .tooManyRequests, .serviceUnavailable:
                let after = ServerWords.retryAfter(response.headers.first(name: "Retry-After"))
                throw .busy(retryAfter: after, "\(response.status.code) \(message)")
            case .forbidden where response.headers.first(name: RefusalHeader.name) == RefusalHeader.storeLimit:
                throw .storeLimit(message)
            case .unauthorized, .forbidden:
                throw .notAuthorized(message)
            case .conflict:
                throw .historyMismatch(message)
            case .preconditionFailed:
                guard let current = response.headers.first(name: RefusalHeader.schemaVersion).flatMap({ Int64($0) }) else {
                    throw .refused("\(response.status.code) \(message)")
                }
                throw .schemaMoved(current: current)
            default:
                throw .refused("\(response.status.code) \(message)")
            }
        }
        return response
    }
}
