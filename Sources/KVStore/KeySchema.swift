import Foundation
import Synchronization

/// A store's schema: what each key's value must be, read from a property list (the manual's
/// SCHEMA section gives the format and an example).
///
/// ```
/// { "otherKeys": true,
///   "keys":     { "port": { "type": "integer", "minimum": 1, "maximum": 65535, "default": 8080,
///                           "description": "The port the service listens on." } },
///   "patterns": { "feature.*": { "type": "boolean" } } }
/// ```
///
/// A key named in `keys` has that rule alone. Any other key has the rule of every pattern
/// (a glob, `ValuePattern(glob:)`) it matches, all of them at once; a key that no rule names
/// is taken unless `otherKeys` is false. Reading refuses, with the place and the reason,
/// anything malformed and anything past `SchemaLimits`, so a schema in hand costs a bounded
/// time to check a value against.
public struct KeySchema: Sendable {
    public let keys: [String: SchemaRule]
    /// The key patterns, in the byte order of their text.
    public let patterns: [KeyPatternRule]
    public let otherKeys: Bool
    public let description: String?
    /// The patterns each key matched, as found once: a key is matched against the patterns
    /// once per schema, not at every write.
    private let matched = MatchedPatterns()

    public struct KeyPatternRule: Sendable {
        public let pattern: ValuePattern
        public let rule: SchemaRule
    }

    /// Reads a schema from a property list's bytes, in any format the store reads values in.
    public init(decoding bytes: some Collection<UInt8>) throws(StoreError) {
        guard bytes.count <= SchemaLimits.bytes else {
            throw .invalidSchema("it is \(bytes.count) bytes; a schema is at most \(SchemaLimits.bytes)")
        }
        let limits = PropertyListDecodingLimits(maxDepth: SchemaLimits.propertyListDepth, maxObjects: SchemaLimits.objects,
                                                maxBytes: SchemaLimits.bytes * 2)
        let value: PropertyListValue
        do {
            value = try PropertyListCodec.decode(bytes, limits: limits)
        } catch .valueTooLarge {
            throw .invalidSchema("its values take more than \(SchemaLimits.bytes * 2) bytes as canonical XML, more than a schema may")
        } catch .invalidPropertyList(let reason) {
            throw .invalidSchema("not a property list: \(reason)")
        } catch {
            throw error
        }
        try self.init(value)
    }

    /// Reads a schema from a decoded property list.
    public init(_ value: PropertyListValue) throws(StoreError) {
        var reader = SchemaReader()
        let top = try reader.dictionary(value, at: "the schema", allowed: ["description", "otherKeys", "keys", "patterns"])
        description = try reader.text(top["description"], at: "description")
        otherKeys = try reader.flag(top["otherKeys"], at: "otherKeys") ?? true
        var keys = [String: SchemaRule]()
        for (key, rule) in try reader.dictionary(top["keys"] ?? .dictionary([:]), at: "keys", allowed: nil) {
            let place = "keys.\(key)"
            guard KeyName.isCanonical(key), !key.isEmpty, key.utf8.count <= KeyName.maximumBytes else {
                throw .invalidSchema("\(place): not a key name (non-empty, at most \(KeyName.maximumBytes) bytes, in Unicode NFC)")
            }
            keys[key] = try reader.rule(rule, at: place, depth: 1, defaultAllowed: true)
        }
        let patternRules = try reader.dictionary(top["patterns"] ?? .dictionary([:]), at: "patterns", allowed: nil)
        guard patternRules.count <= SchemaLimits.keyPatterns else {
            throw .invalidSchema("patterns: \(patternRules.count) key patterns; a schema has at most \(SchemaLimits.keyPatterns)")
        }
        var patterns = [KeyPatternRule]()
        for (glob, rule) in patternRules.sorted(by: { Array($0.key.utf8).lexicographicallyPrecedes($1.key.utf8) }) {
            let place = "patterns.\(glob)"
            let pattern: ValuePattern
            do { pattern = try ValuePattern(glob: glob) } catch { throw .invalidSchema("\(place): \(error)") }
            patterns.append(KeyPatternRule(pattern: pattern, rule: try reader.rule(rule, at: place, depth: 1, defaultAllowed: false)))
        }
        self.keys = keys
        self.patterns = patterns
    }

    /// The rules `key`'s value must meet: its own, or every matching pattern's.
    public func rules(for key: String) -> [SchemaRule] {
        if let rule = keys[key] { return [rule] }
        return matchingPatterns(key).map(\.rule)
    }

    /// The key patterns `key` matches, in the order of `patterns`.
    func matchingPatterns(_ key: String) -> [KeyPatternRule] {
        guard !patterns.isEmpty else { return [] }
        if let found = matched.indexes(of: key) { return found.map { patterns[$0] } }
        let found = patterns.indices.filter { patterns[$0].pattern.matches(key) }
        matched.keep(found, for: key)
        return found.map { patterns[$0] }
    }

    /// Whether some rule has a say over `key`'s value.
    func judges(_ key: String) -> Bool {
        !otherKeys || !rules(for: key).isEmpty
    }

    /// The first rule `value` breaks as the value of `key`, or nil if it conforms.
    public func violation(key: String, value: PropertyListValue) -> SchemaViolation? {
        let rules = rules(for: key)
        if rules.isEmpty, !otherKeys {
            return SchemaViolation(key: key, breach: SchemaBreach(path: [], valueType: value.type, part: .otherKey))
        }
        for rule in rules {
            if let breach = rule.breach(by: value) { return SchemaViolation(key: key, breach: breach) }
        }
        return nil
    }

    /// Refuses `value` as `key`'s value if it breaks the schema: what every door calls.
    public func check(key: String, value: PropertyListValue) throws(StoreError) {
        if let violation = violation(key: key, value: value) { throw .schemaViolation(violation) }
    }

    /// The keys' defaults: what a key shows while it has no value.
    public var defaults: [String: PropertyListValue] {
        keys.compactMapValues(\.defaultValue)
    }
}

/// The key patterns keys matched, for one schema: bounded, and forgotten whole when full (a
/// mount's keys are far fewer; a server sees each store's keys again and again).
private final class MatchedPatterns: Sendable {
    private static let keysKept = 4096
    private let found = Mutex<[String: [Int]]>([:])

    func indexes(of key: String) -> [Int]? { found.withLock { $0[key] } }

    func keep(_ indexes: [Int], for key: String) {
        found.withLock { found in
            if found.count >= Self.keysKept { found.removeAll(keepingCapacity: true) }
            found[key] = indexes
        }
    }
}

/// The bounds a schema is read within.
public enum SchemaLimits {
    /// The largest schema, in bytes of the property list it is written in.
    public static let bytes = 262_144
    /// The most rules, counting every member and item rule.
    public static let rules = 10_000
    /// The most rules inside one another (a key's rule is at depth 1).
    public static let ruleDepth = 16
    /// The most key patterns: each is matched against a key with no rule of its own.
    public static let keyPatterns = 256
    /// The longest description, in bytes of UTF-8.
    public static let descriptionBytes = 4096
    /// The most steps one string's match against a rule's `pattern` may take: a `pattern`
    /// comes with a `maxLength`, and the two multiplied (`ValuePattern`'s bound on a match)
    /// stay within this, so that a check costs milliseconds at most.
    public static let patternSteps = 4_000_000
    /// Bounds passed to the property-list decoder: every rule level is two levels of the
    /// property list, and some to spare.
    static let propertyListDepth = 2 * ruleDepth + 8
    static let objects = 262_144
}

/// Reads a schema's parts, counting the rules, and refuses each mistake with where it is.
private struct SchemaReader {
    private var ruleCount = 0

    private static let ruleMembers: Set<String> = [
        "type", "minimum", "maximum", "minLength", "maxLength", "choices", "pattern", "members", "required",
        "otherMembers", "items", "description", "default",
    ]

    mutating func rule(_ value: PropertyListValue, at place: String, depth: Int, defaultAllowed: Bool) throws(StoreError) -> SchemaRule {
        ruleCount += 1
        guard ruleCount <= SchemaLimits.rules else { throw .invalidSchema("more than \(SchemaLimits.rules) rules") }
        guard depth <= SchemaLimits.ruleDepth else {
            throw .invalidSchema("\(place): rules nest deeper than \(SchemaLimits.ruleDepth)")
        }
        let parts = try dictionary(value, at: place, allowed: Self.ruleMembers)
        func refuse(_ reason: String) -> StoreError { .invalidSchema("\(place): \(reason)") }

        var type: SchemaType?
        if let named = parts["type"] {
            guard case .string(let name) = named, let known = SchemaType(rawValue: name) else {
                throw refuse("type is one of \(SchemaType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            type = known
        }
        let minimum = try number(parts["minimum"], at: "\(place).minimum")
        let maximum = try number(parts["maximum"], at: "\(place).maximum")
        if minimum != nil || maximum != nil {
            guard type?.isNumeric == true else { throw refuse("minimum and maximum need type integer, real or number") }
        }
        if let minimum, let maximum, maximum < minimum { throw refuse("minimum \(minimum) is above maximum \(maximum)") }
        let minimumLength = try count(parts["minLength"], at: "\(place).minLength")
        let maximumLength = try count(parts["maxLength"], at: "\(place).maxLength")
        if minimumLength != nil || maximumLength != nil {
            guard type?.hasLength == true else { throw refuse("minLength and maxLength need type string, data, array or dictionary") }
        }
        if let minimumLength, let maximumLength, maximumLength < minimumLength {
            throw refuse("minLength \(minimumLength) is above maxLength \(maximumLength)")
        }
        var choices: [PropertyListValue]?
        if let listed = parts["choices"] {
            guard case .array(let values) = listed, !values.isEmpty else { throw refuse("choices is a non-empty array of values") }
            if let type, let stray = values.first(where: { !type.admits($0) }) {
                throw refuse("the choice \(stray.schemaWords) is not of type \(type.rawValue)")
            }
            choices = values
        }
        var pattern: ValuePattern?
        if let written = parts["pattern"] {
            guard type == .string else { throw refuse("pattern needs type string") }
            guard case .string(let source) = written else { throw refuse("pattern is a string: a regular expression") }
            do { pattern = try ValuePattern(regularExpression: source) } catch { throw refuse("\(error)") }
            // What bounds a match's time: the string's length times the program's.
            guard let maximumLength else { throw refuse("a pattern needs a maxLength, which bounds the time a match takes") }
            let steps = (maximumLength + 1).multipliedReportingOverflow(by: pattern!.programLength)
            guard !steps.overflow, steps.partialValue <= SchemaLimits.patternSteps else {
                throw refuse("a pattern of \(pattern!.programLength) steps a character with maxLength \(maximumLength) may take more than \(SchemaLimits.patternSteps) steps: lower maxLength or simplify the pattern")
            }
        }
        var members = [String: SchemaRule]()
        var required = [String]()
        var otherMembers = true
        if parts["members"] != nil || parts["required"] != nil || parts["otherMembers"] != nil {
            guard type == .dictionary else { throw refuse("members, required and otherMembers need type dictionary") }
            for (name, memberRule) in try dictionary(parts["members"] ?? .dictionary([:]), at: "\(place).members", allowed: nil) {
                members[name] = try rule(memberRule, at: "\(place).members.\(name)", depth: depth + 1, defaultAllowed: false)
            }
            if let names = parts["required"] {
                guard case .array(let values) = names else { throw refuse("required is an array of member names") }
                for name in values {
                    guard case .string(let member) = name else { throw refuse("required is an array of member names") }
                    required.append(member)
                }
            }
            otherMembers = try flag(parts["otherMembers"], at: "\(place).otherMembers") ?? true
            if !otherMembers, let stray = required.first(where: { members[$0] == nil }) {
                throw refuse("\(stray.debugDescription) is required, but otherMembers is false and no member rule names it")
            }
        }
        var items: SchemaRule?
        if let itemRule = parts["items"] {
            guard type == .array else { throw refuse("items needs type array") }
            items = try rule(itemRule, at: "\(place).items", depth: depth + 1, defaultAllowed: false)
        }
        let description = try text(parts["description"], at: "\(place).description")
        let defaultValue = parts["default"]
        if defaultValue != nil, !defaultAllowed { throw refuse("only a key named in keys has a default") }
        let made = SchemaRule(type: type, minimum: minimum, maximum: maximum, minimumLength: minimumLength,
                              maximumLength: maximumLength, choices: choices, pattern: pattern, members: members,
                              required: required, otherMembers: otherMembers, items: items, description: description,
                              defaultValue: defaultValue)
        if let defaultValue, let breach = made.breach(by: defaultValue) {
            let member = breach.path.isEmpty ? "" : " at member \(breach.path.joined(separator: "."))"
            throw refuse("the default\(member) breaks \(breach.words)")
        }
        return made
    }

    /// A dictionary, whose member names are all in `allowed` when it is given.
    func dictionary(_ value: PropertyListValue, at place: String, allowed: Set<String>?) throws(StoreError) -> [String: PropertyListValue] {
        guard case .dictionary(let members) = value else {
            throw .invalidSchema("\(place) is \(value.type.withArticle), not a dictionary")
        }
        if let allowed, let stray = members.keys.sorted().first(where: { !allowed.contains($0) }) {
            throw .invalidSchema("\(place): unknown member \(stray.debugDescription) (known: \(allowed.sorted().joined(separator: ", ")))")
        }
        return members
    }

    func text(_ value: PropertyListValue?, at place: String) throws(StoreError) -> String? {
        guard let value else { return nil }
        guard case .string(let text) = value else { throw .invalidSchema("\(place) is a string") }
        guard text.utf8.count <= SchemaLimits.descriptionBytes else {
            throw .invalidSchema("\(place) is longer than \(SchemaLimits.descriptionBytes) bytes")
        }
        return text
    }

    func flag(_ value: PropertyListValue?, at place: String) throws(StoreError) -> Bool? {
        guard let value else { return nil }
        guard case .boolean(let flag) = value else { throw .invalidSchema("\(place) is true or false") }
        return flag
    }

    func number(_ value: PropertyListValue?, at place: String) throws(StoreError) -> SchemaNumber? {
        guard let value else { return nil }
        guard let number = SchemaNumber(value) else { throw .invalidSchema("\(place) is a number") }
        if case .real(let real) = number, !real.isFinite { throw .invalidSchema("\(place) is a finite number") }
        return number
    }

    func count(_ value: PropertyListValue?, at place: String) throws(StoreError) -> Int? {
        guard let value else { return nil }
        guard case .integer(let count) = value, count >= 0 else { throw .invalidSchema("\(place) is a whole number, 0 or more") }
        return count
    }
}

extension KeySchema {
    /// What the schema says of `key`, in words: its rule, or each matching pattern's (one
    /// per line, after the pattern), each with its description; nil when no rule names it and
    /// other keys are taken.
    public func describe(_ key: String) -> String? {
        if let rule = keys[key] { return rule.summary }
        let matching = matchingPatterns(key)
        if matching.isEmpty {
            return otherKeys ? nil : "no rule names this key, and the schema takes no key it does not name"
        }
        return matching.map { "pattern \($0.pattern.source): \($0.rule.summary)" }.joined(separator: "\n")
    }
}
