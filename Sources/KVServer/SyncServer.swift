import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import KVCloud
import KVStore
import KVWire
import Logging
import NIOCore
import Synchronization

/// The sync server's HTTP interface over cloud storage and accounts. Every route but
/// `/health` needs `Authorization: Bearer TOKEN`; a store is addressed as ACCOUNT/STORE and
/// kept in the storage as `ACCOUNT.STORE`. Bodies are JSON; errors are 4xx/5xx with
/// `{"error":{"message":...}}`.
///
///     GET  /health                                   200 ok
///     GET  /metrics                                  Prometheus text (no token needed)
///     GET  /v1/whoami                                {"account","store","readOnly"} of the token
///     GET  /v1/ACCOUNT/STORE/identity                {"identity"}: the account's remote id
///     POST /v1/ACCOUNT/STORE/changes[?mark=M&mark-key=K]
///                                                    {"changes":[...]} -> {"accepted","refused"}
///     GET  /v1/ACCOUNT/STORE/changes?after=N[&mark=M&mark-key=K]&limit=L[&wait=S]
///                                                    {"changes","cursor","complete"}; with wait, a
///                                                    long poll: when there are none yet, answers
///                                                    when a change lands or after S seconds (≤ 60)
///     GET  /v1/ACCOUNT/STORE/cursor?after=N&wait=S   {"cursor"}, at once if past N, else the same
///     GET  /v1/ACCOUNT/STORE/events?after=N[&mark=M&mark-key=K]
///                                                    text/event-stream: `id: CURSOR` and
///                                                    `data: {changes,cursor,complete}` for every
///                                                    batch after N as it lands, `: keep-alive`
///                                                    every 10 s; the token is looked up again
///                                                    at most once a second, before an event or
///                                                    comment, so a revoked one ends it
///
/// A reader that sends its history mark (`HistoryMark`: a change it knows the store accepted,
/// M its `position` and K its key) gets 409 when the store's row for that key does not fit
/// it, as when `after` is past the store's newest change: the store's history is not the one
/// the reader saw.
public struct SyncServer: Sendable {
    public let storage: any ServerStorage
    public let accounts: AccountDirectory
    public let notifier = ChangeNotifier()
    public let metrics = ServerMetrics()
    public let limiter: RateLimiter
    /// The last event written for each store, for the other streams at the same cursor.
    private let recentEvents = RecentEvents()
    private let renewals = IdentityRenewals()
    private let logger = Logger(label: "kvsfs.serve")

    /// `rateLimit`: requests per second per token (0: none).
    public init(storage: any ServerStorage, rateLimit: Double = 0) {
        self.storage = storage
        accounts = AccountDirectory(storage: storage.accounts)
        limiter = RateLimiter(rate: rateLimit)
    }

    /// Wakes this server's long polls for changes pushed through other servers sharing the
    /// storage; runs until the task is cancelled.
    public func followOtherServers() async {
        await storage.followChanges({ notifier.notify($0) }, resync: { notifier.notifyAll() })
    }

    public func makeRouter() -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: MetricsMiddleware(metrics: metrics))
        router.get(RouterPath(WirePath.health)) { _, _ in "ok\n" }
        router.get(RouterPath(WirePath.metrics)) { _, _ -> Response in
            metrics.watchers.set(Double(notifier.waiting))
            let text = metrics.registry.emitToBuffer()
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                            body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        router.get(RouterPath(WirePath.whoAmI)) { request, _ -> Response in
            let scope = try await authorize(request)
            return try json(WhoAmI(account: scope.account, store: scope.store, readOnly: scope.readOnly))
        }
        router.get(RouterPath(WirePath.pattern(.identity))) { request, context -> Response in
            let (_, _) = try await address(request, context, write: false)
            let account = try context.parameters.require("account")
            // The account's generation follows once it was first renewed (a restore found out).
            let identity = try await run { try await storage.identity() } + "/" + account
            let generation = try await run { try await storage.generation(of: account) }
            return try json(IdentityResponse(identity: identity + (generation.map { "/" + $0 } ?? "")))
        }
        router.post(RouterPath(WirePath.pattern(.changes))) { request, context -> Response in
            let (stored, scope) = try await address(request, context, write: true)
            let mark = try wire { () throws(WireError) in try WireQuery(request.uri.query).mark() }
            let body = try await request.body.collect(upTo: WireLimits.maximumPushBytes)
            let push = try wire { () throws(WireError) in try decodePush(Array(body.readableBytesView)) }
            // Nothing goes into a history that is not the pusher's: it resynchronises first.
            if let mark { try await checkHistory(of: stored, after: 0, mark: mark, scope: scope) }
            let outcome = try await run { try await storage.push(push.changes, to: stored) }
            if !outcome.accepted.isEmpty { notifier.notify(stored) }
            metrics.pushes.increment()
            metrics.accepted.increment(by: Int64(outcome.accepted.count))
            metrics.refused.increment(by: Int64(outcome.refused.count))
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for change in outcome.accepted {
                let (delay, overflow) = now.subtractingReportingOverflow(change.stamp.time)
                metrics.changeDelay.record(.milliseconds(overflow ? 0 : max(0, delay)))
            }
            return try json(outcome as PushResponse)
        }
        router.get(RouterPath(WirePath.pattern(.changes))) { request, context -> Response in
            let (stored, scope) = try await address(request, context, write: false)
            let query = WireQuery(request.uri.query)
            let (after, mark, limit) = try wire { () throws(WireError) in (try query.after(), try query.mark(), try query.limit()) }
            try await checkHistory(of: stored, after: after, mark: mark, scope: scope)
            let batch = try await longPoll(stored, query, until: { !$0.changes.isEmpty }) {
                try await storage.changes(in: stored, after: after, limit: limit)
            }
            return try json(batch as ChangesResponse)
        }
        router.get(RouterPath(WirePath.pattern(.events))) { request, context -> Response in
            let (stored, scope) = try await address(request, context, write: false)
            let query = WireQuery(request.uri.query)
            let (after, mark) = try wire { () throws(WireError) in (try query.after(), try query.mark()) }
            let token = try bearerToken(request)
            // A stream from another history is refused before it starts, as a fetch is.
            try await checkHistory(of: stored, after: after, mark: mark, scope: scope)
            return Response(
                status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
                body: ResponseBody { writer in
                    try await streamChanges(of: stored, after: after, while: { await stillAllowed(token, scope) }, to: &writer)
                })
        }
        router.get(RouterPath(WirePath.pattern(.cursor))) { request, context -> Response in
            let (stored, _) = try await address(request, context, write: false)
            let query = WireQuery(request.uri.query)
            let after = try wire { () throws(WireError) in try query.after() }
            let cursor = try await longPoll(stored, query, until: { $0 > after }) { try await storage.cursor(of: stored) }
            return try json(CursorResponse(cursor: cursor))
        }
        return router
    }

    // MARK: - Requests

    /// How long an event stream goes on trusting its token before it looks it up again.
    static let streamTokenRecheck = Duration.seconds(1)

    /// Writes every batch of changes after `cursor` as an event as soon as it lands, and a
    /// comment every 10 s so that a dead connection is found; ends when `allowed` turns false
    /// (a revoked token), at shutdown, or when the client goes away (a write fails).
    private func streamChanges(of store: String, after cursor: Int64, while allowed: () async -> Bool,
                               to writer: inout any ResponseBodyWriter) async throws {
        var cursor = cursor
        // The request was authorized just now. Looking the token up again before every event
        // cost each stream a database read per change; once a second is enough for a revoke to
        // end the stream promptly.
        var checked = ContinuousClock.now
        while !notifier.isClosed {
            if ContinuousClock.now - checked >= Self.streamTokenRecheck {
                guard await allowed() else { break }
                checked = .now
            }
            let seen = notifier.version(of: store)
            if let (event, upTo) = recentEvents.event(of: store, after: cursor) {
                try await writer.write(event)
                cursor = upTo
                continue
            }
            let batch = try await run { try await storage.changes(in: store, after: cursor, limit: 4096) }
            if !batch.changes.isEmpty {
                var event = ByteBuffer(string: "id: \(batch.cursor)\ndata: ")
                event.writeBytes(try JSONEncoder().encode(batch))
                event.writeString("\n\n")
                recentEvents.keep(event, of: store, after: cursor, upTo: batch.cursor)
                try await writer.write(event)
                cursor = batch.cursor
                continue
            }
            await notifier.wait(for: store, since: seen, timeout: .seconds(10))
            // Nothing landed: the wait timed out.
            if notifier.version(of: store) == seen { try await writer.write(ByteBuffer(string: ": keep-alive\n\n")) }
        }
        try await writer.finish(nil)
    }

    private func stillAllowed(_ token: String, _ scope: TokenScope) async -> Bool {
        (try? await accounts.stillActiveScope(of: token)) == scope
    }

    /// The request's bearer token; 401, with the reason and a challenge, when there is none.
    private func bearerToken(_ request: Request) throws -> String {
        let header = request.headers[.authorization]
        if let token = KVWire.bearerToken(fromAuthorization: header) { return token }
        throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"],
                        message: header == nil ? "missing Authorization: Bearer TOKEN"
                                               : "the Authorization header is not Bearer and a token")
    }

    /// Looks at the storage; when the request asks to `wait` (seconds, at most 60) and what it
    /// found is not `ready`, waits for the store's next change (or the time) and looks again.
    private func longPoll<T>(_ store: String, _ query: WireQuery, until ready: (T) -> Bool,
                             _ look: () async throws -> T) async throws -> T {
        let wait = try wire { () throws(WireError) in try query.wait() }
        let seen = notifier.version(of: store)
        let found = try await run(look)
        guard wait > 0, !ready(found) else { return found }
        await notifier.wait(for: store, since: seen, timeout: .seconds(wait))
        return try await run(look)
    }

    private func authorize(_ request: Request) async throws -> TokenScope {
        let token = try bearerToken(request)
        let scope: TokenScope?
        do {
            scope = try await accounts.scope(of: token)
        } catch {
            throw unavailable(error)
        }
        guard let scope else {
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"], message: "unknown or revoked token")
        }
        if let wait = limiter.admit(token) {
            let seconds = max(1, Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up)))
            throw HTTPError(.tooManyRequests, headers: [.retryAfter: String(seconds)], message: "rate limited: retry in \(seconds) s")
        }
        return scope
    }

    /// The storage name of the addressed store, once the token may use it.
    private func address(_ request: Request, _ context: BasicRequestContext, write: Bool) async throws -> (String, TokenScope) {
        let scope = try await authorize(request)
        let account = try context.parameters.require("account")
        let store = try context.parameters.require("store")
        guard AccountDirectory.isValidName(account), StoreLocation.isValidStoreID(store) else {
            throw HTTPError(.notFound, message: "no store \(account)/\(store)")
        }
        guard scope.canRead(account: account, store: store) else {
            throw HTTPError(.forbidden, message: "this token does not reach \(account)/\(store)")
        }
        if write, !scope.canWrite(account: account, store: store) {
            throw HTTPError(.forbidden, message: "this token may only read \(account)/\(store)")
        }
        return ("\(account).\(store)", scope)
    }

    /// A refusal of the request's form as HTTP: 413 for a body over the limit, else 400, with
    /// the reason. (A push is refused whole when malformed; quotas are judged per change by
    /// the storage.)
    private func wire<T>(_ read: () throws(WireError) -> T) throws -> T {
        do {
            return try read()
        } catch {
            if case .bodyTooLarge = error { throw HTTPError(.contentTooLarge, message: error.description) }
            throw HTTPError(.badRequest, message: error.description)
        }
    }

    /// 409 unless the store's history is the one a reader saw: it reaches `after`, and its row
    /// for the mark's key fits the mark. Then the account's other mounts must resynchronise too
    /// (their own marks may not show it): the server renews the account's generation, part of
    /// the identity they look at. Only for a token that may write the store (a reader cannot
    /// make others work), and at most once per `identityRenewalInterval` per account (one
    /// restore needs one renewal).
    private func checkHistory(of store: String, after: Int64, mark: HistoryMark?, scope: TokenScope) async throws {
        do {
            let newest = try await storage.cursor(of: store)
            if after > newest { throw CloudError.cursorAhead(asked: after, store: newest) }
            if let mark { try mark.check(newest: newest, held: try await storage.mark(in: store, key: mark.key)) }
        } catch let error as CloudError where error.isHistoryMismatch {
            if !scope.readOnly, renewals.mayRenew(scope.account, now: .now, every: Self.identityRenewalInterval) {
                do {
                    try await storage.renewGeneration(of: scope.account)
                    logger.warning("a client saw another history than this one; the account's generation is renewed",
                                   metadata: ["store": "\(store)", "reason": "\(error)"])
                } catch {
                    logger.error("a client saw another history, and the account's generation could not be renewed",
                                 metadata: ["error": "\(error)"])
                }
            }
            throw HTTPError(.conflict, message: error.description)
        } catch {
            try await run { throw error }
        }
    }

    static let identityRenewalInterval = Duration.seconds(600)

    /// Storage failures as HTTP: a bad store name is 404, a history that is not the reader's
    /// 409 (the client resynchronises), anything else 503 with Retry-After.
    private func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch CloudError.invalidStoreName(let name) {
            throw HTTPError(.notFound, message: "no store \(name)")
        } catch let error as CloudError {
            // The client saw a history this store no longer has: it must resynchronise.
            guard error.isHistoryMismatch else { throw unavailable(error) }
            throw HTTPError(.conflict, message: error.description)
        } catch {
            throw unavailable(error)
        }
    }

    /// 503 with Retry-After: the details (which name the database) go to the log, not to
    /// the client.
    private func unavailable(_ error: any Error) -> HTTPError {
        logger.error("storage unavailable", metadata: ["error": "\(error)"])
        return HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "the server's storage is unavailable; retry later")
    }

    private func json(_ value: some Encodable) throws -> Response {
        let data = try JSONEncoder().encode(value)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: data)))
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
            configuration: .init(address: .hostname(host, port: port), serverName: "kvsfs"),
            onServerRunning: { _ in listening() },
            logger: logger)
    }
}

/// The last event of each store's stream, encoded once for every stream at the same cursor (a
/// store's devices wake together, at the same place). An event kept a while is still right:
/// it holds every change after its cursor up to its own, and the stream then reads on from there.
final class RecentEvents: Sendable {
    private struct Event {
        var after: Int64
        var upTo: Int64
        var bytes: ByteBuffer
    }

    private let events = Mutex<[String: Event]>([:])

    func event(of store: String, after cursor: Int64) -> (ByteBuffer, upTo: Int64)? {
        events.withLock { events in
            guard let event = events[store], event.after == cursor else { return nil }
            return (event.bytes, event.upTo)
        }
    }

    /// Keeps events of at most 64 KiB, for at most 4096 stores (any one makes room).
    func keep(_ bytes: ByteBuffer, of store: String, after cursor: Int64, upTo: Int64) {
        guard bytes.readableBytes <= 64 << 10 else { return }
        events.withLock { events in
            if events.count >= 4096, events[store] == nil, let any = events.keys.first { events[any] = nil }
            events[store] = Event(after: cursor, upTo: upTo, bytes: bytes)
        }
    }
}

/// When the server last renewed each account's generation, so that renewals stay rare
/// whatever clients send (one entry per account that ever had one).
final class IdentityRenewals: Sendable {
    private let last = Mutex<[String: ContinuousClock.Instant]>([:])

    /// Whether `account`'s generation may be renewed now; if so, it counts as done.
    func mayRenew(_ account: String, now: ContinuousClock.Instant, every interval: Duration) -> Bool {
        last.withLock { last in
            if let previous = last[account], now - previous < interval { return false }
            last[account] = now
            return true
        }
    }
}
