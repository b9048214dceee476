import Foundation

/// What a store's schema asks of one key's value (or of a member inside one): each part is
/// optional, and a value conforms when it meets every part given.
///
/// `KeySchema` reads rules and checks that their parts agree with each other (a `minimum`
/// only with a numeric type, a `default` that meets its own rule, and so on), so a rule in
/// hand is always one a value can meet.
public final class SchemaRule: Sendable {
    /// The type asked for; `nil` takes any.
    public let type: SchemaType?
    /// For numbers: the least and greatest value, inclusive.
    public let minimum: SchemaNumber?
    public let maximum: SchemaNumber?
    /// The shortest and longest: characters (Unicode scalars) of a string, bytes of data,
    /// members of an array or a dictionary.
    public let minimumLength: Int?
    public let maximumLength: Int?
    /// The values allowed, compared as values (an integer 1 is not the real 1.0).
    public let choices: [PropertyListValue]?
    /// For strings: what the whole string matches.
    public let pattern: ValuePattern?
    /// For dictionaries: the rules of named members, the members that must be there, and
    /// whether members not named are taken.
    public let members: [String: SchemaRule]
    public let required: [String]
    public let otherMembers: Bool
    /// For arrays: the rule of every element.
    public let items: SchemaRule?
    /// What the key is for, in words, shown by `kvsfs get --describe` and `user.kvsfs.schema`.
    public let description: String?
    /// The value the key shows while it has none (a key named in `keys` only).
    public let defaultValue: PropertyListValue?

    init(type: SchemaType?, minimum: SchemaNumber?, maximum: SchemaNumber?, minimumLength: Int?, maximumLength: Int?,
         choices: [PropertyListValue]?, pattern: ValuePattern?, members: [String: SchemaRule], required: [String],
         otherMembers: Bool, items: SchemaRule?, description: String?, defaultValue: PropertyListValue?) {
        self.type = type
        self.minimum = minimum
        self.maximum = maximum
        self.minimumLength = minimumLength
        self.maximumLength = maximumLength
        self.choices = choices
        self.pattern = pattern
        self.members = members
        self.required = required
        self.otherMembers = otherMembers
        self.items = items
        self.description = description
        self.defaultValue = defaultValue
    }

    /// The first part of this rule that `value` breaks, looking inside arrays and dictionaries
    /// depth first; `path` is where `value` sits inside the key's value.
    func breach(by value: PropertyListValue, at path: [String] = []) -> SchemaBreach? {
        func broken(_ part: SchemaBreach.Part) -> SchemaBreach { SchemaBreach(path: path, valueType: value.type, part: part) }
        if let type, !type.admits(value) { return broken(.type(type)) }
        if let number = SchemaNumber(value) {
            // NaN compares false with every bound: it is within none.
            if case .real(let real) = number, real.isNaN, let bound = minimum ?? maximum {
                return broken(minimum != nil ? .minimum(bound, found: number) : .maximum(bound, found: number))
            }
            if let minimum, number < minimum { return broken(.minimum(minimum, found: number)) }
            if let maximum, maximum < number { return broken(.maximum(maximum, found: number)) }
        }
        if let length = value.schemaLength {
            if let minimumLength, length < minimumLength { return broken(.minimumLength(minimumLength, found: length)) }
            if let maximumLength, length > maximumLength { return broken(.maximumLength(maximumLength, found: length)) }
        }
        if let choices, !choices.contains(where: { $0.isSame(as: value) }) { return broken(.choices(choices)) }
        if let pattern, case .string(let text) = value, !pattern.matches(text) { return broken(.pattern(pattern.source)) }
        switch value {
        case .dictionary(let dictionary):
            for name in required where dictionary[name] == nil { return broken(.required(name)) }
            for name in dictionary.keys.sorted() {
                guard let member = dictionary[name] else { continue }
                if let rule = members[name] {
                    if let breach = rule.breach(by: member, at: path + [name]) { return breach }
                } else if !otherMembers {
                    return broken(.otherMember(name))
                }
            }
        case .array(let elements):
            guard let items else { break }
            for (index, element) in elements.enumerated() {
                if let breach = items.breach(by: element, at: path + [String(index)]) { return breach }
            }
        default:
            break
        }
        return nil
    }
}

/// The types a rule can ask for: the eight property-list types, and `number` for an integer or
/// a real.
public enum SchemaType: String, Sendable, CaseIterable {
    case string, integer, real, number, boolean, date, data, array, dictionary

    func admits(_ value: PropertyListValue) -> Bool {
        switch self {
        case .number: value.type == .integer || value.type == .real
        default: value.type.rawValue == rawValue
        }
    }

    var isNumeric: Bool { self == .integer || self == .real || self == .number }
    var hasLength: Bool { self == .string || self == .data || self == .array || self == .dictionary }
}

/// A number as a schema compares it: integers exactly, and a real against an integer as reals.
public enum SchemaNumber: Sendable, Comparable, CustomStringConvertible {
    case integer(Int)
    case unsignedInteger(UInt64)
    case real(Double)

    init?(_ value: PropertyListValue) {
        switch value {
        case .integer(let number): self = .integer(number)
        case .unsignedInteger(let number): self = .unsignedInteger(number)
        case .real(let number): self = .real(number)
        default: return nil
        }
    }

    public static func < (lhs: SchemaNumber, rhs: SchemaNumber) -> Bool {
        switch (lhs, rhs) {
        case let (.integer(x), .integer(y)): x < y
        case let (.unsignedInteger(x), .unsignedInteger(y)): x < y
        case let (.integer(x), .unsignedInteger(y)): x < 0 || UInt64(x) < y
        case let (.unsignedInteger(x), .integer(y)): y >= 0 && x < UInt64(y)
        default: lhs.asReal < rhs.asReal
        }
    }

    public static func == (lhs: SchemaNumber, rhs: SchemaNumber) -> Bool { !(lhs < rhs) && !(rhs < lhs) }

    private var asReal: Double {
        switch self {
        case .integer(let number): Double(number)
        case .unsignedInteger(let number): Double(number)
        case .real(let number): number
        }
    }

    public var description: String {
        switch self {
        case .integer(let number): String(number)
        case .unsignedInteger(let number): String(number)
        case .real(let number): String(number)
        }
    }
}

extension PropertyListValue {
    /// What `minimumLength` and `maximumLength` measure, for the types that have a length.
    var schemaLength: Int? {
        switch self {
        case .string(let text): text.unicodeScalars.count
        case .data(let bytes): bytes.count
        case .array(let elements): elements.count
        case .dictionary(let members): members.count
        default: nil
        }
    }
}

/// Where a value breaks a rule, and which part of the rule.
public struct SchemaBreach: Sendable, Equatable {
    /// The member inside the key's value (as `PropertyListKeyPath` names it); empty for the
    /// value itself.
    public let path: [String]
    /// The type of what broke the rule (the member's, inside a value).
    public let valueType: ValueType
    public let part: Part

    public enum Part: Sendable, Equatable {
        case type(SchemaType)
        case minimum(SchemaNumber, found: SchemaNumber)
        case maximum(SchemaNumber, found: SchemaNumber)
        case minimumLength(Int, found: Int)
        case maximumLength(Int, found: Int)
        case choices([PropertyListValue])
        case pattern(String)
        case required(String)
        case otherMember(String)
        /// The schema names no rule for the key, and takes no keys it does not name.
        case otherKey

        /// The rule's name, as the schema spells it.
        public var ruleName: String {
            switch self {
            case .type: "type"
            case .minimum: "minimum"
            case .maximum: "maximum"
            case .minimumLength: "minLength"
            case .maximumLength: "maxLength"
            case .choices: "choices"
            case .pattern: "pattern"
            case .required: "required"
            case .otherMember: "otherMembers"
            case .otherKey: "otherKeys"
            }
        }
    }

    /// The rule and what broke it, in words.
    var words: String {
        switch part {
        case .type(let type): "the rule type \(type.rawValue): it is \(valueType.withArticle)"
        case .minimum(let bound, let found): "the rule minimum \(bound): it is \(found)"
        case .maximum(let bound, let found): "the rule maximum \(bound): it is \(found)"
        case .minimumLength(let bound, let found): "the rule minLength \(bound): its length is \(found)"
        case .maximumLength(let bound, let found): "the rule maxLength \(bound): its length is \(found)"
        case .choices(let choices): "the rule choices: it is none of \(Self.list(choices))"
        case .pattern(let source): "the rule pattern \(source.debugDescription)"
        case .required(let name): "the rule required: it has no member \(name.debugDescription)"
        case .otherMember(let name): "the rule otherMembers false: it has a member \(name.debugDescription) that no rule names"
        case .otherKey: "the rule otherKeys false: no rule names this key"
        }
    }

    /// Up to five choices, as the manual writes values.
    private static func list(_ choices: [PropertyListValue]) -> String {
        let shown = choices.prefix(5).map(\.schemaWords).joined(separator: ", ")
        return choices.count > 5 ? shown + " and \(choices.count - 5) more" : shown
    }
}

/// A value that breaks its key's rule: what every door refuses, and what `kvsfs schema check`
/// lists.
public struct SchemaViolation: Error, Sendable, Equatable, CustomStringConvertible {
    public let key: String
    public let breach: SchemaBreach

    public init(key: String, breach: SchemaBreach) {
        self.key = key
        self.breach = breach
    }

    /// "port: the integer breaks the rule maximum 65535: it is 70000"; a member inside the
    /// value is named after the key (`limits.cpu`).
    public var description: String {
        let member = breach.path.isEmpty ? "" : " at member \(breach.path.joined(separator: "."))"
        return "\(key.debugDescription)\(member): \(breach.valueType.withArticle) breaks \(breach.words)"
    }
}

extension PropertyListValue {
    /// A short form of a scalar value for a refusal's words.
    var schemaWords: String {
        switch self {
        case .string(let text): text.count > 40 ? String(text.prefix(40)).debugDescription + "…" : text.debugDescription
        case .integer(let number): String(number)
        case .unsignedInteger(let number): String(number)
        case .real(let number): String(number)
        case .boolean(let flag): flag ? "true" : "false"
        case .date(let date): date.ISO8601Format()
        case .data(let bytes): "<\(bytes.count) bytes>"
        case .array(let elements): "an array of \(elements.count)"
        case .dictionary(let members): "a dictionary of \(members.count)"
        }
    }
}

extension SchemaRule {
    /// The rule in one line, as the schema spells its parts ("type integer, minimum 1,
    /// maximum 65535, default 8080"), then its description on a line of its own.
    public var summary: String {
        let description = self.description.map { "\n" + $0 } ?? ""
        return parts.joined(separator: ", ") + description
    }

    private var parts: [String] {
        var parts = [String]()
        if let type { parts.append("type \(type.rawValue)") }
        if let minimum { parts.append("minimum \(minimum)") }
        if let maximum { parts.append("maximum \(maximum)") }
        if let minimumLength { parts.append("minLength \(minimumLength)") }
        if let maximumLength { parts.append("maxLength \(maximumLength)") }
        if let choices { parts.append("choices " + choices.map(\.schemaWords).joined(separator: " | ")) }
        if let pattern { parts.append("pattern \(pattern.source.debugDescription)") }
        if !required.isEmpty { parts.append("required " + required.map(\.debugDescription).joined(separator: " ")) }
        for name in members.keys.sorted() {
            parts.append("member \(name.debugDescription) (\(members[name]!.parts.joined(separator: ", ")))")
        }
        if !otherMembers { parts.append("otherMembers false") }
        if let items { parts.append("items (\(items.parts.joined(separator: ", ")))") }
        if let defaultValue { parts.append("default \(defaultValue.schemaWords)") }
        return parts.isEmpty ? ["any value"] : parts
    }
}
