import Foundation
import KVCloud
import KVStore

/// The bounds of what the server reads from a request, whoever sends it.
public enum WireLimits {
    /// A push's body, in bytes (larger ones are answered 413).
    public static let maximumPushBytes = 4 << 20
    /// Changes in one push: a device with more pending sends several pushes (`encodePushes`).
    public static let maximumChangesPerPush = 10_000
    /// A key, in UTF-8 bytes: the key rule's bound (`KeyName.maximumBytes`).
    public static let maximumKeyBytes = KeyName.maximumBytes
    /// A change stamp's device id, in UTF-8 bytes.
    public static let maximumDeviceBytes = StampRule.maximumDeviceBytes
    /// Arrays and objects inside one another in a push (a push itself needs 4).
    public static let maximumNesting = 16
    /// A bearer token, in bytes.
    public static let maximumTokenBytes = 512
    /// `limit=` of `GET .../changes`, and its default.
    public static let changesPerFetch: ClosedRange<Int> = 1...10_000
    public static let defaultChangesPerFetch = 1000
    /// `wait=` of a long poll, in seconds.
    public static let waitSeconds: ClosedRange<Int64> = 0...60
}

/// Why the server refuses a request before looking at any store; `description` is the reason
/// the client is given.
public enum WireError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A push body over `WireLimits.maximumPushBytes` (answered 413; every other case 400).
    case bodyTooLarge(bytes: Int, limit: Int)
    case nestedTooDeep(limit: Int)
    /// Not the JSON of a push; what the decoder said.
    case notAPush(String)
    case tooManyChanges(count: Int, limit: Int)
    /// The change at `index` (from 0) is malformed.
    case invalidChange(index: Int, key: String, reason: String)
    /// A query parameter that is not what its route reads.
    case invalidQuery(name: String, expected: String)
    /// A query parameter naming a key that breaks `RequestKey`'s rule.
    case invalidKey(name: String, RequestKey.Violation)

    public var description: String {
        switch self {
        case .bodyTooLarge(let bytes, let limit): "the body is \(bytes) bytes, over the limit of \(limit)"
        case .nestedTooDeep(let limit): "the body nests arrays and objects more than \(limit) deep"
        case .notAPush(let reason): "the body is not a push: \(reason)"
        case .tooManyChanges(let count, let limit): "the push holds \(count) changes, over the limit of \(limit) a push"
        case .invalidChange(let index, let key, let reason): "change \(index) (key \(key)): \(reason)"
        case .invalidQuery(let name, let expected): "\(name) must be \(expected)"
        case .invalidKey(let name, let violation): "\(name) must be \(RequestKey.rule): \(violation)"
        }
    }
}

/// Reads a push body: JSON `{"changes":[...]}` within `WireLimits`, each change with a key,
/// a device id, and either a value that is a property list of its type or no value and no
/// type (a deletion). The storage judges each change against the store's rules and quotas
/// afterwards.
/// Pure, and never traps, whatever the bytes.
public func decodePush(_ body: [UInt8]) throws(WireError) -> PushRequest {
    guard body.count <= WireLimits.maximumPushBytes else {
        throw .bodyTooLarge(bytes: body.count, limit: WireLimits.maximumPushBytes)
    }
    try checkNesting(body, limit: WireLimits.maximumNesting)
    let push: PushRequest
    do {
        push = try JSONDecoder().decode(PushRequest.self, from: Data(body))
    } catch {
        throw .notAPush(describe(error))
    }
    guard push.changes.count <= WireLimits.maximumChangesPerPush else {
        throw .tooManyChanges(count: push.changes.count, limit: WireLimits.maximumChangesPerPush)
    }
    for (index, change) in push.changes.enumerated() {
        func refuse(_ reason: String) -> WireError {
            .invalidChange(index: index, key: abbreviated(change.key), reason: reason)
        }
        do {
            try RequestKey.check(change.key)
        } catch {
            throw refuse(error.description)
        }
        let deviceBytes = change.stamp.device.utf8.count
        guard deviceBytes > 0 else { throw refuse("the stamp has no device id") }
        guard deviceBytes <= WireLimits.maximumDeviceBytes else {
            throw refuse("the device id is \(deviceBytes) bytes, over the limit of \(WireLimits.maximumDeviceBytes)")
        }
        do {
            try change.condition?.check()
        } catch {
            throw refuse(error.description)
        }
        guard let value = change.value else {
            if change.type != nil { throw refuse("a deletion has no type") }
            continue
        }
        guard let type = change.type else { throw refuse("a value needs its type") }
        do {
            guard try PropertyListCodec.decode(value, limits: valueLimits).type == type else {
                throw refuse("the value is not a property list of type \(type.rawValue)")
            }
        } catch StoreError.valueTooLarge {
            // Larger than the wire reads through; its store's quota refuses it alone.
            continue
        } catch {
            throw refuse("the value is not a property list of type \(type.rawValue)")
        }
    }
    return push
}

/// How far a push's values are read to tell that each is a property list of its type. Size is
/// not a reason to refuse the whole push: a value over its store's quota is the storage's to
/// refuse, that change alone, with the quota it breaks.
private let valueLimits = PropertyListDecodingLimits(maxBytes: WireLimits.maximumPushBytes)

/// The bodies of the pushes that carry `changes`, in their order: each within
/// `WireLimits.maximumChangesPerPush` changes and `maximumPushBytes` bytes, except that a
/// single change over the byte limit travels alone (and is answered 413).
public func encodePushes(_ changes: [StampedChange]) throws -> [[UInt8]] {
    let encoder = JSONEncoder()
    let opening = Array(#"{"changes":["#.utf8), closing = Array("]}".utf8)
    var bodies: [[UInt8]] = []
    var body = opening
    var count = 0
    for change in changes {
        let encoded = try encoder.encode(change)
        let separator = count > 0 ? 1 : 0
        if count > 0, count == WireLimits.maximumChangesPerPush
            || body.count + separator + encoded.count + closing.count > WireLimits.maximumPushBytes {
            bodies.append(body + closing)
            body = opening
            count = 0
        }
        if count > 0 { body.append(UInt8(ascii: ",")) }
        body.append(contentsOf: encoded)
        count += 1
    }
    if count > 0 || bodies.isEmpty { bodies.append(body + closing) }
    return bodies
}

extension PushOutcome {
    /// The answers to the pushes of one batch of changes (`encodePushes`), as one: the cursors
    /// span them all only when each push began where the one before ended (nobody else
    /// pushed in between); otherwise they are left out, and the pusher fetches as usual.
    public static func joining(_ parts: [PushOutcome]) -> PushOutcome {
        guard var joined = parts.first else { return PushOutcome() }
        for part in parts.dropFirst() {
            joined.accepted += part.accepted
            joined.refused += part.refused
            joined.notStored += part.notStored
            if joined.cursorAfter != nil, part.cursorBefore == joined.cursorAfter {
                joined.cursorAfter = part.cursorAfter
            } else {
                joined.cursorBefore = nil
                joined.cursorAfter = nil
            }
        }
        return joined
    }
}

/// Refuses JSON whose arrays and objects nest deeper than `limit`, before a decoder recurses
/// into it. Brackets inside strings do not count.
private func checkNesting(_ body: [UInt8], limit: Int) throws(WireError) {
    var depth = 0
    var inString = false
    var escaped = false
    for byte in body {
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
            }
            continue
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            depth += 1
            if depth > limit { throw .nestedTooDeep(limit: limit) }
        case UInt8(ascii: "]"), UInt8(ascii: "}"): depth = max(0, depth - 1)
        default: break
        }
    }
}

/// A decoding error in a line: what was wrong and where.
private func describe(_ error: any Error) -> String {
    func path(_ context: DecodingError.Context) -> String {
        context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
    }
    func located(_ context: DecodingError.Context) -> String {
        path(context).isEmpty ? context.debugDescription : "\(path(context)): \(context.debugDescription)"
    }
    switch error {
    case DecodingError.keyNotFound(let key, let context):
        return path(context).isEmpty ? "no \(key.stringValue)" : "\(path(context)) has no \(key.stringValue)"
    case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
         DecodingError.dataCorrupted(let context): return located(context)
    default: return String(describing: error)
    }
}

/// A key as a message quotes it: at most 64 characters.
private func abbreviated(_ key: String) -> String {
    key.count <= 64 ? key : key.prefix(64) + "…"
}
