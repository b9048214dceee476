import Foundation

/// Reads an XML property list (Apple's PropertyList-1.0 DTD) from valid UTF-8.
///
/// It takes what Foundation takes: an XML declaration, a DOCTYPE, comments and processing
/// instructions before the root; a `<plist>` root holding one value, or a bare value element
/// as the root; attributes, which it ignores; empty elements (`<string/>`, `<array/>`,
/// `<dict/>`, `<true/>`); `<key>` read as a string where a value is expected. Text may hold
/// the five entities, `&#N;` and `&#xN;` references (any Unicode scalar value, control
/// characters included) and CDATA sections; unlike Foundation's parser, it may also
/// hold comments and processing instructions (`<key><!-- c --></key>` is the empty key), and
/// `<data/>` is empty data. Whitespace inside `<string>` and `<key>` is kept as written. After
/// the root element only whitespace, comments and processing instructions may follow.
///
/// Every value is checked against the value rule (see `PropertyListCodec`) and counted in the
/// budget before it is built.
struct XMLPropertyListReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0
    private(set) var budget: DecodingBudget
    /// Whether the bytes have shown themselves to be XML (a declaration, comment, DOCTYPE or
    /// property-list element). Until they have, a failure means "not XML", and the bytes may
    /// still be an OpenStep value such as `<0fab>`.
    private(set) var recognised = false
    /// Text being unescaped, kept between strings to save allocations.
    private var scratch: [UInt8] = []

    init(_ bytes: UnsafeBufferPointer<UInt8>, budget: DecodingBudget) {
        self.bytes = bytes
        self.budget = budget
    }

    mutating func read() throws(StoreError) -> PropertyListValue {
        while true {
            skipSpace()
            guard at < bytes.count else { throw fail("the document holds no element") }
            guard bytes[at] == UInt8(ascii: "<") else { throw fail("unexpected \(describe(at)) before the first element") }
            if starts("<?") {
                try skipProcessingInstruction()
            } else if starts("<!--") {
                try skipComment()
            } else if starts("<!DOCTYPE") {
                try skipDoctype()
            } else if starts("<!") {
                throw fail("a markup declaration other than DOCTYPE")
            } else {
                break
            }
            recognised = true
        }
        let tagStart = at
        at += 1
        let (name, empty) = try readStartTag()
        guard let tag = Tag(name) else { throw fail("unknown element <\(text(name))>", at: tagStart) }
        recognised = true
        guard tag == .plist else {
            let value = try readValue(tag, empty: empty, depth: 0, start: tagStart)
            try readEnd()
            return value
        }
        guard !empty else { throw fail("the <plist> element is empty", at: tagStart) }
        guard case .element(let first, let firstEmpty, let firstStart) = try nextMarkup(inside: .plist) else {
            throw fail("the <plist> element holds no value", at: tagStart)
        }
        let value = try readValue(first, empty: firstEmpty, depth: 0, start: firstStart)
        if case .element(_, _, let secondStart) = try nextMarkup(inside: .plist) {
            throw fail("the <plist> element holds a second value", at: secondStart)
        }
        try readCloseTag(.plist)
        try readEnd()
        return value
    }

    /// After the root element: whitespace, comments and processing instructions only. A key
    /// holds one value, so anything else (a second value, an appended line) is refused, where
    /// Foundation ignores it.
    private mutating func readEnd() throws(StoreError) {
        while true {
            skipSpace()
            guard at < bytes.count else { return }
            if starts("<!--") {
                try skipComment()
            } else if starts("<?") {
                try skipProcessingInstruction()
            } else {
                throw fail("\(describe(at)) after the property list's value: a key holds one value")
            }
        }
    }

    // MARK: - Values

    private mutating func readValue(_ tag: Tag, empty: Bool, depth: Int, start: Int) throws(StoreError) -> PropertyListValue {
        switch tag {
        case .plist:
            throw fail("a <plist> element inside the property list", at: start)
        case .string, .key:
            let (string, escaped) = empty ? ("", 0) : try readText(closing: tag)
            try budget.scalar(length: CanonicalXML.string(escapedLength: escaped), depth: depth)
            return .string(string)
        case .true, .false:
            if !empty { try readCloseTag(tag) }
            try budget.scalar(length: CanonicalXML.boolean(tag == .true), depth: depth)
            return .boolean(tag == .true)
        case .integer:
            guard !empty else { throw fail("an empty <integer>", at: start) }
            return try readInteger(depth: depth)
        case .real:
            guard !empty else { throw fail("an empty <real>", at: start) }
            let (text, _) = try readText(closing: .real)
            guard let value = Self.real(text) else { throw fail("the <real> holds \(quoted(text)), which is not a number", at: start) }
            try budget.scalar(length: CanonicalXML.real(value), depth: depth)
            return .real(value)
        case .date:
            guard !empty else { throw fail("an empty <date>", at: start) }
            let date = try readDate()
            try budget.scalar(length: CanonicalXML.date, depth: depth)
            return .date(date)
        case .data:
            let data = empty ? [] : try readBase64()
            try budget.scalar(length: CanonicalXML.data(byteCount: data.count), depth: depth)
            return .data(Data(data))
        case .array:
            try budget.open(.array, depth: depth)
            guard !empty else { return .array([]) }
            var items = [PropertyListValue]()
            while case .element(let itemTag, let itemEmpty, let itemStart) = try nextMarkup(inside: .array) {
                items.append(try readValue(itemTag, empty: itemEmpty, depth: depth + 1, start: itemStart))
            }
            try readCloseTag(.array)
            try budget.close(.array, count: items.count, depth: depth)
            return .array(items)
        case .dict:
            try budget.open(.dictionary, depth: depth)
            guard !empty else { return .dictionary([:]) }
            var items = [String: PropertyListValue]()
            while case .element(let keyTag, let keyEmpty, let keyStart) = try nextMarkup(inside: .dict) {
                guard keyTag == .key else { throw fail("a <\(keyTag.name)> where a <key> was expected", at: keyStart) }
                let (key, escaped) = keyEmpty ? ("", 0) : try readText(closing: .key)
                try budget.key(escapedLength: escaped, depth: depth + 1)
                guard case .element(let valueTag, let valueEmpty, let valueStart) = try nextMarkup(inside: .dict) else {
                    throw fail("the key \(quoted(key)) has no value", at: keyStart)
                }
                let value = try readValue(valueTag, empty: valueEmpty, depth: depth + 1, start: valueStart)
                guard items.updateValue(value, forKey: key) == nil else {
                    throw fail("the dictionary holds the key \(quoted(key)) twice", at: keyStart)
                }
            }
            try readCloseTag(.dict)
            try budget.close(.dictionary, count: items.count, depth: depth)
            return .dictionary(items)
        }
    }

    /// Foundation's integer form: optional space, an optional sign, optional space, then
    /// decimal digits or `0x` and hexadecimal digits, up to the closing tag.
    private mutating func readInteger(depth: Int) throws(StoreError) -> PropertyListValue {
        let start = at
        skipIntegerSpace()
        var negative = false
        if at < bytes.count, bytes[at] == UInt8(ascii: "-") || bytes[at] == UInt8(ascii: "+") {
            negative = bytes[at] == UInt8(ascii: "-")
            at += 1
            skipIntegerSpace()
        }
        var radix: UInt64 = 10
        if bytes.count - at >= 2, bytes[at] == UInt8(ascii: "0"), bytes[at + 1] | 0x20 == UInt8(ascii: "x") {
            radix = 16
            at += 2
        }
        var magnitude: UInt64 = 0
        var digits = 0
        var overflow = false
        while at < bytes.count, bytes[at] != UInt8(ascii: "<") {
            guard let digit = Self.digit(bytes[at]), UInt64(digit) < radix else {
                throw fail("the <integer> holds \(describe(at))")
            }
            let (times, o1) = magnitude.multipliedReportingOverflow(by: radix)
            let (sum, o2) = times.addingReportingOverflow(UInt64(digit))
            overflow = overflow || o1 || o2
            magnitude = sum
            digits += 1
            at += 1
        }
        guard digits > 0 else { throw fail("the <integer> holds no digits", at: start) }
        let written = text(start..<at)
        try readCloseTag(.integer)
        let value: PropertyListValue
        if overflow || (negative && magnitude > UInt64(Int.max) + 1) {
            throw fail("the integer \(quoted(written)) is outside −9223372036854775808…18446744073709551615", at: start)
        } else if negative {
            value = .integer(magnitude == UInt64(Int.max) + 1 ? Int.min : -Int(magnitude))
        } else if magnitude <= UInt64(Int.max) {
            value = .integer(Int(magnitude))
        } else {
            value = .unsignedInteger(magnitude)
        }
        switch value {
        case .integer(let i): try budget.scalar(length: CanonicalXML.integer(i), depth: depth)
        case .unsignedInteger(let u): try budget.scalar(length: CanonicalXML.integer(u), depth: depth)
        default: break
        }
        return value
    }

    /// `YYYY-MM-DDThh:mm:ssZ`, a real date and time in UTC within years 1–9999.
    private mutating func readDate() throws(StoreError) -> Date {
        let start = at
        func number(_ width: Int?) -> Int? {
            var value = 0
            var count = 0
            while at < bytes.count, let digit = Self.decimal(bytes[at]), count < (width ?? 9) {
                value = value * 10 + digit
                count += 1
                at += 1
            }
            return count > 0 && (width == nil || count == width) ? value : nil
        }
        func separator(_ ascii: Unicode.Scalar) -> Bool {
            guard at < bytes.count, bytes[at] == UInt8(ascii: ascii) else { return false }
            at += 1
            return true
        }
        let year = number(nil)
        let month = separator("-") ? number(2) : nil
        let day = separator("-") ? number(2) : nil
        let hour = separator("T") ? number(2) : nil
        let minute = separator(":") ? number(2) : nil
        let second = separator(":") ? number(2) : nil
        guard let year, let month, let day, let hour, let minute, let second, separator("Z"),
              at < bytes.count, bytes[at] == UInt8(ascii: "<") else {
            throw fail("the <date> is not of the form YYYY-MM-DDThh:mm:ssZ", at: start)
        }
        guard let seconds = PropertyListDate.seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second) else {
            throw fail("the date \(text(start..<at)) is not a date and time within 0001-01-01T00:00:00Z…9999-12-31T23:59:59Z", at: start)
        }
        try readCloseTag(.date)
        return Date(timeIntervalSince1970: Double(seconds))
    }

    /// Base64 up to the closing tag: whitespace between characters, padding only at the end.
    private mutating func readBase64() throws(StoreError) -> [UInt8] {
        let start = at
        var out = [UInt8]()
        var group: UInt32 = 0
        var sextets = 0
        var padding = 0
        var finished = false
        while at < bytes.count, bytes[at] != UInt8(ascii: "<") {
            let byte = bytes[at]
            if Self.isSpace(byte) { at += 1; continue }
            guard !finished else { throw fail("the <data> continues after its base64 padding") }
            if byte == UInt8(ascii: "=") {
                guard sextets + padding >= 2 else { throw fail("the <data> holds a misplaced '='") }
                padding += 1
                if sextets + padding == 4 {
                    if sextets == 2 {
                        out.append(UInt8(truncatingIfNeeded: group >> 4))
                    } else {
                        out.append(UInt8(truncatingIfNeeded: group >> 10))
                        out.append(UInt8(truncatingIfNeeded: group >> 2))
                    }
                    finished = true
                }
            } else {
                guard padding == 0 else { throw fail("the <data> holds a misplaced '='") }
                guard let value = Self.base64Value(byte) else { throw fail("the <data> holds \(describe(at)), which is not base64") }
                group = group << 6 | UInt32(value)
                sextets += 1
                if sextets == 4 {
                    out.append(UInt8(truncatingIfNeeded: group >> 16))
                    out.append(UInt8(truncatingIfNeeded: group >> 8))
                    out.append(UInt8(truncatingIfNeeded: group))
                    sextets = 0
                    group = 0
                }
            }
            at += 1
        }
        guard finished || (sextets == 0 && padding == 0) else {
            throw fail("the base64 in <data> does not end on a whole group of 4 characters (padding with '=' is required)", at: start)
        }
        try readCloseTag(.data)
        return out
    }

    // MARK: - Text

    /// The text of a `<string>`, `<key>` or `<real>` up to its closing tag (consumed), with the
    /// length of its canonical (escaped) form.
    private mutating func readText(closing tag: Tag) throws(StoreError) -> (String, Int) {
        let start = at
        while at < bytes.count, bytes[at] != UInt8(ascii: "<"), bytes[at] != UInt8(ascii: "&") { at += 1 }
        if starts("</") {
            let run = UnsafeBufferPointer(rebasing: bytes[start..<at])
            let string = String(decoding: run, as: UTF8.self)
            let escaped = CanonicalXML.escapedLength(run)
            try readCloseTag(tag)
            return (string, escaped)
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<at]))
        while true {
            guard at < bytes.count else { throw fail("the <\(tag.name)> never closes", at: start) }
            if bytes[at] == UInt8(ascii: "&") {
                let scalar = try readReference()
                scratch.append(contentsOf: scalar.utf8)
            } else if starts("</") {
                break
            } else if starts("<![CDATA[") {
                at += 9
                let contentStart = at
                guard let end = find("]]>") else { throw fail("a CDATA section never ends", at: contentStart - 9) }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<end]))
                at = end + 3
            } else if starts("<!--") {
                try skipComment()
            } else if starts("<?") {
                try skipProcessingInstruction()
            } else if bytes[at] == UInt8(ascii: "<") {
                throw fail("an element inside <\(tag.name)>")
            } else {
                let runStart = at
                while at < bytes.count, bytes[at] != UInt8(ascii: "<"), bytes[at] != UInt8(ascii: "&") { at += 1 }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<at]))
            }
        }
        let escaped = scratch.withUnsafeBufferPointer { CanonicalXML.escapedLength($0) }
        let string = String(decoding: scratch, as: UTF8.self)
        try readCloseTag(tag)
        return (string, escaped)
    }

    /// `&lt;` `&gt;` `&amp;` `&apos;` `&quot;` `&#N;` `&#xN;`, at `&`.
    private mutating func readReference() throws(StoreError) -> Unicode.Scalar {
        let start = at
        var end = at + 1
        while end < bytes.count, end - start <= 12, bytes[end] != UInt8(ascii: ";") { end += 1 }
        guard end < bytes.count, bytes[end] == UInt8(ascii: ";") else { throw fail("a '&' that starts no entity or character reference") }
        let name = UnsafeBufferPointer(rebasing: bytes[(start + 1)..<end])
        at = end + 1
        switch text(name) {
        case "lt": return "<"
        case "gt": return ">"
        case "amp": return "&"
        case "apos": return "'"
        case "quot": return "\""
        default: break
        }
        guard name.count >= 2, name[0] == UInt8(ascii: "#") else { throw fail("unknown entity &\(text(name));", at: start) }
        let hex = name[1] == UInt8(ascii: "x")
        let digits = UnsafeBufferPointer(rebasing: name[(hex ? 2 : 1)...])
        var value: UInt32 = 0
        for byte in digits {
            guard let digit = Self.digit(byte), digit < (hex ? 16 : 10), value <= 0x10FFFF else {
                throw fail("the character reference &\(text(name)); is not a number", at: start)
            }
            value = value * (hex ? 16 : 10) + UInt32(digit)
        }
        guard !digits.isEmpty, let scalar = Unicode.Scalar(value) else {
            throw fail("the character reference &\(text(name)); names no Unicode character", at: start)
        }
        return scalar
    }

    // MARK: - Markup

    private enum Markup {
        case element(Tag, empty: Bool, start: Int)
        /// `</` is next.
        case close
    }

    /// The next element or closing tag inside `parent`, past whitespace, comments and
    /// processing instructions.
    private mutating func nextMarkup(inside parent: Tag) throws(StoreError) -> Markup {
        while true {
            skipSpace()
            guard at < bytes.count else { throw fail("the <\(parent.name)> never closes") }
            guard bytes[at] == UInt8(ascii: "<") else { throw fail("text \(describe(at)) inside <\(parent.name)>, outside any element") }
            if starts("</") { return .close }
            if starts("<!--") {
                try skipComment()
            } else if starts("<?") {
                try skipProcessingInstruction()
            } else if starts("<!") {
                throw fail("a <! declaration inside <\(parent.name)>")
            } else {
                let start = at
                at += 1
                let (name, empty) = try readStartTag()
                guard let tag = Tag(name) else { throw fail("unknown element <\(text(name))>", at: start) }
                return .element(tag, empty: empty, start: start)
            }
        }
    }

    /// The name of the tag whose `<` is just behind, and whether it is empty (`<x/>`); moves
    /// past its `>`. Attributes are skipped.
    private mutating func readStartTag() throws(StoreError) -> (UnsafeBufferPointer<UInt8>, Bool) {
        let start = at
        var nameEnd: Int?
        while at < bytes.count, bytes[at] != UInt8(ascii: ">") {
            if nameEnd == nil, Self.isSpace(bytes[at]) { nameEnd = at }
            at += 1
        }
        guard at < bytes.count else { throw fail("a tag never ends", at: start - 1) }
        let empty = at > start && bytes[at - 1] == UInt8(ascii: "/")
        let end = nameEnd ?? (empty ? at - 1 : at)
        at += 1
        guard end > start else { throw fail("a tag without a name", at: start - 1) }
        return (UnsafeBufferPointer(rebasing: bytes[start..<end]), empty)
    }

    /// `</name>`, with optional whitespace before the `>`.
    private mutating func readCloseTag(_ tag: Tag) throws(StoreError) {
        let start = at
        let name = tag.literal
        let count = name.utf8CodeUnitCount
        guard starts("</"), bytes.count - (at + 2) >= count,
              (0..<count).allSatisfy({ bytes[at + 2 + $0] == name.utf8Start[$0] }) else {
            throw fail("expected </\(tag.name)>", at: start)
        }
        at += 2 + count
        skipSpace()
        guard at < bytes.count, bytes[at] == UInt8(ascii: ">") else { throw fail("expected </\(tag.name)>", at: start) }
        at += 1
    }

    private mutating func skipComment() throws(StoreError) {
        let start = at
        at += 4
        guard let end = find("-->") else { throw fail("a comment never ends", at: start) }
        at = end + 3
    }

    private mutating func skipProcessingInstruction() throws(StoreError) {
        let start = at
        at += 2
        guard let end = find("?>") else { throw fail("a processing instruction never ends", at: start) }
        at = end + 2
    }

    /// `<!DOCTYPE …>`, with quoted identifiers and an internal subset in brackets.
    private mutating func skipDoctype() throws(StoreError) {
        let start = at
        at += 9
        var quote: UInt8?
        var inSubset = false
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            if let open = quote {
                if byte == open { quote = nil }
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                quote = byte
            } else if byte == UInt8(ascii: "[") {
                inSubset = true
            } else if byte == UInt8(ascii: "]") {
                inSubset = false
            } else if byte == UInt8(ascii: ">"), !inSubset {
                return
            }
        }
        throw fail("the DOCTYPE never ends", at: start)
    }

    // MARK: - Bytes

    private func starts(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - at >= count else { return false }
        let pointer = literal.utf8Start
        for k in 0..<count where bytes[at + k] != pointer[k] { return false }
        return true
    }

    /// The offset of the next `literal` from `at`.
    private func find(_ literal: StaticString) -> Int? {
        let count = literal.utf8CodeUnitCount
        let pointer = literal.utf8Start
        var k = at
        while bytes.count - k >= count {
            if bytes[k] == pointer[0] {
                var same = true
                for j in 1..<count where bytes[k + j] != pointer[j] { same = false; break }
                if same { return k }
            }
            k += 1
        }
        return nil
    }

    private mutating func skipSpace() {
        while at < bytes.count, Self.isSpace(bytes[at]) { at += 1 }
    }

    /// Foundation's space before an integer: ASCII controls and space, DEL, and the Unicode
    /// spaces U+2000–U+200B, U+202F, U+205F, U+3000.
    private mutating func skipIntegerSpace() {
        while at < bytes.count {
            let byte = bytes[at]
            if byte < 0x21 || byte == 0x7F {
                at += 1
            } else if byte == 0xE2 || byte == 0xE3, bytes.count - at >= 3 {
                let (second, third) = (bytes[at + 1], bytes[at + 2])
                let space = byte == 0xE2
                    ? (second == 0x80 && ((0x80...0x8B).contains(third) || third == 0xAF)) || (second == 0x81 && third == 0x9F)
                    : second == 0x80 && third == 0x80
                guard space else { return }
                at += 3
            } else {
                return
            }
        }
    }

    static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x09 || byte == 0x0D
    }

    private static func decimal(_ byte: UInt8) -> Int? {
        (0x30...0x39).contains(byte) ? Int(byte - 0x30) : nil
    }

    private static func digit(_ byte: UInt8) -> Int? {
        switch byte {
        case 0x30...0x39: Int(byte - 0x30)
        case 0x41...0x46: Int(byte - 0x41 + 10)
        case 0x61...0x66: Int(byte - 0x61 + 10)
        default: nil
        }
    }

    private static func base64Value(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x41...0x5A: byte - 0x41
        case 0x61...0x7A: byte - 0x61 + 26
        case 0x30...0x39: byte - 0x30 + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }

    /// Foundation's `<real>`: optional leading whitespace, then `nan`, `inf`, `+inf`, `-inf`,
    /// `infinity`, `+infinity`, `-infinity` (any case) or a decimal number with an optional
    /// sign, fraction and exponent; one past the range of Double is an infinity.
    static func real(_ text: String) -> Double? {
        let trimmed = text.drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        switch trimmed.lowercased() {
        case "nan": return .nan
        case "inf", "+inf", "infinity", "+infinity": return .infinity
        case "-inf", "-infinity": return -.infinity
        default: break
        }
        var utf8 = trimmed.utf8[...]
        if let sign = utf8.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { utf8 = utf8.dropFirst() }
        let integerDigits = utf8.prefix { (0x30...0x39).contains($0) }.count
        utf8 = utf8.dropFirst(integerDigits)
        var fractionDigits = 0
        if utf8.first == UInt8(ascii: ".") {
            utf8 = utf8.dropFirst()
            fractionDigits = utf8.prefix { (0x30...0x39).contains($0) }.count
            utf8 = utf8.dropFirst(fractionDigits)
        }
        guard integerDigits + fractionDigits > 0 else { return nil }
        if let e = utf8.first, e | 0x20 == UInt8(ascii: "e") {
            utf8 = utf8.dropFirst()
            if let sign = utf8.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { utf8 = utf8.dropFirst() }
            let exponentDigits = utf8.prefix { (0x30...0x39).contains($0) }.count
            guard exponentDigits > 0 else { return nil }
            utf8 = utf8.dropFirst(exponentDigits)
        }
        guard utf8.isEmpty else { return nil }
        return Double(Substring(trimmed))
    }

    // MARK: - Messages

    private func fail(_ reason: String, at position: Int? = nil) -> StoreError {
        .invalidPropertyList("line \(PropertyListText.line(in: bytes, at: position ?? at)): \(reason)")
    }

    private func text(_ range: Range<Int>) -> String { text(UnsafeBufferPointer(rebasing: bytes[range])) }

    private func text(_ buffer: UnsafeBufferPointer<UInt8>) -> String { PropertyListText.shortened(String(decoding: buffer, as: UTF8.self)) }

    private func quoted(_ string: String) -> String { PropertyListText.quoted(string) }

    private func describe(_ position: Int) -> String { PropertyListText.describe(bytes, at: position) }
}

/// The elements of the property-list DTD.
private enum Tag: Equatable, CaseIterable {
    case plist, array, dict, key, string, data, date, integer, real, `true`, `false`

    init?(_ name: UnsafeBufferPointer<UInt8>) {
        for tag in Self.allCases {
            let literal = tag.literal
            guard literal.utf8CodeUnitCount == name.count else { continue }
            if (0..<name.count).allSatisfy({ name[$0] == literal.utf8Start[$0] }) {
                self = tag
                return
            }
        }
        return nil
    }

    var literal: StaticString {
        switch self {
        case .plist: "plist"
        case .array: "array"
        case .dict: "dict"
        case .key: "key"
        case .string: "string"
        case .data: "data"
        case .date: "date"
        case .integer: "integer"
        case .real: "real"
        case .true: "true"
        case .false: "false"
        }
    }

    var name: String { literal.description }
}
