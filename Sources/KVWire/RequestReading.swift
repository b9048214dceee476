import Foundation
import KVCloud

/// A request's query (`after=N&limit=L&wait=S`), read as the server's router reads it: pairs
/// split at `&` and at their first `=`, values percent-decoded, the first of a repeated name
/// winning, unknown names ignored. Each route reads only the parameters it takes. Pure, and
/// never traps, whatever the text.
public struct WireQuery: Sendable {
    /// The parameters' names, for the server's reading and a client's writing alike.
    public enum Name {
        public static let after = "after"
        public static let limit = "limit"
        public static let wait = "wait"
        public static let mark = "mark"
        public static let markKey = "mark-key"
        public static let key = "key"
        public static let version = "version"
        public static let ifVersion = "if-version"
    }

    private let pairs: [(name: Substring, value: Substring)]

    /// `query`: the part of the URI after `?`, as sent (nil or empty for none).
    public init(_ query: String?) {
        pairs = (query ?? "").split(separator: "&", omittingEmptySubsequences: false).map { pair in
            guard let equals = pair.firstIndex(of: "=") else { return (pair, "") }
            return (pair[..<equals], pair[pair.index(after: equals)...])
        }
    }

    /// The value of the first parameter called `name`, percent-decoded (as sent when it does
    /// not decode).
    public func value(_ name: String) -> String? {
        guard let value = raw(name) else { return nil }
        return String(value).removingPercentEncoding ?? String(value)
    }

    /// `after`: the cursor to read after, 0 or more (default 0).
    public func after() throws(WireError) -> Int64 {
        try wholeNumber(Name.after) ?? 0
    }

    /// `limit`: how many changes at most, in `WireLimits.changesPerFetch` (default 1000).
    public func limit() throws(WireError) -> Int {
        guard let number = try wholeNumber(Name.limit) else { return WireLimits.defaultChangesPerFetch }
        let range = WireLimits.changesPerFetch
        guard number >= Int64(range.lowerBound), number <= Int64(range.upperBound) else {
            throw .invalidQuery(name: Name.limit, expected: "\(range.lowerBound) to \(range.upperBound)")
        }
        return Int(number)
    }

    /// `wait`: how many seconds a long poll may wait, in `WireLimits.waitSeconds` (default 0).
    public func wait() throws(WireError) -> Int64 {
        guard let number = try wholeNumber(Name.wait) else { return 0 }
        let range = WireLimits.waitSeconds
        guard range.contains(number) else {
            throw .invalidQuery(name: Name.wait, expected: "\(range.lowerBound) to \(range.upperBound) seconds")
        }
        return number
    }

    /// `mark` and `mark-key`: the reader's history mark (its `position` and its key), or nil
    /// when neither is sent.
    public func mark() throws(WireError) -> HistoryMark? {
        let position = value(Name.mark)
        let sentKey = raw(Name.markKey)
        guard position != nil || sentKey != nil else { return nil }
        // A key no store could hold is refused by the key rule, not checked against the
        // store's rows (which would answer 409 and renew the account's generation).
        var key: String?
        if let sentKey { key = try Self.key(sentKey, name: Name.markKey) }
        guard let position, let key, position.utf8.count <= 128, let mark = HistoryMark(key: key, position: position) else {
            throw .invalidQuery(name: Name.mark, expected: "\(Name.mark)=CURSOR.TIME.COUNTER.DEVICE and \(Name.markKey)=KEY, as a change stamp and a key name allow")
        }
        return mark
    }

    /// `key`: the key a history request names, required, by `RequestKey`'s rule: a value
    /// whose escapes are not UTF-8 (`%ff`) names no key, and is refused rather than read as
    /// the text sent.
    public func key() throws(WireError) -> String {
        try Self.key(raw(Name.key), name: Name.key)
    }

    /// The key parameter `name` names, by `RequestKey`'s rule.
    private static func key(_ sent: Substring?, name: String) throws(WireError) -> String {
        do {
            return try RequestKey.decoded(sent)
        } catch {
            throw .invalidKey(name: name, error)
        }
    }

    /// The first parameter called `name` as sent, not decoded.
    private func raw(_ name: String) -> Substring? {
        pairs.first(where: { $0.name == name })?.value
    }

    /// `version`: one version of a key's history (a cursor, 1 or more), or nil when not sent.
    public func version() throws(WireError) -> Int64? {
        guard let number = try wholeNumber(Name.version) else { return nil }
        guard number > 0 else { throw .invalidQuery(name: Name.version, expected: "a version number, 1 or more") }
        return number
    }

    /// `if-version`: the schema version a `PUT` or `DELETE .../schema` holds for (0 or more),
    /// or nil when not sent.
    public func ifVersion() throws(WireError) -> Int64? {
        try wholeNumber(Name.ifVersion)
    }

    /// `[?if-version=V]`, for a client's schema request.
    public static func encode(ifVersion: Int64?) -> String {
        ifVersion.map { "?\(Name.ifVersion)=\($0)" } ?? ""
    }

    /// `?key=K[&version=V]`, for a client's history request.
    public static func encode(key: String, version: Int64? = nil) -> String {
        "?\(Name.key)=\(percentEncoded(key))" + (version.map { "&\(Name.version)=\($0)" } ?? "")
    }

    /// `?after=N[&mark=M&mark-key=K][&limit=L][&wait=S]`, for a client.
    public static func encode(after: Int64, mark: HistoryMark? = nil, limit: Int? = nil, wait: Int64? = nil) -> String {
        "?\(Name.after)=\(after)" + (mark.map { "&" + parameters($0) } ?? "") + (limit.map { "&\(Name.limit)=\($0)" } ?? "")
            + (wait.map { "&\(Name.wait)=\($0)" } ?? "")
    }

    /// `?mark=M&mark-key=K`, for a client's push.
    public static func encode(mark: HistoryMark) -> String {
        "?" + parameters(mark)
    }

    private static func parameters(_ mark: HistoryMark) -> String {
        "\(Name.mark)=\(mark.position)&\(Name.markKey)=\(percentEncoded(mark.key))"
    }

    /// Every byte but ASCII letters and digits escaped: a key may hold anything, NUL included.
    private static func percentEncoded(_ text: String) -> String {
        text.utf8.map { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                String(UnicodeScalar(byte))
            default:
                "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }.joined()
    }

    /// A parameter that must be a whole number (0 or more) when present; one that overflows
    /// 64 bits is no whole number.
    private func wholeNumber(_ name: String) throws(WireError) -> Int64? {
        guard let text = value(name) else { return nil }
        guard let number = Int64(text), number >= 0 else { throw .invalidQuery(name: name, expected: "a whole number") }
        return number
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (RFC 6750, RFC 7235): the scheme in
/// any case, one or more spaces, then a token68 (letters, digits, `-._~+/`, then any `=`) of
/// at most `WireLimits.maximumTokenBytes`. Nil for anything else: no header, another scheme,
/// a token with other characters (a comma where two headers were joined, say). Pure.
public func bearerToken(fromAuthorization header: String?) -> String? {
    guard let header else { return nil }
    // The token, the scheme and the spaces around them.
    guard header.utf8.count <= WireLimits.maximumTokenBytes + 64 else { return nil }
    var bytes = Substring(header).utf8[...]
    func isWhitespace(_ byte: UInt8) -> Bool { byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
    // A field value's surrounding whitespace is not part of it (RFC 9110, 5.5).
    while let first = bytes.first, isWhitespace(first) { bytes.removeFirst() }
    while let last = bytes.last, isWhitespace(last) { bytes.removeLast() }
    let scheme = Array("bearer".utf8)
    guard bytes.count > scheme.count,
          zip(bytes.prefix(scheme.count), scheme).allSatisfy({ ($0 | 0x20) == $1 }),
          bytes.dropFirst(scheme.count).first == UInt8(ascii: " ") else { return nil }
    let token = bytes.dropFirst(scheme.count).drop { $0 == UInt8(ascii: " ") }
    guard !token.isEmpty, token.count <= WireLimits.maximumTokenBytes else { return nil }
    let padding = token.reversed().prefix { $0 == UInt8(ascii: "=") }.count
    let body = token.dropLast(padding)
    guard !body.isEmpty, body.allSatisfy(isToken68) else { return nil }
    return String(decoding: token, as: UTF8.self)
}

/// token68's characters before its padding: ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/".
private func isToken68(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
         UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"), UInt8(ascii: "/"):
        true
    default:
        false
    }
}
