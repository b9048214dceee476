/// A member inside a property-list value, named as `plutil -extract` names it: dictionary keys
/// and array indexes joined by dots (`servers.0.port`).
///
/// Invariant: a component names a dictionary member by its whole text, and an array member
/// only when it is a decimal number (ASCII digits, no sign); a dictionary key holding a dot
/// cannot be named, as with `plutil`.
public struct PropertyListKeyPath: Sendable, Hashable, CustomStringConvertible {
    public let components: [String]

    /// The path the text names; every dot separates two components, so `a..b` has an empty
    /// middle one (the dictionary key "").
    public init(_ text: String) {
        components = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    }

    public var description: String { components.joined(separator: ".") }
}

/// Why a key path names no member: where the walk stopped and what was there.
public struct MissingMember: Error, Sendable, Equatable, CustomStringConvertible {
    /// The path up to and including the component that named nothing.
    public let path: PropertyListKeyPath
    /// What held that component: its type, and for a container its member count.
    public let container: ValueType
    public let memberCount: Int?

    public var description: String {
        let missing = path.components.last ?? ""
        let parent = path.components.count > 1 ? path.components.dropLast().joined(separator: ".") : "the value"
        let what: String
        switch container {
        case .array: what = "an array of \(memberCount ?? 0) member\(memberCount == 1 ? "" : "s")"
        case .dictionary: what = "a dictionary without the key \(missing.debugDescription)"
        default: what = "\(container.withArticle), which has no members"
        }
        return "no member at \(path): \(parent) is \(what)"
    }
}

extension PropertyListValue {
    /// The member `path` names inside this value.
    public func member(at path: PropertyListKeyPath) throws(MissingMember) -> PropertyListValue {
        var value = self
        for (depth, component) in path.components.enumerated() {
            let walked = PropertyListKeyPath(components: Array(path.components[...depth]))
            switch value {
            case .array(let members):
                guard let index = Self.arrayIndex(component), index < members.count else {
                    throw MissingMember(path: walked, container: .array, memberCount: members.count)
                }
                value = members[index]
            case .dictionary(let members):
                guard let member = members[component] else {
                    throw MissingMember(path: walked, container: .dictionary, memberCount: members.count)
                }
                value = member
            default:
                throw MissingMember(path: walked, container: value.type, memberCount: nil)
            }
        }
        return value
    }

    /// A component as an array index: a decimal number, digits only.
    private static func arrayIndex(_ component: String) -> Int? {
        guard !component.isEmpty, component.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int(component)
    }
}

extension PropertyListKeyPath {
    init(components: [String]) { self.components = components }
}

extension ValueType {
    /// The type's name with its indefinite article, as messages use it: "an integer", "a string".
    public var withArticle: String {
        switch self {
        case .integer, .array: "an \(rawValue)"
        default: "a \(rawValue)"
        }
    }
}
