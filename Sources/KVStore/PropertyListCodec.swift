import Foundation

/// Turns bytes into property-list values and back.
///
/// Reading accepts XML, binary (`bplist0?`) and OpenStep property lists, what Foundation reads,
/// and JSON (RFC 8259, `JSONPropertyListReader`) where none of them reads the bytes,
/// with readers of this module's own (`XMLPropertyListReader`, `BinaryPropertyListReader`,
/// `OpenStepPropertyListReader`) that refuse what Foundation would crash on, expand without
/// bound or silently change; an XML document of one plain string takes a shorter path
/// (`PlainStringPropertyList`). The canonical form is the XML that `encodeXML` writes:
/// deterministic (dictionary keys sorted, dates in whole seconds), so that its length can be
/// the quota's measure.
///
/// The value rule, which every decoded value obeys (anything else is refused with
/// `StoreError.invalidPropertyList`, never wrapped, zeroed or normalised):
/// - strings are valid Unicode: invalid UTF-8 in a text document, a lone UTF-16 surrogate in
///   a binary one or in an OpenStep `\U` escape, or a non-ASCII byte in a binary ASCII string
///   is refused;
/// - integers are exactly −2^63…2^64−1 (`integer` up to Int64.max, `unsignedInteger` above);
/// - reals are any Double, NaN and ±infinity included;
/// - dates are finite and within 0001-01-01T00:00:00Z…9999-12-31T23:59:59Z, kept to whole
///   seconds (rounded down); an XML date must be a real calendar date and time
///   (`2020-13-45T99:99:99Z` is refused, not normalised);
/// - data is valid base64 in XML (whitespace allowed between characters, `=` padding
///   required and only at the end), pairs of hex digits in OpenStep;
/// - dictionary keys are strings, and may be empty; a dictionary holding one key twice (by
///   Swift `String` equality, so canonically equivalent keys are one key) is refused;
/// - binary UIDs, sets, null and fill objects, and objects that contain themselves are
///   refused.
///
/// The encoders keep to the same rule: both refuse a date outside it. Strings may hold any
/// Unicode scalar value: `encodeXML` writes the characters XML text cannot hold as character
/// references (see `appendEscaped`).
///
/// Decoding is bounded by `PropertyListDecodingLimits`: nesting depth and object count
/// (`invalidPropertyList`) and the canonical XML size of the value (`valueTooLarge`), checked
/// while decoding, before the value is built, so that a binary list of references to
/// references is refused in milliseconds.
public enum PropertyListCodec {
    /// Parses any property-list format; throws `StoreError.invalidPropertyList` for input
    /// outside the formats or the value rule, or over the depth and object limits, and
    /// `StoreError.valueTooLarge` when the value's canonical XML would pass `limits.maxBytes`
    /// (its `size` is then what was counted when decoding stopped: a lower bound).
    public static func decode(_ bytes: some Collection<UInt8>, limits: PropertyListDecodingLimits = .standard) throws(StoreError) -> PropertyListValue {
        if case .string(let text)? = PlainStringPropertyList.decode(bytes) {
            var budget = DecodingBudget(limits: limits)
            try budget.scalar(length: CanonicalXML.string(escapedLength: text.utf8.count), depth: 0)
            return .string(text)
        }
        let result = bytes.withContiguousStorageIfAvailable { decode(buffer: $0, limits: limits) }
            ?? Array(bytes).withUnsafeBufferPointer { decode(buffer: $0, limits: limits) }
        return try result.get()
    }

    private static func decode(buffer: UnsafeBufferPointer<UInt8>, limits: PropertyListDecodingLimits) -> Result<PropertyListValue, StoreError> {
        Result { () throws(StoreError) -> PropertyListValue in
            guard !buffer.isEmpty else { throw .invalidPropertyList("the file is empty") }
            let budget = DecodingBudget(limits: limits)
            if BinaryPropertyListReader.claims(buffer) {
                var reader = try BinaryPropertyListReader(buffer, budget: budget)
                return try reader.read()
            }
            return try PropertyListText.withUTF8(buffer) { (text) throws(StoreError) -> PropertyListValue in
                do throws(StoreError) {
                    return try decodePropertyList(text: text, budget: budget)
                } catch {
                    return try decodeJSON(text: text, budget: budget, failing: error)
                }
            }
        }
    }

    /// JSON, tried when no property-list format reads the text: a value a property-list format
    /// reads keeps that reading (a bare word stays an OpenStep string). When JSON cannot read
    /// the text either, the error is the one that says more: JSON's for a text that can only
    /// be JSON (`[`), both for one that could be either (`{`), else the property list's.
    private static func decodeJSON(text: UnsafeBufferPointer<UInt8>, budget: DecodingBudget, failing error: StoreError) throws(StoreError) -> PropertyListValue {
        guard case .invalidPropertyList(let reason) = error, let first = text.first(where: { !XMLPropertyListReader.isSpace($0) }),
              Self.mayBeginJSON(first) else { throw error }
        var json = JSONPropertyListReader(text, budget: budget)
        do throws(StoreError) {
            return try json.read()
        } catch {
            guard case .invalidPropertyList(let jsonReason) = error else { throw error }
            switch first {
            case UInt8(ascii: "["): throw error
            case UInt8(ascii: "{"): throw .invalidPropertyList("\(reason); nor is it JSON: \(jsonReason)")
            default: throw .invalidPropertyList(reason)
            }
        }
    }

    /// Whether a JSON value may begin with `byte`: `{ [ "`, a digit, `-`, or `t f n`.
    private static func mayBeginJSON(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "["), UInt8(ascii: "\""), UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"): true
        default: false
        }
    }

    /// XML or OpenStep text, told apart by its first character.
    private static func decodePropertyList(text: UnsafeBufferPointer<UInt8>, budget: DecodingBudget) throws(StoreError) -> PropertyListValue {
        var start = 0
        while start < text.count, XMLPropertyListReader.isSpace(text[start]) { start += 1 }
        guard start < text.count, text[start] == UInt8(ascii: "<") else {
            var openStep = OpenStepPropertyListReader(text, budget: budget)
            return try openStep.read()
        }
        var xml = XMLPropertyListReader(text, budget: budget)
        do throws(StoreError) {
            return try xml.read()
        } catch {
            // Bytes that never looked like XML may be OpenStep data (`<0fab>`); when
            // they are not that either, the error that says more is the XML one,
            // unless the first tag holds nothing but hex digits.
            guard !xml.recognised, case .invalidPropertyList = error else { throw error }
            var openStep = OpenStepPropertyListReader(text, budget: budget)
            do throws(StoreError) {
                return try openStep.read()
            } catch let openStepError {
                var end = start + 1
                while end < text.count, text[end] != UInt8(ascii: ">"), isHexOrSpace(text[end]) { end += 1 }
                throw end == text.count || text[end] == UInt8(ascii: ">") ? openStepError : error
            }
        }
    }

    private static func isHexOrSpace(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x46, 0x61...0x66, 0x20, 0x09, 0x0A, 0x0D: true
        default: false
        }
    }

    /// The canonical XML property list of `value`.
    public static func encodeXML(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        out.append(contentsOf: xmlHeader)
        try appendXML(value, depth: 0, to: &out)
        out.append(contentsOf: "</plist>\n".utf8)
        return out
    }

    /// A binary (`bplist00`) property list of `value` (see `BinaryPropertyListWriter`).
    public static func encodeBinary(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        try BinaryPropertyListWriter.encode(value)
    }

    public static func encode(_ value: PropertyListValue, as format: ValueFormat) throws(StoreError) -> [UInt8] {
        switch format {
        case .xml: try encodeXML(value)
        case .binary: try encodeBinary(value)
        }
    }

    // MARK: - Canonical XML

    static let xmlHeader = Array("""
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">

        """.utf8)

    private static func appendXML(_ value: PropertyListValue, depth: Int, to out: inout [UInt8]) throws(StoreError) {
        func indent(_ level: Int) { out.append(contentsOf: repeatElement(UInt8(ascii: "\t"), count: level)) }
        func element(_ name: String, _ text: String) throws(StoreError) {
            indent(depth)
            out.append(contentsOf: "<\(name)>".utf8)
            try appendEscaped(text, to: &out)
            out.append(contentsOf: "</\(name)>\n".utf8)
        }
        switch value {
        case .string(let s):
            try element("string", s)
        case .integer(let i):
            try element("integer", String(i))
        case .unsignedInteger(let u):
            try element("integer", String(u))
        case .real(let d):
            try element("real", realText(d))
        case .boolean(let b):
            indent(depth)
            out.append(contentsOf: (b ? "<true/>\n" : "<false/>\n").utf8)
        case .date(let d):
            try PropertyListDate.check(d)
            try element("date", dateText(d))
        case .data(let d):
            try element("data", d.base64EncodedString())
        case .array(let items):
            indent(depth)
            if items.isEmpty { out.append(contentsOf: "<array/>\n".utf8); return }
            out.append(contentsOf: "<array>\n".utf8)
            for item in items { try appendXML(item, depth: depth + 1, to: &out) }
            indent(depth)
            out.append(contentsOf: "</array>\n".utf8)
        case .dictionary(let items):
            indent(depth)
            if items.isEmpty { out.append(contentsOf: "<dict/>\n".utf8); return }
            out.append(contentsOf: "<dict>\n".utf8)
            for key in items.keys.sorted() {
                indent(depth + 1)
                out.append(contentsOf: "<key>".utf8)
                try appendEscaped(key, to: &out)
                out.append(contentsOf: "</key>\n".utf8)
                try appendXML(items[key]!, depth: depth + 1, to: &out)
            }
            indent(depth)
            out.append(contentsOf: "</dict>\n".utf8)
        }
    }

    /// Escapes XML markup, and writes as decimal character references what XML text cannot
    /// hold as it is: control characters but tab and newline (a carriage return would be read
    /// back as a newline), U+FFFE and U+FFFF. `CanonicalXML.escapedLength` counts the same.
    /// Every string is then carried, and reads back as written; `carriesInXML10` says whether
    /// the document is also XML 1.0, which allows only `&#13;` of those references.
    private static func appendEscaped(_ text: String, to out: inout [UInt8]) throws(StoreError) {
        // The two bytes before this one, for the noncharacters U+FFFE and U+FFFF (EF BF BE/BF).
        var before: (UInt8, UInt8) = (0, 0)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "&"): out.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): out.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): out.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\t"), UInt8(ascii: "\n"): out.append(byte)
            case 0..<0x20: out.append(contentsOf: "&#\(byte);".utf8)
            case 0xBE where before == (0xEF, 0xBF), 0xBF where before == (0xEF, 0xBF):
                out.removeLast(2)
                out.append(contentsOf: (byte == 0xBE ? "&#65534;" : "&#65535;").utf8)
            default: out.append(byte)
            }
            before = (before.1, byte)
        }
    }

    /// Whether canonical XML (`encodeXML`'s) is also an XML 1.0 document: it holds no
    /// character reference but `&#13;`, which a reader such as Python's plistlib takes.
    /// A value that is not is shown and exported in binary (see `encodeXML`'s escapes).
    public static func carriesInXML10(_ canonicalXML: [UInt8]) -> Bool {
        canonicalXML.withUnsafeBufferPointer { bytes in
            // Runs on every first read of a value: a plain loop over the bytes.
            var at = 0
            let count = bytes.count
            while at + 1 < count {
                if bytes[at] == UInt8(ascii: "&"), bytes[at + 1] == UInt8(ascii: "#") {
                    // The only reference XML 1.0 carries of those `encodeXML` writes: `&#13;`.
                    guard at + 4 < count, bytes[at + 2] == UInt8(ascii: "1"), bytes[at + 3] == UInt8(ascii: "3"),
                          bytes[at + 4] == UInt8(ascii: ";") else { return false }
                    at += 5
                } else {
                    at += 1
                }
            }
            return true
        }
    }

    static func realText(_ d: Double) -> String {
        if d.isNaN { return "nan" }
        if d.isInfinite { return d < 0 ? "-infinity" : "+infinity" }
        if d == d.rounded(), abs(d) < 1e15 { return String(Int64(d)) }
        return "\(d)"
    }

    /// ISO 8601 in UTC, whole seconds: the XML property-list date form.
    static func dateText(_ d: Date) -> String {
        var seconds = time_t(d.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let year = String(format: "%04d", Int(parts.tm_year) + 1900)
        return "\(year)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}
