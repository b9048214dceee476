extension PropertyListCodec {
    /// The JSON (RFC 8259) of `value`, as `plutil -convert json -r` lays it out: members sorted
    /// by name (Swift `String` order, as `encodeXML` sorts keys), two spaces of indentation per
    /// level, `"name" : value`, and a newline at the end.
    ///
    /// Deterministic, and read back by `decodeJSON` as the same value: integers are decimal,
    /// reals are the shortest text that reads back as the same Double and always hold a `.`
    /// or an exponent (`3.0`, `1e+300`), so that they stay reals. Dates, data, NaN and
    /// ±infinity have no JSON form and are refused with `StoreError.invalidPropertyList`,
    /// naming where the value sits (`at servers.2.started`).
    public static func encodeJSON(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        var writer = JSONPropertyListWriter()
        try writer.append(value, depth: 0)
        writer.out.append(UInt8(ascii: "\n"))
        return writer.out
    }
}

/// Writes one value as pretty-printed JSON (see `PropertyListCodec.encodeJSON`).
private struct JSONPropertyListWriter {
    var out: [UInt8] = []
    /// Where the value being written sits, for the messages that name it.
    private var path = PropertyListPath()

    init() {
        out.reserveCapacity(256)
    }

    /// `value`, whose first line is already indented, with its inner lines indented from `depth`.
    mutating func append(_ value: PropertyListValue, depth: Int) throws(StoreError) {
        switch value {
        case .string(let s):
            appendQuoted(s)
        case .integer(let i):
            out.append(contentsOf: String(i).utf8)
        case .unsignedInteger(let u):
            out.append(contentsOf: String(u).utf8)
        case .real(let d):
            guard d.isFinite else { throw refusal(d.isNaN ? "a NaN real has no JSON form" : "an infinite real has no JSON form") }
            let text = d.description
            out.append(contentsOf: text.utf8)
            if !text.utf8.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }) {
                out.append(contentsOf: ".0".utf8)
            }
        case .boolean(let b):
            out.append(contentsOf: (b ? "true" : "false").utf8)
        case .date:
            throw refusal("a date value has no JSON form")
        case .data:
            throw refusal("a data value has no JSON form")
        case .array(let items):
            guard !items.isEmpty else { out.append(contentsOf: "[]".utf8); return }
            out.append(contentsOf: "[\n".utf8)
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(contentsOf: ",\n".utf8) }
                indent(depth + 1)
                path.enter(.index(index))
                try append(item, depth: depth + 1)
                path.leave()
            }
            out.append(UInt8(ascii: "\n"))
            indent(depth)
            out.append(UInt8(ascii: "]"))
        case .dictionary(let items):
            guard !items.isEmpty else { out.append(contentsOf: "{}".utf8); return }
            out.append(contentsOf: "{\n".utf8)
            for (index, key) in items.keys.sorted().enumerated() {
                if index > 0 { out.append(contentsOf: ",\n".utf8) }
                indent(depth + 1)
                appendQuoted(key)
                out.append(contentsOf: " : ".utf8)
                path.enter(.key(key))
                try append(items[key]!, depth: depth + 1)
                path.leave()
            }
            out.append(UInt8(ascii: "\n"))
            indent(depth)
            out.append(UInt8(ascii: "}"))
        }
    }

    private mutating func indent(_ depth: Int) {
        out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }

    /// `text` in double quotes, with `"`, `\` and the control characters escaped (the short
    /// escapes where JSON has them, else `\u00XX`); everything else as it is, in UTF-8.
    private mutating func appendQuoted(_ text: String) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let digits: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private func refusal(_ reason: String) -> StoreError {
        .invalidPropertyList(path.isEmpty ? reason : "\(reason) (at \(path))")
    }
}

/// Where a value sits inside the value around it, as messages name it: the dictionary keys
/// and array indices on the way to it, joined by dots (`servers.2.started`). A key that is
/// empty or holds a dot, a space or a control character is quoted; a long one is shortened.
struct PropertyListPath: CustomStringConvertible {
    enum Step {
        case key(String)
        case index(Int)
    }

    private var steps: [Step] = []

    var isEmpty: Bool { steps.isEmpty }

    mutating func enter(_ step: Step) { steps.append(step) }

    mutating func leave() { steps.removeLast() }

    var description: String {
        steps.map { step in
            switch step {
            case .index(let index): String(index)
            case .key(let key):
                key.isEmpty || key.unicodeScalars.contains { $0 == "." || $0 == "\"" || $0.properties.isWhitespace || $0.value < 0x20 }
                    ? PropertyListText.quoted(key) : PropertyListText.shortened(key)
            }
        }.joined(separator: ".")
    }
}
