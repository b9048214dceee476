import Foundation
import Hummingbird
import KVCloud
import KVStore
import KVWire
import Logging
import NIOCore

/// The sync server's HTTP interface over cloud storage and accounts. Every route but
/// `/health` and `/metrics` needs `Authorization: Bearer TOKEN`; a store is addressed as ACCOUNT/STORE and
/// kept in the storage as `ACCOUNT.STORE`. Bodies are JSON; errors are 4xx/5xx with
/// `{"error":{"message":...}}`. Every key a request names keeps one rule (`RequestKey`),
/// or the request is answered 400 before any store is read.
///
///     GET  /health                                   200 ok
///     GET  /metrics                                  Prometheus text (no token needed)
///     GET  /v1/whoami                                {"account","store","readOnly"} of the token
///     GET  /v1/ACCOUNT/STORE/identity                {"identity"}: the account's remote id
///     POST /v1/ACCOUNT/STORE/changes[?mark=M&mark-key=K]
///                                                    {"changes":[...]} -> {"accepted","refused"};
///                                                    the first push to a store makes it, 403
///                                                    past the account's cap (`StoreCap`)
///     GET  /v1/ACCOUNT/STORE/changes?after=N[&mark=M&mark-key=K]&limit=L[&wait=S]
///                                                    {"changes","cursor","complete"}; with wait, a
///                                                    long poll: when there are none yet, answers
///                                                    when a change lands or after S seconds (≤ 60)
///     GET  /v1/ACCOUNT/STORE/cursor?after=N&wait=S   {"cursor"}, at once if past N, else the same
///     GET  /v1/ACCOUNT/STORE/history?key=K           {"versions"}: the versions kept of K,
///                                                    newest first, without values
///     GET  /v1/ACCOUNT/STORE/history?key=K&version=V {"version"}: that one with its value,
///                                                    null when it is not kept
///     GET  /v1/ACCOUNT/STORE/schema                  {"version","text"}: the store's schema (text
///                                                    base64, null without one; version 0 if never set)
///     PUT  /v1/ACCOUNT/STORE/schema[?if-version=V]   body: the schema, at most `SchemaLimits.bytes`
///                                                    -> {"version","text"}; 400 with the reason when
///                                                    it is no schema, 412 when not at version V
///                                                    (`Kvsfs-Schema-Version` says where), 403 for a
///                                                    read-only token; makes the store as a push does
///     DELETE /v1/ACCOUNT/STORE/schema[?if-version=V] removes it, the same way
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
    /// Reads of each store's changes, shared by its streams at the same cursor.
    let storeReads = StoreReads()
    let renewals = IdentityRenewals()
    let logger = Logger(label: "kvsfs.serve")
    let refusedTokens: RefusedTokens
    let storeCap: StoreCap

    /// `rateLimit`: requests per second per token (0: none); `maxStoresPerAccount`: the most
    /// stores one account may hold (`StoreCap`).
    public init(storage: any ServerStorage, rateLimit: Double = 0, maxStoresPerAccount: Int = SyncServer.defaultMaxStoresPerAccount) {
        refusedTokens = RefusedTokens(logger: logger)
        self.storage = storage
        accounts = AccountDirectory(storage: storage.accounts)
        limiter = RateLimiter(rate: rateLimit)
        storeCap = StoreCap(limit: maxStoresPerAccount)
    }

    public static let defaultMaxStoresPerAccount = StoreCap.defaultLimit

    /// Wakes this server's long polls for changes pushed through other servers sharing the
    /// storage; runs until the task is cancelled.
    public func followOtherServers() async {
        await storage.followChanges({ notifier.notify($0) }, resync: { notifier.notifyAll() })
    }

    /// `/health` and `/metrics` for anyone; the rest behind `TokenAuthorization`, and the
    /// store routes behind `StoreAuthorization` too, so that each handler starts from a
    /// request its token may make.
    func makeRouter() -> Router<ServerRequestContext> {
        let router = Router(context: ServerRequestContext.self)
        router.add(middleware: MetricsMiddleware(metrics: metrics))
        router.get(RouterPath(WirePath.health)) { _, _ in "ok\n" }
        router.get(RouterPath(WirePath.metrics)) { _, _ -> Response in
            metrics.watchers.set(Double(notifier.waiting))
            metrics.showPushCommits(storage.pushTransactions.transactions)
            let text = metrics.registry.emitToBuffer()
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                            body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        let authorized = router.group().add(middleware: TokenAuthorization(accounts: accounts, limiter: limiter, logger: logger,
                                                                                 refused: refusedTokens))
        authorized.group(context: AuthorizedContext.self).get(RouterPath(WirePath.whoAmI)) { _, context -> Response in
            let scope = context.bearer.scope
            return try json(scope as WhoAmI)
        }
        let reads = authorized.group()
            .add(middleware: StoreAuthorization(access: .read)).group(context: StoreContext.self)
        let writes = authorized.group()
            .add(middleware: StoreAuthorization(access: .write)).group(context: StoreContext.self)
        reads.get(RouterPath(WirePath.pattern(.identity))) { _, context -> Response in
            try await identity(context.store)
        }
        writes.post(RouterPath(WirePath.pattern(.changes))) { request, context -> Response in
            try await push(request, context)
        }
        reads.get(RouterPath(WirePath.pattern(.changes))) { request, context -> Response in
            try await fetch(request, context)
        }
        reads.get(RouterPath(WirePath.pattern(.events))) { request, context -> Response in
            try await events(request, context)
        }
        reads.get(RouterPath(WirePath.pattern(.history))) { request, context -> Response in
            try await history(request, context)
        }
        reads.get(RouterPath(WirePath.pattern(.schema))) { _, context -> Response in
            let stored = context.store.name
            return try json(try await run { try await storage.schema(of: stored) } as SchemaResponse)
        }
        writes.put(RouterPath(WirePath.pattern(.schema))) { request, context -> Response in
            // Bounded before it is read whole.
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: SchemaLimits.bytes)
            } catch is NIOTooManyBytesError {
                throw HTTPError(.contentTooLarge, message: "a schema is at most \(SchemaLimits.bytes) bytes")
            }
            return try await setSchema(Array(body.readableBytesView), request, context)
        }
        writes.delete(RouterPath(WirePath.pattern(.schema))) { request, context -> Response in
            try await setSchema(nil, request, context)
        }
        reads.get(RouterPath(WirePath.pattern(.cursor))) { request, context -> Response in
            let stored = context.store.name
            let query = WireQuery(request.uri.query)
            let after = try wire { () throws(WireError) in try query.after() }
            let cursor = try await longPoll(stored, query, until: { $0 > after }) { try await storage.cursor(of: stored) }
            return try json(CursorResponse(cursor: cursor))
        }
        return router
    }

    // MARK: - Routes

    /// The account's remote id, with its generation once it was first renewed (a restore
    /// found out).
    private func identity(_ store: AddressedStore) async throws -> Response {
        let identity = try await run { try await storage.identity() } + "/" + store.account
        let generation = try await run { try await storage.generation(of: store.account) }
        return try json(IdentityResponse(identity: identity + (generation.map { "/" + $0 } ?? "")))
    }

    private func push(_ request: Request, _ context: StoreContext) async throws -> Response {
        let stored = context.store.name
        let mark = try wire { () throws(WireError) in try WireQuery(request.uri.query).mark() }
        let body = try await request.body.collect(upTo: WireLimits.maximumPushBytes)
        let push = try wire { () throws(WireError) in try decodePush(Array(body.readableBytesView)) }
        // The first push to a store makes it, within its account's cap.
        try await run { try await storeCap.admit(context.store, storage: storage) }
        // Nothing goes into a history that is not the pusher's: it resynchronises first.
        let outcome = try await checkingHistory(of: stored, scope: context.bearer.scope) { () throws(CloudError) in
            try await storage.push(push.changes, to: stored, mark: mark)
        }
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

    private func fetch(_ request: Request, _ context: StoreContext) async throws -> Response {
        let stored = context.store.name
        let query = WireQuery(request.uri.query)
        let (after, mark, limit) = try wire { () throws(WireError) in (try query.after(), try query.mark(), try query.limit()) }
        let batch = try await longPoll(stored, query, until: { !$0.changes.isEmpty }) {
            try await checkingHistory(of: stored, scope: context.bearer.scope) { () throws(CloudError) in
                try await storage.changes(in: stored, after: after, mark: mark, limit: limit)
            }
        }
        return try json(batch as ChangesResponse)
    }

    private func events(_ request: Request, _ context: StoreContext) async throws -> Response {
        let stored = context.store.name
        let bearer = context.bearer
        let query = WireQuery(request.uri.query)
        let (after, mark) = try wire { () throws(WireError) in (try query.after(), try query.mark()) }
        // A stream from another history is refused before it starts, as a fetch is; in a task
        // of its own, which the stream's does not outlive.
        try await inTaskOfItsOwn { [self] in
            _ = try await checkingHistory(of: stored, scope: bearer.scope) { () throws(CloudError) in
                try await storage.changes(in: stored, after: after, mark: mark, limit: 1)
            }
        }
        return Response(
            status: .ok, headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
            body: ResponseBody { writer in
                try await streamChanges(of: stored, after: after, while: { await stillAllowed(bearer) }, to: &writer)
            })
    }

    /// Sets (or, with no text, removes) the store's schema; a store not made yet is made within
    /// its account's cap, as by a first push. The store's long polls and streams are woken,
    /// though they answer only on a change (the mounts see the new version at their next fetch).
    private func setSchema(_ text: [UInt8]?, _ request: Request, _ context: StoreContext) async throws -> Response {
        let stored = context.store.name
        let ifVersion = try wire { () throws(WireError) in try WireQuery(request.uri.query).ifVersion() }
        try await run { try await storeCap.admit(context.store, storage: storage) }
        let set = try await run { try await storage.setSchema(text, of: stored, ifVersion: ifVersion) }
        notifier.notify(stored)
        return try json(set as SchemaResponse)
    }

    /// A key's history, or one version of it: read-only tokens may read it too.
    private func history(_ request: Request, _ context: StoreContext) async throws -> Response {
        let stored = context.store.name
        let query = WireQuery(request.uri.query)
        let (key, version) = try wire { () throws(WireError) in (try query.key(), try query.version()) }
        guard let version else {
            return try json(HistoryResponse(versions: try await run { try await storage.history(of: key, in: stored) }))
        }
        return try json(VersionResponse(version: try await run { try await storage.version(version, of: key, in: stored) }))
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

    private func json(_ value: some Encodable) throws -> Response {
        let data = try JSONEncoder().encode(value)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: data)))
    }
}
