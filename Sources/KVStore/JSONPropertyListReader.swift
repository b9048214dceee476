/// Reads one JSON value (RFC 8259) from valid UTF-8 as a property-list value.
///
/// Objects are dictionaries, arrays arrays, strings strings, `true` and `false` booleans. A
/// number without fraction or exponent is an integer, and must lie within −2^63…2^64−1; any
/// other number is a real, and must lie within the range of Double (`1e400` is refused, not
/// read as infinity). `null` has no property-list form and is refused, as is whatever RFC
/// 8259 does not allow: leading zeros, `+1`, `.5`, `5.`, hex, `NaN`, trailing commas, raw
/// control characters in strings, lone surrogates in `\u` escapes, and anything but
/// whitespace (space, tab, line feed, carriage return) after the value. An object holding one
/// member name twice (by Swift `String` equality) is refused.
///
/// Every piece is counted in the budget as soon as it is read, as the other readers count it,
/// so that depth, object count and canonical XML size are checked before the containers
/// around it are built.
struct JSONPropertyListReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0
    private(set) var budget: DecodingBudget
    /// Where the value being read sits, for the messages that name it.
    private var path = PropertyListPath()
    /// String contents being unescaped, kept between strings to save allocations.
    private var scratch: [UInt8] = []

    init(_ bytes: UnsafeBufferPointer<UInt8>, budget: DecodingBudget) {
        self.bytes = bytes
        self.budget = budget
    }

    mutating func read() throws(StoreError) -> PropertyListValue {
        skipSpace()
        guard at < bytes.count else { throw fail("the text holds no JSON value") }
        let value = try readValue(depth: 0)
        skipSpace()
        guard at == bytes.count else { throw fail("\(describe(at)) after the JSON value: a key holds one value") }
        return value
    }

    // MARK: - Values

    /// The value starting at `at` (past any whitespace), which sits at `depth`.
    private mutating func readValue(depth: Int) throws(StoreError) -> PropertyListValue {
        guard at < bytes.count else { throw fail("the text ends where a value was expected") }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            return try readObject(depth: depth)
        case UInt8(ascii: "["):
            return try readArray(depth: depth)
        case UInt8(ascii: "\""):
            let (string, escaped) = try readString()
            try budget.scalar(length: CanonicalXML.string(escapedLength: escaped), depth: depth)
            return .string(string)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try readNumber(depth: depth)
        default:
            let start = at
            let word = readWord()
            switch word {
            case "true", "false":
                try budget.scalar(length: CanonicalXML.boolean(word == "true"), depth: depth)
                return .boolean(word == "true")
            case "null":
                throw fail("JSON null has no property-list form\(path.isEmpty ? "" : " (at \(path))")", at: start)
            case "":
                throw fail("\(describe(start)) where a value was expected", at: start)
            default:
                throw fail("\(quoted(word)) is not a JSON value", at: start)
            }
        }
    }

    private mutating func readObject(depth: Int) throws(StoreError) -> PropertyListValue {
        let start = at
        at += 1
        try budget.open(.dictionary, depth: depth)
        var items = [String: PropertyListValue]()
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "}") {
            at += 1
            return .dictionary(items)
        }
        while true {
            guard at < bytes.count else { throw fail("the object opened on line \(line(start)) never closes") }
            guard bytes[at] == UInt8(ascii: "\"") else {
                throw fail("\(describe(at)) where a member name (a string in double quotes) was expected")
            }
            let keyStart = at
            let (key, escaped) = try readString()
            try budget.key(escapedLength: escaped, depth: depth + 1)
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: ":") else {
                throw fail("\(describe(at)) where ':' was expected after the member name \(quoted(key))")
            }
            at += 1
            skipSpace()
            path.enter(.key(key))
            let value = try readValue(depth: depth + 1)
            path.leave()
            guard items.updateValue(value, forKey: key) == nil else {
                throw fail("the object holds the member name \(quoted(key)) twice", at: keyStart)
            }
            skipSpace()
            guard at < bytes.count else { throw fail("the object opened on line \(line(start)) never closes") }
            if bytes[at] == UInt8(ascii: "}") { break }
            guard bytes[at] == UInt8(ascii: ",") else { throw fail("\(describe(at)) where ',' or '}' was expected") }
            at += 1
            skipSpace()
        }
        at += 1
        try budget.close(.dictionary, count: items.count, depth: depth)
        return .dictionary(items)
    }

    private mutating func readArray(depth: Int) throws(StoreError) -> PropertyListValue {
        let start = at
        at += 1
        try budget.open(.array, depth: depth)
        var items = [PropertyListValue]()
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "]") {
            at += 1
            return .array(items)
        }
        while true {
            guard at < bytes.count else { throw fail("the array opened on line \(line(start)) never closes") }
            path.enter(.index(items.count))
            items.append(try readValue(depth: depth + 1))
            path.leave()
            skipSpace()
            guard at < bytes.count else { throw fail("the array opened on line \(line(start)) never closes") }
            if bytes[at] == UInt8(ascii: "]") { break }
            guard bytes[at] == UInt8(ascii: ",") else { throw fail("\(describe(at)) where ',' or ']' was expected") }
            at += 1
            skipSpace()
        }
        at += 1
        try budget.close(.array, count: items.count, depth: depth)
        return .array(items)
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`: an integer when it has neither
    /// fraction nor exponent, else a real.
    private mutating func readNumber(depth: Int) throws(StoreError) -> PropertyListValue {
        let start = at
        let negative = bytes[at] == UInt8(ascii: "-")
        if negative { at += 1 }
        let integerStart = at
        let integerDigits = skipDigits()
        guard integerDigits > 0 else { throw fail("'-' is not followed by a digit", at: start) }
        if integerDigits > 1, bytes[integerStart] == UInt8(ascii: "0") {
            throw fail("the number \(text(start..<at)) has a leading zero, which JSON does not allow", at: start)
        }
        var isReal = false
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
            at += 1
            isReal = true
            guard skipDigits() > 0 else { throw fail("the number \(text(start..<at)) has no digits after its '.'", at: start) }
        }
        if at < bytes.count, bytes[at] | 0x20 == UInt8(ascii: "e") {
            at += 1
            isReal = true
            if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard skipDigits() > 0 else { throw fail("the number \(text(start..<at)) has no digits in its exponent", at: start) }
        }
        guard isReal else { return try integer(negative: negative, digits: integerStart..<at, depth: depth) }
        let written = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
        guard let value = Double(written), value.isFinite else {
            throw fail("the number \(text(start..<at)) is out of range for a real", at: start)
        }
        try budget.scalar(length: CanonicalXML.real(value), depth: depth)
        return .real(value)
    }

    /// The integer of the decimal `digits`, within −2^63…2^64−1.
    private mutating func integer(negative: Bool, digits: Range<Int>, depth: Int) throws(StoreError) -> PropertyListValue {
        var magnitude: UInt64 = 0
        var overflow = false
        for index in digits {
            let (times, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
            overflow = overflow || o1 || o2
            magnitude = sum
        }
        let start = negative ? digits.lowerBound - 1 : digits.lowerBound
        if overflow || (negative && magnitude > UInt64(Int.max) + 1) {
            throw fail("the integer \(text(start..<digits.upperBound)) is outside −9223372036854775808…18446744073709551615", at: start)
        }
        if negative {
            let value = magnitude == UInt64(Int.max) + 1 ? Int.min : -Int(magnitude)
            try budget.scalar(length: CanonicalXML.integer(value), depth: depth)
            return .integer(value)
        }
        if magnitude <= UInt64(Int.max) {
            try budget.scalar(length: CanonicalXML.integer(Int(magnitude)), depth: depth)
            return .integer(Int(magnitude))
        }
        try budget.scalar(length: CanonicalXML.integer(magnitude), depth: depth)
        return .unsignedInteger(magnitude)
    }

    // MARK: - Strings

    /// The string whose opening quote is at `at`, with the length of its canonical (escaped)
    /// form; moves past its closing quote.
    private mutating func readString() throws(StoreError) -> (String, Int) {
        let start = at
        at += 1
        let contentStart = at
        while at < bytes.count, bytes[at] != UInt8(ascii: "\""), bytes[at] != UInt8(ascii: "\\"), bytes[at] >= 0x20 { at += 1 }
        if at < bytes.count, bytes[at] == UInt8(ascii: "\"") {
            let run = UnsafeBufferPointer(rebasing: bytes[contentStart..<at])
            at += 1
            return (String(decoding: run, as: UTF8.self), CanonicalXML.escapedLength(run))
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<at]))
        while true {
            guard at < bytes.count else { throw fail("the string opened on line \(line(start)) never closes", at: start) }
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 {
                throw fail("a string holds the control character U+\(hex4(UInt32(byte))) unescaped, which JSON does not allow (write \\u\(hex4(UInt32(byte))))")
            }
            if byte == UInt8(ascii: "\\") {
                let scalar = try readEscape()
                scratch.append(contentsOf: scalar.utf8)
            } else {
                let runStart = at
                while at < bytes.count, bytes[at] != UInt8(ascii: "\""), bytes[at] != UInt8(ascii: "\\"), bytes[at] >= 0x20 { at += 1 }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<at]))
            }
        }
        at += 1
        let escaped = scratch.withUnsafeBufferPointer { CanonicalXML.escapedLength($0) }
        return (String(decoding: scratch, as: UTF8.self), escaped)
    }

    /// One escape, at its backslash: `\" \\ \/ \b \f \n \r \t`, or `\uXXXX` (a surrogate pair
    /// as two of them).
    private mutating func readEscape() throws(StoreError) -> Unicode.Scalar {
        let start = at
        at += 1
        guard at < bytes.count else { throw fail("a string ends in a backslash", at: start) }
        let byte = bytes[at]
        at += 1
        switch byte {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{8}"
        case UInt8(ascii: "f"): return "\u{C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let high = try readUTF16Unit(start)
            if (0xDC00...0xDFFF).contains(high) { throw fail("the escape \\u\(hex4(high)) is a lone surrogate", at: start) }
            guard (0xD800...0xDBFF).contains(high) else { return Unicode.Scalar(high)! }
            let lowStart = at
            guard bytes.count - at >= 2, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "u") else {
                throw fail("the escape \\u\(hex4(high)) is a lone surrogate", at: start)
            }
            at += 2
            let low = try readUTF16Unit(lowStart)
            guard (0xDC00...0xDFFF).contains(low) else { throw fail("the escape \\u\(hex4(high)) is a lone surrogate", at: start) }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))!
        default:
            at -= 1
            throw fail("a backslash followed by \(describe(at)) is not a JSON escape", at: start)
        }
    }

    /// The four hex digits after `\u`.
    private mutating func readUTF16Unit(_ escapeStart: Int) throws(StoreError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard at < bytes.count, let digit = Self.hex(bytes[at]) else {
                throw fail("a \\u escape without four hex digits", at: escapeStart)
            }
            value = value << 4 | UInt32(digit)
            at += 1
        }
        return value
    }

    // MARK: - Bytes

    /// The ASCII letters and digits from `at`, for a literal (`true`) or a word that is none.
    private mutating func readWord() -> String {
        let start = at
        while at < bytes.count, Self.isWordByte(bytes[at]) { at += 1 }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
    }

    /// The number of decimal digits skipped.
    private mutating func skipDigits() -> Int {
        let start = at
        while at < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[at]) { at += 1 }
        return at - start
    }

    private mutating func skipSpace() {
        while at < bytes.count, XMLPropertyListReader.isSpace(bytes[at]) { at += 1 }
    }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"): true
        default: false
        }
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    // MARK: - Messages

    private func hex4(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    private func line(_ position: Int) -> Int { PropertyListText.line(in: bytes, at: position) }

    private func fail(_ reason: String, at position: Int? = nil) -> StoreError {
        .invalidPropertyList("line \(line(position ?? at)): \(reason)")
    }

    private func text(_ range: Range<Int>) -> String {
        PropertyListText.shortened(String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self))
    }

    private func quoted(_ string: String) -> String { PropertyListText.quoted(string) }

    /// The character at `position`, quoted, or named when it is a control character.
    private func describe(_ position: Int) -> String {
        guard position < bytes.count, bytes[position] < 0x20 || bytes[position] == 0x7F else {
            return PropertyListText.describe(bytes, at: position)
        }
        return "the control character U+\(hex4(UInt32(bytes[position])))"
    }
}

extension PropertyListCodec {
    /// Parses one JSON value (RFC 8259, see `JSONPropertyListReader`) in UTF-8, UTF-16 or
    /// UTF-32 (found as `PropertyListText` finds a text's encoding); throws
    /// `StoreError.invalidPropertyList` for anything else, an empty document included, and for
    /// input over the depth and object limits, and `StoreError.valueTooLarge` when the value's
    /// canonical XML would pass `limits.maxBytes`.
    package static func decodeJSON(_ bytes: some Collection<UInt8>, limits: PropertyListDecodingLimits = .standard) throws(StoreError) -> PropertyListValue {
        let result = bytes.withContiguousStorageIfAvailable { decodeJSON(buffer: $0, limits: limits) }
            ?? Array(bytes).withUnsafeBufferPointer { decodeJSON(buffer: $0, limits: limits) }
        return try result.get()
    }

    private static func decodeJSON(buffer: UnsafeBufferPointer<UInt8>, limits: PropertyListDecodingLimits) -> Result<PropertyListValue, StoreError> {
        Result { () throws(StoreError) -> PropertyListValue in
            guard !buffer.isEmpty else { throw .invalidPropertyList("the file is empty") }
            return try PropertyListText.withUTF8(buffer) { (text) throws(StoreError) -> PropertyListValue in
                var reader = JSONPropertyListReader(text, budget: DecodingBudget(limits: limits))
                return try reader.read()
            }
        }
    }
}
