import Foundation

/// The one rule for a key a request names, whichever route takes it and wherever the request
/// carries it: a push's changes, `key=` of a history request, `mark-key=` of a history mark.
/// A key is 1 to `WireLimits.maximumKeyBytes` bytes of UTF-8 (in a query, percent-encoded:
/// escapes that decode to no UTF-8 name no key). Anything else is refused before any store is
/// read, so that a request naming no key changes nothing: a mark's key that no row could
/// hold is a malformed request, not another history. Within the rule, NUL, `/` and `..` are
/// keys like any other (a mount escapes them in file names); NFC and NFD name one key, which
/// the storage normalises (`KeyName`); a store's own key-name quota is judged per change,
/// later.
public enum RequestKey {
    /// Why a sent key breaks the rule; `description` is the reason the client is given.
    public enum Violation: Error, Equatable, Sendable, CustomStringConvertible {
        case missing
        case empty
        case tooLong(bytes: Int)
        /// A query's value whose percent-escapes decode to no UTF-8 (`%ff`), or a stray `%`.
        case notUTF8

        public var description: String {
            switch self {
            case .missing: "no key is named"
            case .empty: "the key is empty"
            case .tooLong(let bytes): "the key is \(bytes) bytes, over the limit of \(WireLimits.maximumKeyBytes)"
            case .notUTF8: "the key is not percent-encoded UTF-8"
            }
        }
    }

    /// The rule in words, as a query's refusal states it.
    public static let rule = "a key name of 1 to \(WireLimits.maximumKeyBytes) bytes of percent-encoded UTF-8"

    /// Refuses `key` (as a JSON body carries it: text already) unless it keeps the rule.
    public static func check(_ key: String) throws(Violation) {
        let bytes = key.utf8.count
        if bytes == 0 { throw .empty }
        if bytes > WireLimits.maximumKeyBytes { throw .tooLong(bytes: bytes) }
    }

    /// The key a query parameter names, percent-decoded, once it keeps the rule; `sent` is the
    /// parameter's value as it came (nil when the parameter is absent).
    public static func decoded(_ sent: Substring?) throws(Violation) -> String {
        guard let sent else { throw .missing }
        guard let key = String(sent).removingPercentEncoding else { throw .notUTF8 }
        try check(key)
        return key
    }
}
