import Foundation

/// What a conditional change requires of its key on the remote, checked where the change is
/// stored (`CloudLedger`), so that of two devices racing on one version exactly one wins. A
/// key's version is the cursor its latest change was accepted at (`KeyVersion.version`, what
/// `kvsfs history` prints); a change given again with a conflict is no new version.
///
/// A conditional change is never merged as a conflict: it is stored, as the key's next version,
/// exactly when its condition holds, and refused with words otherwise. The conditional changes
/// of one push are stored together or not at all.
///
/// On the wire, a change's `condition`: `{"version":V}`, `{"absent":true}` or
/// `{"unchangedSince":C}`.
public enum ChangeCondition: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The key's latest version is `V` (1 or more): `kvsfs set --if-version V`.
    case version(Int64)
    /// The remote holds no value of the key: it never held one, or its latest change removed
    /// it. `kvsfs set --if-version absent`.
    case absent
    /// The key has no version after cursor `C` (0 or more): `kvsfs import --if-unchanged-since C`.
    case unchangedSince(Int64)

    private enum CodingKeys: String, CodingKey { case version, absent, unchangedSince }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let version = try container.decodeIfPresent(Int64.self, forKey: .version)
        let absent = try container.decodeIfPresent(Bool.self, forKey: .absent)
        let since = try container.decodeIfPresent(Int64.self, forKey: .unchangedSince)
        switch (version, absent, since) {
        case (let version?, nil, nil): self = .version(version)
        case (nil, true?, nil): self = .absent
        case (nil, nil, let since?): self = .unchangedSince(since)
        default:
            throw DecodingError.dataCorrupted(DecodingError.Context(
                codingPath: decoder.codingPath, debugDescription: "a condition is one of version, absent (true) or unchangedSince"))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .version(let version): try container.encode(version, forKey: .version)
        case .absent: try container.encode(true, forKey: .absent)
        case .unchangedSince(let cursor): try container.encode(cursor, forKey: .unchangedSince)
        }
    }

    /// Refuses a condition no key can meet the form of: a version below 1, a cursor below 0.
    public func check() throws(StoreError) {
        switch self {
        case .version(let version) where version < 1:
            throw .invalidCondition("a condition's version is 1 or more, not \(version)")
        case .unchangedSince(let cursor) where cursor < 0:
            throw .invalidCondition("a condition's cursor is 0 or more, not \(cursor)")
        default: return
        }
    }

    /// Why the condition does not hold of a key whose latest change is `current` (nil: none)
    /// at version `version` (nil: none known), in words that say the key moved on and where it
    /// stands; nil when it holds.
    public func violation(current: StampedChange?, version: Int64?) -> String? {
        let standing: String
        if let current, let version {
            standing = current.isTombstone ? "its latest version on the remote is \(version), a removal" : "its latest version on the remote is \(version)"
        } else {
            standing = "the remote holds no version of it"
        }
        switch self {
        case .version(let wanted):
            guard version != wanted || current == nil else { return nil }
            return "the key moved on: \(standing), not \(wanted)"
        case .absent:
            guard let current, !current.isTombstone else { return nil }
            return "the key moved on: the remote holds a value of it" + (version.map { ", at version \($0)" } ?? "")
        case .unchangedSince(let cursor):
            guard let version, current != nil, version > cursor else { return nil }
            return "the key moved on: \(standing), after \(cursor)"
        }
    }

    public var description: String {
        switch self {
        case .version(let version): "version \(version)"
        case .absent: "absent"
        case .unchangedSince(let cursor): "unchanged since \(cursor)"
        }
    }
}
