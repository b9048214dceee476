import Hummingbird
import KVCloud
import KVStore
import KVWire
import Logging

/// A presented token that its directory accepted, and what it reaches.
struct Bearer: Sendable {
    let token: String
    let scope: TokenScope
}

/// A store a request addresses as ACCOUNT/STORE, once its token may use it.
struct AddressedStore: Sendable {
    let account: String
    /// `ACCOUNT.STORE`: the store's name in the storage.
    let name: String
}

/// Every request's context on this server: Hummingbird's, and what the authorization
/// middlewares found. Both stay nil on the routes that need no token.
struct ServerRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// Set by `TokenAuthorization`.
    var bearer: Bearer?
    /// Set by `StoreAuthorization`.
    var store: AddressedStore?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
    }
}

/// The context of a route behind `TokenAuthorization`: its token is accepted.
struct AuthorizedContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let bearer: Bearer

    init(context: ServerRequestContext) throws {
        guard let bearer = context.bearer else { throw TokenAuthorization.refusal("no token was checked") }
        coreContext = context.coreContext
        self.bearer = bearer
    }
}

/// The context of a route behind `StoreAuthorization`: its token reaches the store it addresses.
struct StoreContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let bearer: Bearer
    let store: AddressedStore

    init(context: ServerRequestContext) throws {
        guard let bearer = context.bearer, let store = context.store else {
            throw TokenAuthorization.refusal("no token was checked")
        }
        coreContext = context.coreContext
        self.bearer = bearer
        self.store = store
    }
}

/// Lets a request on only with `Authorization: Bearer TOKEN` naming an active token, within
/// the token's rate. Otherwise: 401 with `WWW-Authenticate: Bearer` and the reason, 429 with
/// Retry-After, or 503 when the accounts cannot be read.
struct TokenAuthorization: RouterMiddleware {
    let accounts: AccountDirectory
    let limiter: RateLimiter
    let logger: Logger
    let refused: RefusedTokens

    func handle(_ request: Request, context: ServerRequestContext,
                next: (Request, ServerRequestContext) async throws -> Response) async throws -> Response {
        let header = request.headers[.authorization]
        guard let token = bearerToken(fromAuthorization: header) else {
            throw Self.refusal(header == nil ? "missing Authorization: Bearer TOKEN" : "the Authorization header is not Bearer and a token")
        }
        let scope: TokenScope?
        do {
            scope = try await accounts.scope(of: token)
        } catch {
            throw HTTPError.storageUnavailable(error, logger: logger)
        }
        guard let scope else {
            refused.refused(token, reason: "unknown or revoked token")
            throw Self.refusal("unknown or revoked token")
        }
        if let wait = limiter.admit(token) {
            let seconds = max(1, Int((Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18).rounded(.up)))
            throw HTTPError(.tooManyRequests, headers: [.retryAfter: String(seconds)], message: "rate limited: retry in \(seconds) s")
        }
        var context = context
        context.bearer = Bearer(token: token, scope: scope)
        return try await next(request, context)
    }

    /// 401 with a challenge and the reason.
    static func refusal(_ reason: String) -> HTTPError {
        HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Bearer"], message: reason)
    }
}

/// Lets a request for `/v1/{account}/{store}/...` on only when its token (accepted by
/// `TokenAuthorization` before) may `access` that store: 404 for a name no store can have, 403
/// for another account's store, another store than the token's one, or a write with a
/// read-only token.
struct StoreAuthorization: RouterMiddleware {
    enum Access { case read, write }

    let access: Access

    func handle(_ request: Request, context: ServerRequestContext,
                next: (Request, ServerRequestContext) async throws -> Response) async throws -> Response {
        guard let scope = context.bearer?.scope else { throw TokenAuthorization.refusal("no token was checked") }
        let account = try context.parameters.require("account")
        let store = try context.parameters.require("store")
        guard let stored = AccountDirectory.storageName(account: account, store: store) else {
            throw HTTPError(.notFound, message: "no store \(account)/\(store)")
        }
        guard scope.canRead(account: account, store: store) else {
            throw HTTPError(.forbidden, message: "this token does not reach \(account)/\(store)")
        }
        if access == .write, !scope.canWrite(account: account, store: store) {
            throw HTTPError(.forbidden, message: "this token may only read \(account)/\(store)")
        }
        var context = context
        context.store = AddressedStore(account: account, name: stored)
        return try await next(request, context)
    }
}
