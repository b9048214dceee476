/// Whether the bytes written to a file so far, from offset 0, can still begin a value that
/// `PropertyListCodec.decode` accepts: what lets a write be refused at the `write()` after
/// which no continuation could be valid, where a shell hears it (shells ignore `close()`).
///
/// Fed in order, as the bytes arrive. It follows the three text formats at once (XML,
/// OpenStep and JSON, `XMLPrefix`, `OpenStepPrefix`, `JSONPrefix`) over the same bytes, each
/// dropping out once no document of its format can begin with them, and refuses when none is
/// left. It follows structure only: element names and their nesting, brackets, quotes,
/// escapes, what may follow what, and what may follow a complete value (white space and
/// comments). Everything else (integer ranges, base64, dates, duplicate keys, the bounds) is
/// left to the decode at commit, which stays the authority.
///
/// Invariant: every prefix of every value the decoder accepts is never refused (a property
/// test and the `prefix` fuzz target hold it to that). Where the check cannot follow (a binary
/// list after its header, text in UTF-16 or UTF-32 or with a byte-order mark, an XML
/// declaration naming another encoding, nesting past `maximumDepth`), it gives up for good:
/// `undecidable`. Cost: a few branches per byte, and nothing allocated but the container
/// stacks, which are bounded.
public struct ValuePrefixCheck: Sendable {
    public enum Verdict: Equatable, Sendable {
        /// The bytes so far can still begin a value.
        case viable
        /// The check cannot tell, and will not: the decode at commit decides.
        case undecidable
        /// No continuation can be a value; why, in words.
        case refused(String)
    }

    /// Nesting followed; deeper than the decoder's own limit (128) plus a `<plist>`, the check
    /// gives up.
    static let maximumDepth = 130

    private var offset = 0
    private var verdict = Verdict.viable
    /// How many leading bytes match `bplist`; at 6 the decoder reads the bytes as binary only.
    private var binaryMatched = 0
    private var declaration = Declaration()
    private var utf8 = UTF8Validity()
    private var xml = XMLPrefix()
    private var openStep = OpenStepPrefix()
    private var json = JSONPrefix()
    /// Which of the three may still read the bytes.
    private var alive: (xml: Bool, openStep: Bool, json: Bool) = (true, true, true)
    /// Whether a recogniser gave up: then a refusal can no longer be certain.
    private var gaveUp = false
    /// The first byte that is not white space, which says whose refusal to show.
    private var first: UInt8?
    /// The last refusal of each recogniser, and where it came.
    private var reasons: (xml: (Int, String)?, openStep: (Int, String)?, json: (Int, String)?) = (nil, nil, nil)

    public init() {}

    /// Feeds the next bytes (in order, from offset 0); once refused or undecidable, the same
    /// verdict for good.
    public mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Verdict {
        guard verdict == .viable else { return verdict }
        for byte in bytes {
            step(byte)
            offset += 1
            guard verdict == .viable else { break }
        }
        return verdict
    }

    /// Why no continuation of `bytes` can be a value, or nil when one can (or the check
    /// cannot tell).
    public static func refusal(of bytes: some Collection<UInt8>) -> String? {
        var check = ValuePrefixCheck()
        let verdict = Array(bytes).withUnsafeBytes { check.feed($0) }
        if case .refused(let reason) = verdict { return reason }
        return nil
    }

    private mutating func step(_ byte: UInt8) {
        // UTF-16 and UTF-32 (a zero among the first two bytes) and byte-order marks: the
        // text is not read as UTF-8, which is all this follows.
        if offset == 0, byte == 0x00 || byte == 0xFE || byte == 0xFF || byte == 0xEF { return verdict = .undecidable }
        if offset == 1, byte == 0x00 { return verdict = .undecidable }
        // `bplist` makes the decoder read the bytes as a binary list alone; its version byte
        // is `0` and any one byte more, after which only the decode can tell.
        if binaryMatched == offset, offset < 6, byte == Self.binaryMagic[offset] { binaryMatched += 1 }
        if binaryMatched == 6, offset >= 6 {
            if offset == 6, byte != UInt8(ascii: "0") {
                return verdict = .refused("a binary property list begins with bplist0 and one more byte")
            }
            if offset == 7 { verdict = .undecidable }
            return
        }
        switch declaration.step(byte) {
        case .unknown: break
        case .otherEncoding: return verdict = .undecidable
        }
        if !utf8.step(byte) {
            return verdict = .refused("byte \(offset) is not valid UTF-8 (text must be UTF-8, or say its encoding)")
        }
        if first == nil, !Self.isSpace(byte) { first = byte }
        if alive.xml {
            switch xml.step(byte) {
            case .alive: break
            case .gaveUp: (alive.xml, gaveUp) = (false, true)
            case .dead(let reason): (alive.xml, reasons.xml) = (false, (offset, reason))
            }
        }
        if alive.openStep {
            switch openStep.step(byte) {
            case .alive: break
            case .gaveUp: (alive.openStep, gaveUp) = (false, true)
            case .dead(let reason): (alive.openStep, reasons.openStep) = (false, (offset, reason))
            }
        }
        if alive.json {
            switch json.step(byte) {
            case .alive: break
            case .gaveUp: (alive.json, gaveUp) = (false, true)
            case .dead(let reason): (alive.json, reasons.json) = (false, (offset, reason))
            }
        }
        if !alive.xml, !alive.openStep, !alive.json {
            verdict = gaveUp ? .undecidable : .refused(reason())
        }
    }

    /// The refusal that says most: that of the format that read furthest; for a tie, the one
    /// the first character points to (`<` XML, `[` and `{` JSON, else OpenStep).
    private func reason() -> String {
        var order = [reasons.openStep, reasons.json, reasons.xml]
        switch first {
        case UInt8(ascii: "<"): order = [reasons.xml, reasons.openStep, reasons.json]
        case UInt8(ascii: "["), UInt8(ascii: "{"): order = [reasons.json, reasons.openStep, reasons.xml]
        default: break
        }
        let candidates = order.compactMap { $0 }
        guard let furthest = candidates.map(\.0).max(), furthest > 0 else {
            return first.map { "\(Self.describe($0)) cannot begin a property list or JSON value" } ?? "not a value"
        }
        return candidates.first { $0.0 == furthest }!.1
    }

    private static let binaryMagic = Array("bplist".utf8)

    static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    /// A byte for a message: the character quoted, or its number.
    static func describe(_ byte: UInt8) -> String {
        switch byte {
        case 0x21...0x7E: "'\(Character(Unicode.Scalar(byte)))'"
        case 0x20: "a space"
        case 0x0A: "a line break"
        default: "byte 0x\(byte < 16 ? "0" : "")\(String(byte, radix: 16))"
        }
    }
}

/// What one format's recogniser makes of the next byte.
enum PrefixFate {
    /// Bytes so far can still begin a document of this format.
    case alive
    /// The recogniser cannot follow the document any further.
    case gaveUp
    /// No document of this format begins with the bytes so far.
    case dead(String)
}

// MARK: - Encoding

/// A leading `<?xml … ?>` declaration: one naming an encoding the decoder does not read as
/// UTF-8 (`PropertyListText`) makes the check give up.
private struct Declaration {
    /// How many bytes of `<?xml` matched; past it, the declaration's text is collected.
    private var matched = 0
    private var settled = false
    private var collected: [UInt8] = []

    enum Outcome { case unknown, otherEncoding }

    static let opening = Array("<?xml".utf8)
    /// The names `PropertyListText` reads as UTF-8.
    static let utf8Names = ["utf-8", "utf8", "us-ascii", "ascii", "utf-16", "utf-16be", "utf-16le", "utf-32", "utf-32be", "utf-32le"].map { Array($0.utf8) }

    mutating func step(_ byte: UInt8) -> Outcome {
        guard !settled else { return .unknown }
        if matched < Self.opening.count {
            if byte == Self.opening[matched] { matched += 1 } else { settled = true }
            return .unknown
        }
        if byte == UInt8(ascii: "?") || byte == UInt8(ascii: ">") {
            settled = true
            return Self.namesOtherEncoding(collected) ? .otherEncoding : .unknown
        }
        // Not ASCII inside the declaration, or a long one: whatever it names, give up.
        guard byte < 0x80, collected.count < 512 else { return .otherEncoding }
        if collected.isEmpty { collected.reserveCapacity(64) }
        collected.append(byte)
        return .unknown
    }

    /// Whether the declaration's text names, in `encoding="…"`, one encoding that is not
    /// read as UTF-8. Bytes only: this runs at the first write of most XML values.
    private static func namesOtherEncoding(_ text: [UInt8]) -> Bool {
        let word = Array("encoding".utf8)
        guard let start = text.indices.first(where: { text[$0...].starts(with: word) }) else { return false }
        var at = start + word.count
        func skipSpace() { while at < text.count, ValuePrefixCheck.isSpace(text[at]) { at += 1 } }
        skipSpace()
        guard at < text.count, text[at] == UInt8(ascii: "=") else { return false }
        at += 1
        skipSpace()
        guard at < text.count, text[at] == UInt8(ascii: "\"") || text[at] == UInt8(ascii: "'") else { return false }
        let quote = text[at]
        let name = text[(at + 1)...].prefix { $0 != quote }.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        return !utf8Names.contains(name)
    }
}

/// Valid UTF-8 so far: overlong forms, surrogates and values past U+10FFFF are not; a
/// sequence cut off at the end may still be completed.
private struct UTF8Validity {
    /// Continuation bytes still due, and the range the next one must fall in.
    private var due = 0
    private var low: UInt8 = 0x80
    private var high: UInt8 = 0xBF

    mutating func step(_ byte: UInt8) -> Bool {
        if due > 0 {
            guard (low...high).contains(byte) else { return false }
            due -= 1
            (low, high) = (0x80, 0xBF)
            return true
        }
        switch byte {
        case 0x00...0x7F: return true
        case 0xC2...0xDF: due = 1
        case 0xE0: due = 2; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: due = 2
        case 0xED: due = 2; high = 0x9F
        case 0xF0: due = 3; low = 0x90
        case 0xF1...0xF3: due = 3
        case 0xF4: due = 3; high = 0x8F
        default: return false
        }
        return true
    }
}

// MARK: - JSON

/// RFC 8259 text, as `JSONPropertyListReader` reads it: one value, white space around it, and
/// no `null` (which has no property-list form).
struct JSONPrefix {
    private enum Container { case object, array }

    private enum State {
        /// A value is due; `closing`: right after `[`, where `]` may come instead.
        case value(closing: Bool)
        /// A member name is due; `closing`: right after `{`, where `}` may come instead.
        case name(closing: Bool)
        case colon
        case afterValue
        /// Inside a string (a member name or a value).
        case string(name: Bool, escape: Escape)
        case number(NumberPart)
        /// Inside `true` or `false`, `matched` bytes of it read.
        case literal(Literal, matched: Int)
    }

    private enum Escape { case none, backslash, hex(Int) }
    private enum NumberPart { case sign, zero, integer, point, fraction, exponentMark, exponentSign, exponent }
    private enum Literal {
        case `true`, `false`
        private static let trueBytes = Array("true".utf8)
        private static let falseBytes = Array("false".utf8)
        var bytes: [UInt8] { self == .true ? Self.trueBytes : Self.falseBytes }
    }

    private var stack: [Container] = []
    private var state = State.value(closing: false)

    mutating func step(_ byte: UInt8) -> PrefixFate {
        switch state {
        case .string(let name, let escape):
            return string(byte, name: name, escape: escape)
        case .number(let part):
            if let next = Self.number(part, byte) {
                state = .number(next)
                return .alive
            }
            switch part {
            case .zero, .integer, .fraction, .exponent:
                state = .afterValue
                return step(byte)
            case .sign, .point, .exponentMark, .exponentSign:
                return .dead("a JSON number is cut short before \(ValuePrefixCheck.describe(byte))")
            }
        case .literal(let literal, let matched):
            let bytes = literal.bytes
            guard byte == bytes[matched] else { return .dead("\(ValuePrefixCheck.describe(byte)) inside what began as JSON \(literal)") }
            state = matched + 1 == bytes.count ? .afterValue : .literal(literal, matched: matched + 1)
            return .alive
        default:
            break
        }
        if ValuePrefixCheck.isSpace(byte) { return .alive }
        switch state {
        case .value(let closing):
            if closing, byte == UInt8(ascii: "]") { return close(.array) }
            return value(byte)
        case .name(let closing):
            if closing, byte == UInt8(ascii: "}") { return close(.object) }
            guard byte == UInt8(ascii: "\"") else { return .dead("\(ValuePrefixCheck.describe(byte)) where a JSON member name was expected") }
            state = .string(name: true, escape: .none)
            return .alive
        case .colon:
            guard byte == UInt8(ascii: ":") else { return .dead("\(ValuePrefixCheck.describe(byte)) where ':' was expected after a JSON member name") }
            state = .value(closing: false)
            return .alive
        case .afterValue:
            switch (byte, stack.last) {
            case (UInt8(ascii: ","), .array?): state = .value(closing: false)
            case (UInt8(ascii: ","), .object?): state = .name(closing: false)
            case (UInt8(ascii: "]"), .array?): return close(.array)
            case (UInt8(ascii: "}"), .object?): return close(.object)
            case (_, nil): return .dead("a key holds one value: \(ValuePrefixCheck.describe(byte)) follows a complete JSON value")
            default: return .dead("\(ValuePrefixCheck.describe(byte)) where ',' or the end of the JSON \(stack.last == .array ? "array" : "object") was expected")
            }
            return .alive
        case .string, .number, .literal:
            return .alive  // handled above
        }
    }

    private mutating func value(_ byte: UInt8) -> PrefixFate {
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            guard stack.count < ValuePrefixCheck.maximumDepth else { return .gaveUp }
            stack.append(byte == UInt8(ascii: "{") ? .object : .array)
            state = byte == UInt8(ascii: "{") ? .name(closing: true) : .value(closing: true)
        case UInt8(ascii: "\""): state = .string(name: false, escape: .none)
        case UInt8(ascii: "-"): state = .number(.sign)
        case UInt8(ascii: "0"): state = .number(.zero)
        case UInt8(ascii: "1")...UInt8(ascii: "9"): state = .number(.integer)
        case UInt8(ascii: "t"): state = .literal(.true, matched: 1)
        case UInt8(ascii: "f"): state = .literal(.false, matched: 1)
        case UInt8(ascii: "n"): return .dead("JSON null has no property-list form")
        default: return .dead("\(ValuePrefixCheck.describe(byte)) where a JSON value was expected")
        }
        return .alive
    }

    private mutating func close(_ container: Container) -> PrefixFate {
        stack.removeLast()
        state = .afterValue
        return .alive
    }

    private mutating func string(_ byte: UInt8, name: Bool, escape: Escape) -> PrefixFate {
        switch escape {
        case .none:
            switch byte {
            case UInt8(ascii: "\""): state = name ? .colon : .afterValue
            case UInt8(ascii: "\\"): state = .string(name: name, escape: .backslash)
            case 0x00..<0x20: return .dead("a JSON string holds control character 0x\(String(byte, radix: 16)) unescaped")
            default: break
            }
        case .backslash:
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"),
                 UInt8(ascii: "r"), UInt8(ascii: "t"):
                state = .string(name: name, escape: .none)
            case UInt8(ascii: "u"): state = .string(name: name, escape: .hex(4))
            default: return .dead("\\\(Character(Unicode.Scalar(byte))) is not a JSON escape")
            }
        case .hex(let left):
            guard byte.isHexDigit else { return .dead("a JSON \\u escape needs four hex digits") }
            state = .string(name: name, escape: left == 1 ? .none : .hex(left - 1))
        }
        return .alive
    }

    /// The part of a number after `byte`, or nil when `byte` does not go on the number.
    private static func number(_ part: NumberPart, _ byte: UInt8) -> NumberPart? {
        let digit = (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
        switch part {
        case .sign: return byte == UInt8(ascii: "0") ? .zero : digit ? .integer : nil
        case .zero, .integer:
            if digit { return part == .integer ? .integer : nil }
            if byte == UInt8(ascii: ".") { return .point }
            return byte | 0x20 == UInt8(ascii: "e") ? .exponentMark : nil
        case .point, .fraction:
            if digit { return .fraction }
            return part == .fraction && byte | 0x20 == UInt8(ascii: "e") ? .exponentMark : nil
        case .exponentMark: return byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") ? .exponentSign : digit ? .exponent : nil
        case .exponentSign, .exponent: return digit ? .exponent : nil
        }
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        switch self {
        case 0x30...0x39, 0x41...0x46, 0x61...0x66: true
        default: false
        }
    }
}

// MARK: - OpenStep

/// An OpenStep property list, as `OpenStepPropertyListReader` reads it: at the top, nothing,
/// one value, or the entries of a dictionary without braces (a strings file); comments and
/// white space around every token.
struct OpenStepPrefix {
    private enum Container { case dictionary, array }

    /// What may come next, between tokens.
    private enum Expect {
        /// The start: a value, or nothing at all (an empty dictionary).
        case top
        /// After the top value; a string may turn out to be a strings file's first key.
        case afterTop(wasString: Bool)
        /// A dictionary's (or a strings file's) key, or its end.
        case key
        case equalsOrSemicolon
        /// A value after `=`.
        case entryValue
        case semicolon
        /// A value in an array, or its end.
        case item
        case commaOrClose
    }

    /// A token being read.
    private enum Token {
        case none
        /// An unquoted string: letters, digits and `_ $ / : . -`.
        case word
        case quoted(quote: UInt8, escaped: Bool)
        /// `<…>` data; `odd`: a hex digit waits for its pair.
        case data(odd: Bool)
        /// A `/` where white space may be: a comment, or (where a string may start) a word.
        case slash
        case lineComment
        case blockComment(star: Bool)
        /// U+2028 or U+2029 (white space), `matched` bytes of it read.
        case separator(matched: Int)
    }

    private var stack: [Container] = []
    private var expect = Expect.top
    private var token = Token.none
    /// Whether the top level is a strings file (entries without braces).
    private var stringsFile = false

    mutating func step(_ byte: UInt8) -> PrefixFate {
        switch token {
        case .word:
            if Self.isWordCharacter(byte) { return .alive }
            token = .none
            let fate = valueEnded(wasString: true)
            guard case .alive = fate else { return fate }
        case .quoted(let quote, let escaped):
            if escaped {
                token = .quoted(quote: quote, escaped: false)
            } else if byte == UInt8(ascii: "\\") {
                token = .quoted(quote: quote, escaped: true)
            } else if byte == quote {
                token = .none
                return valueEnded(wasString: true)
            }
            return .alive
        case .data(let odd):
            if byte.isHexDigit {
                token = .data(odd: !odd)
            } else if odd {
                return .dead("OpenStep data holds an odd number of hex digits, or \(ValuePrefixCheck.describe(byte)) among them")
            } else if byte == UInt8(ascii: ">") {
                token = .none
                return valueEnded(wasString: false)
            } else if byte >= 0x80 {
                return .gaveUp
            } else if !ValuePrefixCheck.isSpace(byte) {
                return .dead("OpenStep data holds \(ValuePrefixCheck.describe(byte)), which is not a hex digit")
            }
            return .alive
        case .lineComment:
            if byte == 0x0A || byte == 0x0D { token = .none }
            return .alive
        case .blockComment(let star):
            if star, byte == UInt8(ascii: "/") {
                token = .none
            } else {
                token = .blockComment(star: byte == UInt8(ascii: "*"))
            }
            return .alive
        case .separator(let matched):
            guard matched == 1 ? byte == 0x80 : byte == 0xA8 || byte == 0xA9 else { return .dead("a character where OpenStep expects white space") }
            token = matched == 1 ? .separator(matched: 2) : .none
            return .alive
        case .slash:
            token = .none
            if byte == UInt8(ascii: "/") {
                token = .lineComment
                return .alive
            }
            if byte == UInt8(ascii: "*") {
                token = .blockComment(star: false)
                return .alive
            }
            // Not a comment: the `/` began a word, where a string may start.
            guard startsString else { return .dead("'/' where OpenStep expects \(expected)") }
            token = .word
            return step(byte)
        case .none:
            break
        }
        return between(byte)
    }

    /// A byte between tokens.
    private mutating func between(_ byte: UInt8) -> PrefixFate {
        if (0x09...0x0D).contains(byte) || byte == 0x20 { return .alive }
        switch byte {
        case 0xE2:
            token = .separator(matched: 1)
            return .alive
        case UInt8(ascii: "/"):
            token = .slash
            return .alive
        default:
            break
        }
        switch expect {
        case .top, .entryValue, .item:
            if case .item = expect, byte == UInt8(ascii: ")") { return close(.array) }
            return beginValue(byte)
        case .key:
            if byte == UInt8(ascii: "}"), !stack.isEmpty { return close(.dictionary) }
            guard beginString(byte) else {
                return .dead("\(ValuePrefixCheck.describe(byte)) where OpenStep expects \(expected)")
            }
            return .alive
        case .afterTop(let wasString):
            guard wasString, byte == UInt8(ascii: "=") || byte == UInt8(ascii: ";") else {
                if wasString, Self.isWordCharacter(byte) || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                    return .dead("two bare words: a bare word is a string; quote text with spaces (\"two words\"), or write JSON or XML")
                }
                return .dead("a key holds one value: \(ValuePrefixCheck.describe(byte)) follows a complete value")
            }
            stringsFile = true
            expect = byte == UInt8(ascii: "=") ? .entryValue : .key
            return .alive
        case .equalsOrSemicolon:
            switch byte {
            case UInt8(ascii: "="): expect = .entryValue
            case UInt8(ascii: ";"): expect = .key
            default: return .dead("\(ValuePrefixCheck.describe(byte)) where OpenStep expects '=' or ';' after a key")
            }
            return .alive
        case .semicolon:
            guard byte == UInt8(ascii: ";") else { return .dead("\(ValuePrefixCheck.describe(byte)) where OpenStep expects ';' after an entry") }
            expect = .key
            return .alive
        case .commaOrClose:
            switch byte {
            case UInt8(ascii: ","): expect = .item
            case UInt8(ascii: ")"): return close(.array)
            default: return .dead("\(ValuePrefixCheck.describe(byte)) where OpenStep expects ',' or ')' in an array")
            }
            return .alive
        }
    }

    private mutating func beginValue(_ byte: UInt8) -> PrefixFate {
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "("):
            guard stack.count < ValuePrefixCheck.maximumDepth else { return .gaveUp }
            stack.append(byte == UInt8(ascii: "{") ? .dictionary : .array)
            expect = byte == UInt8(ascii: "{") ? .key : .item
            return .alive
        case UInt8(ascii: "<"):
            token = .data(odd: false)
            return .alive
        default:
            guard beginString(byte) else { return .dead("\(ValuePrefixCheck.describe(byte)) where OpenStep expects \(expected)") }
            return .alive
        }
    }

    private mutating func beginString(_ byte: UInt8) -> Bool {
        if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
            token = .quoted(quote: byte, escaped: false)
        } else if Self.isWordCharacter(byte) {
            token = .word
        } else {
            return false
        }
        return true
    }

    /// A value (or a key) has been read whole, in the place `expect` said.
    private mutating func valueEnded(wasString: Bool) -> PrefixFate {
        switch expect {
        case .top: expect = .afterTop(wasString: wasString)
        case .key: expect = .equalsOrSemicolon
        case .entryValue: expect = .semicolon
        case .item: expect = .commaOrClose
        case .afterTop, .equalsOrSemicolon, .semicolon, .commaOrClose: break
        }
        return .alive
    }

    private mutating func close(_ container: Container) -> PrefixFate {
        stack.removeLast()
        if stack.isEmpty, !stringsFile {
            expect = .afterTop(wasString: false)
            return .alive
        }
        // The container was the value of an entry, or an item.
        expect = stack.last == .array ? .commaOrClose : .semicolon
        return .alive
    }

    /// Whether a string may start where the reader is.
    private var startsString: Bool {
        switch expect {
        case .top, .key, .entryValue, .item: true
        case .afterTop, .equalsOrSemicolon, .semicolon, .commaOrClose: false
        }
    }

    private var expected: String {
        switch expect {
        case .top, .entryValue, .item: "a value"
        case .key: "a key"
        case .afterTop: "nothing more"
        case .equalsOrSemicolon: "'=' or ';'"
        case .semicolon: "';'"
        case .commaOrClose: "',' or ')'"
        }
    }

    /// The reader's own rule for an unquoted string's characters.
    static func isWordCharacter(_ byte: UInt8) -> Bool { OpenStepPropertyListReader.isUnquoted(byte) }
}

// MARK: - XML

/// An XML property list, as `XMLPropertyListReader` reads it: a prolog (declaration,
/// comments, processing instructions, DOCTYPE), one root (`<plist>` holding one value, or a
/// value element), and after it only white space, comments and processing instructions.
struct XMLPrefix {
    private enum Tag: Int, CaseIterable {
        case plist, array, dict, key, string, data, date, integer, real, `true`, `false`

        private static let names = allCases.map { Array(String(describing: $0).utf8) }

        var name: [UInt8] { Self.names[rawValue] }
        var isContainer: Bool { self == .plist || self == .array || self == .dict }
        /// An element that may not be empty (`<integer/>`).
        var needsText: Bool { self == .integer || self == .real || self == .date }

        /// Every tag, a bit each: what a name may be before its first byte.
        static let every = UInt16(1 << allCases.count) - 1

        /// Of `candidates`, the tags whose name has `byte` at `position`.
        static func narrowed(_ candidates: UInt16, at position: Int, to byte: UInt8) -> UInt16 {
            var kept: UInt16 = 0
            for (index, name) in names.enumerated() where candidates & (1 << index) != 0 && position < name.count && name[position] == byte {
                kept |= 1 << index
            }
            return kept
        }

        /// The tag among `candidates` whose name is `length` bytes long: the one a name of that
        /// length that matched them all so far is.
        static func whole(_ candidates: UInt16, length: Int) -> Tag? {
            names.indices.first { candidates & (1 << $0) != 0 && names[$0].count == length }.flatMap(Tag.init(rawValue:))
        }

        /// The `length` bytes that matched `candidates`, for a message.
        static func seen(_ candidates: UInt16, length: Int) -> [UInt8] {
            guard let index = names.indices.first(where: { candidates & (1 << $0) != 0 }) else { return [] }
            return Array(names[index].prefix(length))
        }
    }

    private struct Frame {
        let tag: Tag
        /// Elements read inside it: a `<plist>` holds one, a `<dict>` keys and values in turn.
        var children = 0
    }

    private enum State {
        /// Between markup: text in a leaf element, white space elsewhere.
        case between
        case lessThan
        /// After `<!`: which of `openings` the bytes since began, and how many there are.
        case bang(Int?, Int)
        case comment(dashes: Int)
        case cdata(brackets: Int)
        case instruction(question: Bool)
        case doctype(quote: UInt8?, subset: Bool)
        /// A start tag's name: how many bytes so far, and which tags (a bit each) it may be.
        case startName(length: Int, candidates: UInt16)
        case startNameSlash(length: Int, candidates: UInt16)
        case attributes(Tag, slash: Bool)
        case closeName(matched: Int)
        case closeEnd
    }

    /// Open elements, the root first.
    private var stack: [Frame] = []
    /// Whether the root element has been read whole.
    private var rootDone = false
    private var state = State.between

    mutating func step(_ byte: UInt8) -> PrefixFate {
        switch state {
        case .between:
            if byte == UInt8(ascii: "<") {
                state = .lessThan
                return .alive
            }
            if let parent = stack.last, !parent.tag.isContainer { return .alive }
            guard ValuePrefixCheck.isSpace(byte) else {
                if rootDone { return .dead("a key holds one value: \(ValuePrefixCheck.describe(byte)) follows the property list's value") }
                if let parent = stack.last { return .dead("text \(ValuePrefixCheck.describe(byte)) inside <\(parent.tag)>, outside any element") }
                return .dead("\(ValuePrefixCheck.describe(byte)) before the first element")
            }
            return .alive
        case .lessThan:
            switch byte {
            case UInt8(ascii: "/"):
                guard !stack.isEmpty else { return .dead("a closing tag outside any element") }
                state = .closeName(matched: 0)
            case UInt8(ascii: "!"): state = .bang(nil, 0)
            case UInt8(ascii: "?"): state = .instruction(question: false)
            default:
                guard !ValuePrefixCheck.isSpace(byte), byte != UInt8(ascii: ">") else { return .dead("a tag without a name") }
                let candidates = Tag.narrowed(Tag.every, at: 0, to: byte)
                guard candidates != 0 else { return Self.unknown([byte]) }
                state = .startName(length: 1, candidates: candidates)
            }
            return .alive
        case .bang(let chosen, let seen):
            // A comment may stand anywhere, CDATA in text, a DOCTYPE before the root. The first
            // byte after `<!` chooses one (their first bytes differ).
            let opening: Int
            if let chosen {
                opening = chosen
            } else {
                let inLeaf = stack.last.map { !$0.tag.isContainer } ?? false
                let allowed = [true, inLeaf, stack.isEmpty && !rootDone]
                guard let index = Self.openings.indices.first(where: { allowed[$0] && Self.openings[$0][0] == byte }) else {
                    return .dead("a <! declaration the property list cannot hold here")
                }
                opening = index
            }
            let bytes = Self.openings[opening]
            guard bytes[seen] == byte else { return .dead("a <! declaration the property list cannot hold here") }
            guard seen + 1 == bytes.count else {
                state = .bang(opening, seen + 1)
                return .alive
            }
            switch opening {
            case 0: state = .comment(dashes: 0)
            case 1: state = .cdata(brackets: 0)
            default: state = .doctype(quote: nil, subset: false)
            }
            return .alive
        case .comment(let dashes):
            state = byte == UInt8(ascii: ">") && dashes >= 2 ? .between : .comment(dashes: byte == UInt8(ascii: "-") ? dashes + 1 : 0)
            return .alive
        case .cdata(let brackets):
            state = byte == UInt8(ascii: ">") && brackets >= 2 ? .between : .cdata(brackets: byte == UInt8(ascii: "]") ? brackets + 1 : 0)
            return .alive
        case .instruction(let question):
            state = byte == UInt8(ascii: ">") && question ? .between : .instruction(question: byte == UInt8(ascii: "?"))
            return .alive
        case .doctype(let quote, let subset):
            if let quote {
                state = .doctype(quote: byte == quote ? nil : quote, subset: subset)
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                state = .doctype(quote: byte, subset: subset)
            } else if byte == UInt8(ascii: "[") || byte == UInt8(ascii: "]") {
                state = .doctype(quote: nil, subset: byte == UInt8(ascii: "["))
            } else if byte == UInt8(ascii: ">"), !subset {
                state = .between
            }
            return .alive
        case .startName(let length, let candidates):
            if ValuePrefixCheck.isSpace(byte) || byte == UInt8(ascii: ">") {
                guard let tag = Tag.whole(candidates, length: length) else { return Self.unknown(Tag.seen(candidates, length: length)) }
                if byte == UInt8(ascii: ">") { return open(tag, empty: false) }
                state = .attributes(tag, slash: false)
                return .alive
            }
            if byte == UInt8(ascii: "/") {
                state = .startNameSlash(length: length, candidates: candidates)
                return .alive
            }
            let narrowed = Tag.narrowed(candidates, at: length, to: byte)
            guard narrowed != 0 else { return Self.unknown(Tag.seen(candidates, length: length) + [byte]) }
            state = .startName(length: length + 1, candidates: narrowed)
            return .alive
        case .startNameSlash(let length, let candidates):
            let seen = Tag.seen(candidates, length: length)
            guard byte == UInt8(ascii: ">") else { return Self.unknown(seen + [UInt8(ascii: "/"), byte]) }
            guard let tag = Tag.whole(candidates, length: length) else { return Self.unknown(seen) }
            return open(tag, empty: true)
        case .attributes(let tag, _) where byte == UInt8(ascii: ">"):
            guard case .attributes(_, let slash) = state else { return .alive }
            return open(tag, empty: slash)
        case .attributes(let tag, _):
            state = .attributes(tag, slash: byte == UInt8(ascii: "/"))
            return .alive
        case .closeName(let matched):
            let expected = stack.last!.tag
            let name = expected.name
            if matched == name.count {
                if byte == UInt8(ascii: ">") { return close() }
                guard ValuePrefixCheck.isSpace(byte) else { return .dead("a closing tag where </\(expected)> was expected") }
                state = .closeEnd
                return .alive
            }
            guard byte == name[matched] else { return .dead("a closing tag where </\(expected)> was expected") }
            state = .closeName(matched: matched + 1)
            return .alive
        case .closeEnd:
            if byte == UInt8(ascii: ">") { return close() }
            guard ValuePrefixCheck.isSpace(byte) else { return .dead("a closing tag where </\(stack.last!.tag)> was expected") }
            return .alive
        }
    }

    /// What may follow `<!`: a comment, a CDATA section, a DOCTYPE.
    private static let openings = [Array("--".utf8), Array("[CDATA[".utf8), Array("DOCTYPE".utf8)]

    private static func unknown(_ seen: [UInt8]) -> PrefixFate {
        .dead("<\(String(decoding: seen.prefix(40), as: UTF8.self))…> is not a property-list element")
    }

    private mutating func open(_ tag: Tag, empty: Bool) -> PrefixFate {
        state = .between
        if rootDone { return .dead("a key holds one value: an element follows the property list's value") }
        if let parent = stack.last {
            if !parent.tag.isContainer { return .dead("an element inside <\(parent.tag)>") }
            if tag == .plist { return .dead("a <plist> element inside the property list") }
            if parent.tag == .plist, parent.children >= 1 { return .dead("the <plist> element holds a second value") }
            if parent.tag == .dict, parent.children % 2 == 0, tag != .key { return .dead("a <\(tag)> where a <key> was expected") }
        } else if tag == .plist, empty {
            return .dead("the <plist> element is empty")
        }
        if empty {
            if tag.needsText { return .dead("an empty <\(tag)>") }
            return valueDone()
        }
        guard stack.count < ValuePrefixCheck.maximumDepth else { return .gaveUp }
        stack.append(Frame(tag: tag))
        return .alive
    }

    private mutating func close() -> PrefixFate {
        state = .between
        let frame = stack.removeLast()
        if frame.tag == .plist, frame.children == 0 { return .dead("the <plist> element holds no value") }
        if frame.tag == .dict, frame.children % 2 == 1 { return .dead("a key without a value in a <dict>") }
        return valueDone()
    }

    /// An element has been read whole.
    private mutating func valueDone() -> PrefixFate {
        if stack.isEmpty {
            rootDone = true
        } else {
            stack[stack.count - 1].children += 1
        }
        return .alive
    }
}
