import Foundation

// What a server's storage keeps of accounts and tokens (`AccountStorage`), and its errors.
// KVServer's `AccountDirectory` makes and checks the tokens.

/// What a token may do: also what `GET /v1/whoami` answers (KVWire's `WhoAmI`), in JSON.
public struct TokenScope: Codable, Sendable, Equatable {
    public var account: String
    /// The one store the token reaches; nil for every store of its account.
    public var store: String?
    public var readOnly: Bool

    public init(account: String, store: String?, readOnly: Bool) {
        self.account = account
        self.store = store
        self.readOnly = readOnly
    }

    /// Whether the token may read `store` of `account`.
    public func canRead(account: String, store: String) -> Bool {
        account == self.account && (self.store == nil || self.store == store)
    }

    public func canWrite(account: String, store: String) -> Bool {
        canRead(account: account, store: store) && !readOnly
    }
}

/// A token as listed (never its secret).
public struct TokenInfo: Sendable, Equatable {
    public var id: String
    public var scope: TokenScope
    public var createdAt: Date
    public var revoked: Bool

    public init(id: String, scope: TokenScope, createdAt: Date, revoked: Bool) {
        self.id = id
        self.scope = scope
        self.createdAt = createdAt
        self.revoked = revoked
    }
}

public enum AccountError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidName(String)
    case accountExists(String)
    case noSuchAccount(String)
    case noSuchToken(String)
    case database(String)

    public var description: String {
        switch self {
        case .invalidName(let name): "invalid account name '\(name)': use 1 to 32 lowercase letters, digits, '_' and '-'"
        case .accountExists(let name): "account \(name) exists already"
        case .noSuchAccount(let name): "no account \(name)"
        case .noSuchToken(let id): "no token \(id)"
        case .database(let message): "database error: \(message)"
        }
    }
}

/// A token's row: its scope and the hash of its secret.
public struct TokenRecord: Sendable, Equatable {
    public var id: String
    public var secretHash: String
    public var scope: TokenScope
    public var createdAt: Date

    public init(id: String, secretHash: String, scope: TokenScope, createdAt: Date) {
        self.id = id
        self.secretHash = secretHash
        self.scope = scope
        self.createdAt = createdAt
    }
}
