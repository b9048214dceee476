import Foundation
import GRDB

/// The store's schema as this device holds it: the remote's, as sync last fetched it, kept
/// across restarts. Every local write is checked against its rules before anything is
/// committed; values the store held before it came stay (`violations` lists them).
public struct HeldSchema: Sendable {
    /// The remote's version of it; 0 while the store never had one.
    public let version: Int64
    /// The property list as it was set; nil when the store has no schema.
    public let text: [UInt8]?
    /// What is checked: the rules read from `text`. Nil when there is no schema, or when this
    /// kvsfs cannot read the one the remote gave (`unreadable` says why): the remote still
    /// judges every push against it.
    public let rules: KeySchema?
    public let unreadable: String?

    public static let none = HeldSchema(version: 0, text: nil)

    /// The schema the remote gives at `version`, read here; text this kvsfs cannot read is
    /// held as unreadable rather than refused: it is the remote's, and the remote enforces it.
    public init(version: Int64, text: [UInt8]?) {
        self.version = version
        self.text = text
        guard let text else {
            (rules, unreadable) = (nil, nil)
            return
        }
        do {
            (rules, unreadable) = (try KeySchema(decoding: text), nil)
        } catch {
            (rules, unreadable) = (nil, error.description)
        }
    }

    /// Refuses `xml` (a value as the store keeps it) as `key`'s value if it breaks the rules;
    /// decodes it only when a rule could say so.
    func check(key: String, xml: [UInt8]) throws(StoreError) {
        guard let rules, rules.judges(key) else { return }
        try rules.check(key: key, value: try PropertyListCodec.decode(xml))
    }
}

extension KeyValueStore {
    /// The schema this store holds.
    public var schema: HeldSchema { state.withLock { $0.schema } }

    /// Takes the remote's schema at `version` (nil text: the store has none), keeping it
    /// across restarts. Values already held that break it stay. Returns what is held now.
    @discardableResult
    public func takeSchema(version: Int64, text: [UInt8]?) throws(StoreError) -> HeldSchema {
        guard version >= 0 else { throw .invalidSchema("the remote gave the version \(version), below 0") }
        if let text, text.count > SchemaLimits.bytes {
            throw .invalidSchema("the remote gave a schema of \(text.count) bytes; a schema is at most \(SchemaLimits.bytes)")
        }
        let held = HeldSchema(version: version, text: text)
        try state.withLock { (state: inout State) throws(StoreError) in
            try write(&state) { db in
                try db.execute(sql: "INSERT OR REPLACE INTO keySchema (one, version, text) VALUES (1, ?, ?)",
                               arguments: [version, text.map { Data($0) }])
            }
            state.schema = held
        }
        schemaObserver.withLock { $0 }?(held)
        return held
    }

    /// Calls `observer` after each schema the store takes, with what it holds then (the
    /// mount's defaults follow the schema's).
    public func observeSchema(_ observer: @escaping @Sendable (HeldSchema) -> Void) {
        schemaObserver.withLock { $0 = observer }
    }

    /// Every held value that breaks `schema` (the held one when nil), by key.
    public func violations(of schema: KeySchema? = nil) -> [SchemaViolation] {
        let (entries, held) = state.withLock { ($0.values.entries, $0.schema.rules) }
        guard let rules = schema ?? held else { return [] }
        var found = [SchemaViolation]()
        for key in entries.keys.sorted() where rules.judges(key) {
            guard let entry = entries[key] else { continue }
            do {
                try rules.check(key: key, value: try PropertyListCodec.decode(entry.xml))
            } catch .schemaViolation(let violation) {
                found.append(violation)
            } catch {
                // A held value is one the store once decoded: not a schema's to judge otherwise.
                continue
            }
        }
        return found
    }

    static func loadSchema(_ db: Database) throws -> HeldSchema {
        guard let row = try Row.fetchOne(db, sql: "SELECT version, text FROM keySchema WHERE one = 1") else { return .none }
        let text: Data? = row["text"]
        return HeldSchema(version: row["version"], text: text.map { [UInt8]($0) })
    }
}

extension HeldSchema {
    /// The most bytes `settledViolation` judges: past it, a value written in many pieces would
    /// be decoded again at every piece, and the whole value alone is judged.
    public static let writtenBytesJudged = 16_384

    /// A rule that the first bytes of `key`'s value break whatever bytes follow them (so that
    /// the mount can refuse them as they come). Nil when they break none, or when what follows
    /// could still mend it; the whole value is judged in any case.
    ///
    /// A whole document that opens with `<`, `{`, `[` or `(` is settled: what may follow it is
    /// whitespace alone. Other text is a string so far, and with more bytes stays one (a bare
    /// word may grow, until whitespace ends it; a quoted string is whole), becomes an OpenStep
    /// dictionary (`a = b;`) or a JSON real (`1.5e+3`), or is no value: for a rule of a type
    /// that is neither a dictionary nor a real, its type is settled, and for a string rule,
    /// what more characters cannot mend (a whole string's every part; a growing word's length
    /// past `maxLength`, choices none of which begins with it, a pattern nothing can complete).
    /// A binary property list is judged whole: its trailer comes last.
    public func settledViolation(ofWritten bytes: [UInt8], forKey key: String) -> SchemaViolation? {
        guard judgesWritten(bytes, forKey: key) else { return nil }
        do {
            return settledViolation(of: try PropertyListCodec.decode(bytes), written: bytes, forKey: key)
        } catch {
            // Not a whole value yet (or not one at all, which the prefix check and the commit
            // say): nothing for the schema to judge.
            return nil
        }
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
    /// What a structured value (XML, a dictionary, an array, OpenStep) opens with.
    private static let openings = Array("<{[(".utf8)

    /// Whether the first bytes of `key`'s value are worth decoding for `settledViolation`:
    /// a rule judges the key, they are within `writtenBytesJudged`, and they may be whole (a
    /// structure that has closed, or text).
    public func judgesWritten(_ bytes: [UInt8], forKey key: String) -> Bool {
        guard let rules, bytes.count <= Self.writtenBytesJudged, rules.judges(key) else { return false }
        guard let first = bytes.first(where: { !Self.isSpace($0) }), let last = bytes.last(where: { !Self.isSpace($0) }),
              !bytes.starts(with: Array("bplist".utf8)) else { return false }
        // A structure can only be whole once it has closed.
        return !Self.openings.contains(first) || Array(">}])".utf8).contains(last)
    }

    /// `settledViolation`, given `value`, what the first bytes `written` decode to.
    public func settledViolation(of value: PropertyListValue, written bytes: [UInt8], forKey key: String) -> SchemaViolation? {
        guard let rules, let first = bytes.first(where: { !Self.isSpace($0) }),
              let violation = rules.violation(key: key, value: value) else { return nil }
        if Self.openings.contains(first) { return violation }
        if case .otherKey = violation.breach.part { return violation }
        guard case .string(let text) = value else { return nil }
        let grows = first != UInt8(ascii: "\"") && first != UInt8(ascii: "'") && !Self.isSpace(bytes.last!)
        for rule in rules.rules(for: key) {
            guard let type = rule.type, !type.admits(.dictionary([:])), !type.admits(.real(0)) else { continue }
            func settled(_ part: SchemaBreach.Part) -> SchemaViolation {
                SchemaViolation(key: key, breach: SchemaBreach(path: [], valueType: .string, part: part))
            }
            guard type.admits(value) else { return settled(.type(type)) }
            guard grows else {
                if let breach = rule.breach(by: value) { return SchemaViolation(key: key, breach: breach) }
                continue
            }
            let length = text.unicodeScalars.count
            if let maximum = rule.maximumLength, length > maximum { return settled(.maximumLength(maximum, found: length)) }
            if let choices = rule.choices, !choices.contains(where: { choice in
                guard case .string(let word) = choice else { return false }
                return word.unicodeScalars.starts(with: text.unicodeScalars)
            }) {
                return settled(.choices(choices))
            }
            if let pattern = rule.pattern, !pattern.mayMatch(after: text) { return settled(.pattern(pattern.source)) }
        }
        return nil
    }
}

/// A count of held values that break the held schema, at the store's revision and the
/// schema's version it was made at.
struct ViolationTally {
    let revision: UInt64
    let version: Int64
    let count: Int
}

extension KeyValueStore {
    /// How many held values break the held schema (`kvsfs status`): counted again only once a
    /// value or the schema changed since the last count.
    public var violationCount: Int {
        let (revision, version) = state.withLock { ($0.revision, $0.schema.version) }
        if let tally = violationTally.withLock({ $0 }), tally.revision == revision, tally.version == version { return tally.count }
        // Counted from a state at least as new as the tag: a change meanwhile moves the
        // revision past the tag, and the next call counts again.
        let count = violations().count
        violationTally.withLock { $0 = ViolationTally(revision: revision, version: version, count: count) }
        return count
    }
}
