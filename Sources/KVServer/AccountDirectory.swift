import Crypto
import Foundation
import KVCloud
import KVStore

/// Accounts and their tokens, kept in the server's storage. A token is shown once, when it is
/// made; only the SHA-256 of its secret is stored. Every check reads the storage, so a revoked
/// token stops working at once, on every server instance.
///
/// A token reads `kvs_<id>_<secret>`: the id names its row, the secret proves it.
public struct AccountDirectory: Sendable {
    public let storage: any AccountStorage

    public init(storage: any AccountStorage) {
        self.storage = storage
    }

    /// Makes an account and its first token (full access to the account's stores).
    public func createAccount(_ name: String) async throws(AccountError) -> String {
        guard Self.isValidName(name) else { throw .invalidName(name) }
        try await storage.addAccount(name, at: Date())
        return try await createToken(account: name, store: nil, readOnly: false)
    }

    /// Makes a token for `account`, limited to `store` and to reading if asked.
    public func createToken(account: String, store: String?, readOnly: Bool) async throws(AccountError) -> String {
        guard try await storage.hasAccount(account) else { throw .noSuchAccount(account) }
        let id = Self.randomText(bytes: 6)
        let secret = Self.randomText(bytes: 32)
        try await storage.addToken(TokenRecord(
            id: id, secretHash: Self.hash(secret), scope: TokenScope(account: account, store: store, readOnly: readOnly), createdAt: Date()))
        return "kvs_\(id)_\(secret)"
    }

    /// Revokes a token by its id (the part after `kvs_`) or by the whole token.
    public func revokeToken(_ idOrToken: String) async throws(AccountError) {
        let id = Self.parse(idOrToken)?.id ?? idOrToken
        guard try await storage.revokeToken(id: id, at: Date()) else { throw .noSuchToken(id) }
    }

    public func tokens(of account: String) async throws(AccountError) -> [TokenInfo] {
        try await storage.tokens(of: account)
    }

    /// The scope of a presented token; nil for an unknown, wrong or revoked one.
    public func scope(of token: String) async throws(AccountError) -> TokenScope? {
        guard let (id, secret) = Self.parse(token) else { return nil }
        let storage = storage
        // Every request asks, an event stream too, whose task would keep the lookup's memory.
        return Self.scope(of: try await inTaskOfItsOwn { () throws(AccountError) in try await storage.activeToken(id: id) },
                          secret: secret)
    }

    /// The same for a token an open event stream was opened with (`stillActiveToken`).
    public func stillActiveScope(of token: String) async throws(AccountError) -> TokenScope? {
        guard let (id, secret) = Self.parse(token) else { return nil }
        let storage = storage
        return Self.scope(of: try await inTaskOfItsOwn { () throws(AccountError) in try await storage.stillActiveToken(id: id) },
                          secret: secret)
    }

    private static func scope(of record: TokenRecord?, secret: String) -> TokenScope? {
        guard let record, constantTimeEqual(record.secretHash, hash(secret)) else { return nil }
        return record.scope
    }

    /// How the storage names the store `store` of `account` (`ACCOUNT.STORE`); nil unless both
    /// names meet their rules.
    public static func storageName(account: String, store: String) -> String? {
        guard isValidName(account), StoreLocation.isValidStoreID(store) else { return nil }
        return "\(account).\(store)"
    }

    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.count <= 32 && name.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_" || $0 == "-") }
    }

    /// The id a presented token names, for the log: never its secret. A token not of the
    /// form has no id; its first bytes, in words, stand in.
    public static func tokenID(of token: String) -> String {
        if let (id, _) = parse(token), id.count <= 64, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) { return id }
        return "(a token not of the form kvs_ID_SECRET)"
    }

    private static func parse(_ token: String) -> (id: String, secret: String)? {
        let parts = token.split(separator: "_", maxSplits: 2)
        guard parts.count == 3, parts[0] == "kvs", !parts[1].isEmpty, !parts[2].isEmpty else { return nil }
        return (String(parts[1]), String(parts[2]))
    }

    private static func hash(_ secret: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(64)
        for byte in SHA256.hash(data: Data(secret.utf8)) {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// Random bytes as URL-safe base64 without padding.
    private static func randomText(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "-").replacingOccurrences(of: "=", with: "")
    }
}
