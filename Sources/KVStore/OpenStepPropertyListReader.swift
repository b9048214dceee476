import Foundation

/// Reads an OpenStep (old-style NeXT) property list from valid UTF-8, as Foundation reads it.
///
/// Values are strings, `( a, b )` arrays (a trailing comma allowed), `{ k = v; }` dictionaries
/// (`k;` is short for `k = k;`) and `<0fab 12>` data. A string is quoted with `"` or `'`, with
/// escapes `\a \b \f \n \r \t \v`, `\"`, `\` and a newline, up to three octal digits (a
/// NeXTSTEP character), `\U` and up to four hex digits (UTF-16, surrogate pairs joined); any
/// other escaped character stands for itself. Unquoted, a string is a run of letters, digits
/// and `_ $ / : . -`, so a bare word such as `hello` is the string "hello". `//` and `/* */`
/// comments may stand wherever whitespace may.
///
/// At the top: nothing but whitespace and comments is an empty dictionary; one value is that
/// value; a string followed by more is the body of a dictionary without braces (a strings
/// file, `"a" = "b";`). Unlike Foundation, anything left after the last entry of a strings
/// file is refused, as are octal escapes past `\375` and a `\U` with no digits.
struct OpenStepPropertyListReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var at = 0
    private(set) var budget: DecodingBudget
    private var scratch: [UInt8] = []

    init(_ bytes: UnsafeBufferPointer<UInt8>, budget: DecodingBudget) {
        self.bytes = bytes
        self.budget = budget
    }

    mutating func read() throws(StoreError) -> PropertyListValue {
        let initial = budget
        try skipSpace()
        guard at < bytes.count else {
            try budget.open(.dictionary, depth: 0)
            return .dictionary([:])
        }
        let start = at
        let value = try readValue(depth: 0)
        try skipSpace()
        guard at < bytes.count else { return value }
        guard case .string = value else { throw fail("\(describe(at)) after the property list's value") }
        // A string followed by more: the body of a dictionary, as a strings file holds it.
        at = start
        budget = initial
        try budget.open(.dictionary, depth: 0)
        let items = try readEntries(depth: 0)
        guard at == bytes.count else { throw fail("\(describe(at)) after the last entry") }
        try budget.close(.dictionary, count: items.count, depth: 0)
        return .dictionary(items)
    }

    private mutating func readValue(depth: Int) throws(StoreError) -> PropertyListValue {
        try skipSpace()
        guard at < bytes.count else { throw fail("the property list ends where a value was expected") }
        switch bytes[at] {
        case UInt8(ascii: "{"):
            let start = at
            at += 1
            try budget.open(.dictionary, depth: depth)
            let items = try readEntries(depth: depth)
            guard at < bytes.count, bytes[at] == UInt8(ascii: "}") else {
                throw fail(at < bytes.count ? "\(describe(at)) where a key or '}' was expected" : "the dictionary opened on line \(line(start)) never closes")
            }
            at += 1
            try budget.close(.dictionary, count: items.count, depth: depth)
            return .dictionary(items)
        case UInt8(ascii: "("):
            return try readArray(depth: depth)
        case UInt8(ascii: "<"):
            let data = try readData()
            try budget.scalar(length: CanonicalXML.data(byteCount: data.count), depth: depth)
            return .data(data)
        default:
            guard let (string, escaped) = try readString() else { throw fail("\(describe(at)) where a value was expected") }
            try budget.scalar(length: CanonicalXML.string(escapedLength: escaped), depth: depth)
            return .string(string)
        }
    }

    /// Dictionary entries up to the first thing that is not a key (left for the caller).
    private mutating func readEntries(depth: Int) throws(StoreError) -> [String: PropertyListValue] {
        var items = [String: PropertyListValue]()
        while true {
            try skipSpace()
            let keyStart = at
            guard let (key, escaped) = try readString() else { return items }
            try budget.key(escapedLength: escaped, depth: depth + 1)
            try skipSpace()
            let value: PropertyListValue
            if at < bytes.count, bytes[at] == UInt8(ascii: ";") {
                try budget.scalar(length: CanonicalXML.string(escapedLength: escaped), depth: depth + 1)
                value = .string(key)
            } else if at < bytes.count, bytes[at] == UInt8(ascii: "=") {
                at += 1
                value = try readValue(depth: depth + 1)
                try skipSpace()
            } else {
                throw fail("expected ';' or '=' after the key \(quoted(key))")
            }
            guard at < bytes.count, bytes[at] == UInt8(ascii: ";") else { throw fail("missing ';' after the value of the key \(quoted(key))") }
            at += 1
            guard items.updateValue(value, forKey: key) == nil else {
                throw fail("the dictionary holds the key \(quoted(key)) twice", at: keyStart)
            }
        }
    }

    private mutating func readArray(depth: Int) throws(StoreError) -> PropertyListValue {
        let start = at
        at += 1
        try budget.open(.array, depth: depth)
        var items = [PropertyListValue]()
        while true {
            try skipSpace()
            guard at < bytes.count else { throw fail("the array opened on line \(line(start)) never closes") }
            if bytes[at] == UInt8(ascii: ")") { break }
            items.append(try readValue(depth: depth + 1))
            try skipSpace()
            if at < bytes.count, bytes[at] == UInt8(ascii: ",") {
                at += 1
                continue
            }
            guard at < bytes.count, bytes[at] == UInt8(ascii: ")") else {
                throw fail(at < bytes.count ? "\(describe(at)) where ',' or ')' was expected" : "the array opened on line \(line(start)) never closes")
            }
            break
        }
        at += 1
        try budget.close(.array, count: items.count, depth: depth)
        return .array(items)
    }

    /// `<…>`: pairs of hex digits, with whitespace between the pairs.
    private mutating func readData() throws(StoreError) -> Data {
        let start = at
        at += 1
        var out = [UInt8]()
        while true {
            guard at < bytes.count else { throw fail("the data opened on line \(line(start)) never closes") }
            let byte = bytes[at]
            if byte == UInt8(ascii: ">") { break }
            if byte == 0x20 || byte == 0x0A || byte == 0x09 || byte == 0x0D {
                at += 1
            } else if let separator = lineSeparatorLength(at) {
                at += separator
            } else if let high = Self.hex(byte) {
                guard at + 1 < bytes.count, let low = Self.hex(bytes[at + 1]) else {
                    throw fail("the data holds an odd number of hex digits, or \(describe(at + 1)) where a hex digit was expected")
                }
                out.append(high << 4 | low)
                at += 2
            } else {
                throw fail("the data holds \(describe(at)), which is not a hex digit")
            }
        }
        at += 1
        return Data(out)
    }

    /// A quoted or unquoted string with the length of its canonical (escaped) form, or nil
    /// when no string starts here.
    private mutating func readString() throws(StoreError) -> (String, Int)? {
        guard at < bytes.count else { return nil }
        let first = bytes[at]
        if first == UInt8(ascii: "\"") || first == UInt8(ascii: "'") {
            return try readQuoted(first)
        }
        guard Self.isUnquoted(first) else { return nil }
        let start = at
        while at < bytes.count, Self.isUnquoted(bytes[at]) { at += 1 }
        let run = UnsafeBufferPointer(rebasing: bytes[start..<at])
        return (String(decoding: run, as: UTF8.self), CanonicalXML.escapedLength(run))
    }

    private mutating func readQuoted(_ quote: UInt8) throws(StoreError) -> (String, Int) {
        let start = at
        at += 1
        let contentStart = at
        while at < bytes.count, bytes[at] != quote, bytes[at] != UInt8(ascii: "\\") { at += 1 }
        guard at < bytes.count else { throw fail("the string opened on line \(line(start)) never closes") }
        if bytes[at] == quote {
            let run = UnsafeBufferPointer(rebasing: bytes[contentStart..<at])
            at += 1
            return (String(decoding: run, as: UTF8.self), CanonicalXML.escapedLength(run))
        }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<at]))
        while true {
            guard at < bytes.count else { throw fail("the string opened on line \(line(start)) never closes") }
            let byte = bytes[at]
            if byte == quote { break }
            if byte == UInt8(ascii: "\\") {
                let scalar = try readEscape()
                scratch.append(contentsOf: scalar.utf8)
            } else {
                scratch.append(byte)
                at += 1
            }
        }
        at += 1
        let escaped = scratch.withUnsafeBufferPointer { CanonicalXML.escapedLength($0) }
        return (String(decoding: scratch, as: UTF8.self), escaped)
    }

    /// One escape, at its backslash.
    private mutating func readEscape() throws(StoreError) -> Unicode.Scalar {
        let start = at
        at += 1
        guard at < bytes.count else { throw fail("a string ends in a backslash", at: start) }
        let byte = bytes[at]
        at += 1
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "7"):
            var value = Int(byte - 0x30)
            for _ in 0..<2 {
                guard at < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(bytes[at]) else { break }
                value = value * 8 + Int(bytes[at] - 0x30)
                at += 1
            }
            if value < 0x80 { return Unicode.Scalar(UInt8(value)) }
            guard value < 0xFE, let scalar = Unicode.Scalar(Self.nextStep[value - 0x80]) else {
                throw fail("the escape \\\(String(value, radix: 8)) names no NeXTSTEP character", at: start)
            }
            return scalar
        case UInt8(ascii: "U"):
            let high = try readUTF16Unit(start)
            if (0xDC00...0xDFFF).contains(high) { throw fail("the escape \\U\(String(high, radix: 16)) is a lone surrogate", at: start) }
            guard (0xD800...0xDBFF).contains(high) else { return Unicode.Scalar(high) ?? "\u{FFFD}" }
            guard bytes.count - at >= 2, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "U") else {
                throw fail("the escape \\U\(String(high, radix: 16)) is a lone surrogate", at: start)
            }
            at += 2
            let low = try readUTF16Unit(start)
            guard (0xDC00...0xDFFF).contains(low), let scalar = Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)) else {
                throw fail("the escape \\U\(String(high, radix: 16)) is a lone surrogate", at: start)
            }
            return scalar
        case UInt8(ascii: "a"): return "\u{7}"
        case UInt8(ascii: "b"): return "\u{8}"
        case UInt8(ascii: "f"): return "\u{C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "v"): return "\u{B}"
        default:
            // Any other character stands for itself, whole.
            var end = at
            while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
            let character = String(decoding: UnsafeBufferPointer(rebasing: bytes[(at - 1)..<end]), as: UTF8.self)
            at = end
            return character.unicodeScalars.first ?? "\u{FFFD}"
        }
    }

    /// One to four hex digits after `\U`.
    private mutating func readUTF16Unit(_ escapeStart: Int) throws(StoreError) -> UInt32 {
        var value: UInt32 = 0
        var digits = 0
        while digits < 4, at < bytes.count, let digit = Self.hex(bytes[at]) {
            value = value << 4 | UInt32(digit)
            digits += 1
            at += 1
        }
        guard digits > 0 else { throw fail("a \\U escape without hex digits", at: escapeStart) }
        return value
    }

    /// Whitespace (including U+2028 and U+2029) and comments.
    private mutating func skipSpace() throws(StoreError) {
        while at < bytes.count {
            let byte = bytes[at]
            if (0x09...0x0D).contains(byte) || byte == 0x20 {
                at += 1
            } else if let separator = lineSeparatorLength(at) {
                at += separator
            } else if byte == UInt8(ascii: "/"), at + 1 < bytes.count, bytes[at + 1] == UInt8(ascii: "/") {
                at += 2
                while at < bytes.count, bytes[at] != 0x0A, bytes[at] != 0x0D, lineSeparatorLength(at) == nil { at += 1 }
            } else if byte == UInt8(ascii: "/"), at + 1 < bytes.count, bytes[at + 1] == UInt8(ascii: "*") {
                let start = at
                at += 2
                while true {
                    guard at + 1 < bytes.count else { throw fail("a comment never ends", at: start) }
                    if bytes[at] == UInt8(ascii: "*"), bytes[at + 1] == UInt8(ascii: "/") { break }
                    at += 1
                }
                at += 2
            } else {
                return
            }
        }
    }

    /// 3 at U+2028 or U+2029, else nil.
    private func lineSeparatorLength(_ position: Int) -> Int? {
        guard bytes.count - position >= 3, bytes[position] == 0xE2, bytes[position + 1] == 0x80,
              bytes[position + 2] == 0xA8 || bytes[position + 2] == 0xA9 else { return nil }
        return 3
    }

    static func isUnquoted(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "_"), UInt8(ascii: "$"), UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "."), UInt8(ascii: "-"):
            true
        default:
            false
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

    /// The characters of the NeXTSTEP encoding from 0x80 to 0xFF (0xFE and 0xFF are none).
    private static let nextStep: [UInt32] = [
        0x00A0, 0x00C0, 0x00C1, 0x00C2, 0x00C3, 0x00C4, 0x00C5, 0x00C7, 0x00C8, 0x00C9, 0x00CA, 0x00CB, 0x00CC, 0x00CD, 0x00CE, 0x00CF,
        0x00D0, 0x00D1, 0x00D2, 0x00D3, 0x00D4, 0x00D5, 0x00D6, 0x00D9, 0x00DA, 0x00DB, 0x00DC, 0x00DD, 0x00DE, 0x00B5, 0x00D7, 0x00F7,
        0x00A9, 0x00A1, 0x00A2, 0x00A3, 0x2044, 0x00A5, 0x0192, 0x00A7, 0x00A4, 0x2019, 0x201C, 0x00AB, 0x2039, 0x203A, 0xFB01, 0xFB02,
        0x00AE, 0x2013, 0x2020, 0x2021, 0x00B7, 0x00A6, 0x00B6, 0x2022, 0x201A, 0x201E, 0x201D, 0x00BB, 0x2026, 0x2030, 0x00AC, 0x00BF,
        0x00B9, 0x02CB, 0x00B4, 0x02C6, 0x02DC, 0x00AF, 0x02D8, 0x02D9, 0x00A8, 0x00B2, 0x02DA, 0x00B8, 0x00B3, 0x02DD, 0x02DB, 0x02C7,
        0x2014, 0x00B1, 0x00BC, 0x00BD, 0x00BE, 0x00E0, 0x00E1, 0x00E2, 0x00E3, 0x00E4, 0x00E5, 0x00E7, 0x00E8, 0x00E9, 0x00EA, 0x00EB,
        0x00EC, 0x00C6, 0x00ED, 0x00AA, 0x00EE, 0x00EF, 0x00F0, 0x00F1, 0x0141, 0x00D8, 0x0152, 0x00BA, 0x00F2, 0x00F3, 0x00F4, 0x00F5,
        0x00F6, 0x00E6, 0x00F9, 0x00FA, 0x00FB, 0x0131, 0x00FC, 0x00FD, 0x0142, 0x00F8, 0x0153, 0x00DF, 0x00FE, 0x00FF, 0x0000, 0x0000,
    ]

    // MARK: - Messages

    private func line(_ position: Int) -> Int { PropertyListText.line(in: bytes, at: position) }

    private func fail(_ reason: String, at position: Int? = nil) -> StoreError {
        .invalidPropertyList("line \(line(position ?? at)): \(reason)")
    }

    private func quoted(_ string: String) -> String { PropertyListText.quoted(string) }

    private func describe(_ position: Int) -> String { PropertyListText.describe(bytes, at: position) }
}
