import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import KVCloud
import KVStore
import Logging
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
///     POST /v1/ACCOUNT/STORE/changes                 {"changes":[...]} -> {"accepted","refused"}
///     GET  /v1/ACCOUNT/STORE/changes?after=N&limit=L[&wait=S]
///                                                    {"changes","cursor","complete"}; with wait, a
///                                                    long poll: when there are none yet, answers
///                                                    when a change lands or after S seconds (≤ 60)
///     GET  /v1/ACCOUNT/STORE/cursor?after=N&wait=S   {"cursor"}, at once if past N, else the same
///     GET  /v1/ACCOUNT/STORE/events?after=N          text/event-stream: `id: CURSOR` and
///                                                    `data: {changes,cursor,complete}` for every
///                                                    batch after N as it lands, `: keep-alive`
///                                                    every 10 s; the token is looked up again
///                                                    at most once a second, before an event or
///                                                    comment, so a revoked one ends it
public struct SyncServer: Sendable {
    public let storage: any ServerStorage
    public let accounts: AccountDirectory
    public let notifier = ChangeNotifier()
    public let metrics = ServerMetrics()
    public let limiter: RateLimiter
    /// The last event written for each store, for the other streams at the same cursor.
    private let recentEvents = RecentEvents()
    private let logger = Logger(label: "kvsfs.serve")
    /// Largest request body accepted.
    public var maximumBody = 4 << 20

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
        router.get("/health") { _, _ in "ok\n" }
        router.get("/metrics") { _, _ -> Response in
            metrics.watchers.set(Double(notifier.waiting))
            let text = metrics.registry.emitToBuffer()
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                            body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        router.get("/v1/whoami") { request, _ -> Response in
            let scope = try await authorize(request)
            return try json(WhoAmI(account: scope.account, store: scope.store, readOnly: scope.readOnly))
        }
        router.get("/v1/{account}/{store}/identity") { request, context -> Response in
            let (_, _) = try await address(request, context, write: false)
            let account = try context.parameters.require("account")
            return try json(["identity": try await run { try await storage.identity() } + "/" + account])
        }
        router.post("/v1/{account}/{store}/changes") { request, context -> Response in
            let (stored, _) = try await address(request, context, write: true)
            let body = try await request.body.collect(upTo: maximumBody)
            let push: PushRequest
            do {
                push = try JSONDecoder().decode(PushRequest.self, from: Data(buffer: body))
            } catch {
                throw HTTPError(.badRequest, message: "the body is not a push: \(error)")
            }
            try validate(push.changes)
            let outcome = try await run { try await storage.push(push.changes, to: stored) }
            if !outcome.accepted.isEmpty { notifier.notify(stored) }
            metrics.pushes.increment()
            metrics.accepted.increment(by: Int64(outcome.accepted.count))
            metrics.refused.increment(by: Int64(outcome.refused.count))
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for change in push.changes { metrics.changeDelay.record(.milliseconds(max(0, now - change.stamp.time))) }
            return try json(outcome)
        }
        router.get("/v1/{account}/{store}/changes") { request, context -> Response in
            let (stored, _) = try await address(request, context, write: false)
            let after = try number(request, "after", default: 0)
            let limit = Int(try number(request, "limit", default: 1000))
            guard (1...10_000).contains(limit) else { throw HTTPError(.badRequest, message: "limit must be 1 to 10000") }
            let batch = try await longPoll(stored, request, until: { !$0.changes.isEmpty }) {
                try await storage.changes(in: stored, after: after, limit: limit)
            }
            return try json(batch)
        }
        router.get("/v1/{account}/{store}/events") { request, context -> Response in
            let (stored, scope) = try await address(request, context, write: false)
            let after = try number(request, "after", default: 0)
            let token = bearerToken(request)
            return Response(
                status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
                body: ResponseBody { writer in
                    try await streamChanges(of: stored, after: after, while: { await stillAllowed(token, scope) }, to: &writer)
                })
        }
        router.get("/v1/{account}/{store}/cursor") { request, context -> Response in
            let (stored, _) = try await address(request, context, write: false)
            let after = try number(request, "after", default: 0)
            let cursor = try await longPoll(stored, request, until: { $0 > after }) { try await storage.cursor(of: stored) }
            return try json(["cursor": cursor])
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

    private func bearerToken(_ request: Request) -> String {
        String((request.headers[.authorization] ?? "").dropFirst("Bearer ".count))
    }

    /// Looks at the storage; when the request asks to `wait` (seconds, at most 60) and what it
    /// found is not `ready`, waits for the store's next change (or the time) and looks again.
    private func longPoll<T>(_ store: String, _ request: Request, until ready: (T) -> Bool,
                             _ look: () async throws -> T) async throws -> T {
        let wait = try number(request, "wait", default: 0)
        guard (0...60).contains(wait) else { throw HTTPError(.badRequest, message: "wait must be 0 to 60 seconds") }
        let seen = notifier.version(of: store)
        let found = try await run(look)
        guard wait > 0, !ready(found) else { return found }
        await notifier.wait(for: store, since: seen, timeout: .seconds(wait))
        return try await run(look)
    }

    private func authorize(_ request: Request) async throws -> TokenScope {
        guard let header = request.headers[.authorization] else {
            throw HTTPError(.unauthorized, message: "missing Authorization: Bearer TOKEN")
        }
        let token = bearerToken(request)
        let scope: TokenScope?
        do {
            scope = header.hasPrefix("Bearer ") ? try await accounts.scope(of: token) : nil
        } catch {
            throw unavailable(error)
        }
        guard let scope else {
            throw HTTPError(.unauthorized, message: "unknown or revoked token")
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

    /// Refuses the whole push when a change is malformed: a bad key, a value that is not a
    /// property list of its type. (Quotas are judged per change by the storage.)
    private func validate(_ changes: [StampedChange]) throws {
        for change in changes {
            guard !change.key.isEmpty, change.key.utf8.count <= 1024, !change.stamp.device.isEmpty else {
                throw HTTPError(.badRequest, message: "a change has an invalid key or stamp")
            }
            guard let value = change.value else {
                if change.type != nil { throw HTTPError(.badRequest, message: "\(change.key): a tombstone has no type") }
                continue
            }
            guard let decoded = try? PropertyListCodec.decode([UInt8](value)), decoded.type == change.type else {
                throw HTTPError(.badRequest, message: "\(change.key): the value is not a property list of type \(change.type?.rawValue ?? "none")")
            }
        }
    }

    private func number(_ request: Request, _ name: String, default value: Int64) throws -> Int64 {
        guard let text = request.uri.queryParameters.get(name) else { return value }
        guard let number = Int64(text), number >= 0 else { throw HTTPError(.badRequest, message: "\(name) must be a whole number") }
        return number
    }

    /// Storage failures as HTTP: a bad store name is 404, anything else 503 with Retry-After.
    private func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch CloudError.invalidStoreName(let name) {
            throw HTTPError(.notFound, message: "no store \(name)")
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

struct PushRequest: Codable {
    var changes: [StampedChange]
}

struct WhoAmI: Codable {
    var account: String
    var store: String?
    var readOnly: Bool
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
    /// The HTTP (or, given a certificate, HTTPS) application serving this server on host:port.
    public func application(host: String, port: Int, certificate: ServerCertificate?, logger: Logger) throws -> some ApplicationProtocol {
        let builder: HTTPServerBuilder = if let certificate {
            try .tls(.http1(), tlsConfiguration: certificate.tlsConfiguration())
        } else {
            .http1()
        }
        return Application(
            router: makeRouter(), server: builder,
            configuration: .init(address: .hostname(host, port: port), serverName: "kvsfs"),
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
