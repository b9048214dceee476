import Foundation
import KVStore
import KVTestSupport
import Testing

private func decode(_ text: String, limits: PropertyListDecodingLimits = .standard) -> Result<PropertyListValue, StoreError> {
    Result { () throws(StoreError) in try PropertyListCodec.decodeJSON(Array(text.utf8), limits: limits) }
}

/// The reason `text` is refused for, or nil when it is read.
private func refusal(_ text: String) -> String? {
    if case .failure(.invalidPropertyList(let reason)) = decode(text) { return reason }
    return nil
}

/// The reason `value` has no JSON, or nil when it is written.
private func writingRefusal(_ value: PropertyListValue) -> String? {
    do {
        _ = try PropertyListCodec.encodeJSON(value)
        return nil
    } catch {
        guard case .invalidPropertyList(let reason) = error else { return "\(error)" }
        return reason
    }
}

private func json(_ value: PropertyListValue) throws -> String {
    String(decoding: try PropertyListCodec.encodeJSON(value), as: UTF8.self)
}

@Suite("JSON property lists")
struct JSONPropertyListTests {
    // MARK: - Reading

    @Test("each JSON value reads as its property-list value")
    func mapping() throws {
        let table: [(String, PropertyListValue)] = [
            (#"{"a": 1, "b": [true, false]}"#, .dictionary(["a": .integer(1), "b": .array([.boolean(true), .boolean(false)])])),
            ("[]", .array([])),
            ("{}", .dictionary([:])),
            (#""text""#, .string("text")),
            (#""""#, .string("")),
            ("true", .boolean(true)),
            ("false", .boolean(false)),
            ("0", .integer(0)),
            ("-0", .integer(0)),
            ("42", .integer(42)),
            ("-42", .integer(-42)),
            ("9223372036854775807", .integer(Int.max)),
            ("-9223372036854775808", .integer(Int.min)),
            ("9223372036854775808", .unsignedInteger(UInt64(Int.max) + 1)),
            ("18446744073709551615", .unsignedInteger(.max)),
            ("1.0", .real(1)),
            ("-0.0", .real(-0.0)),
            ("3.25", .real(3.25)),
            ("1e2", .real(100)),
            ("1E+2", .real(100)),
            ("25e-1", .real(2.5)),
            ("1.7976931348623157e308", .real(.greatestFiniteMagnitude)),
            ("5e-324", .real(.leastNonzeroMagnitude)),
            ("1e-400", .real(0)),
            ("12345678901234567890.0", .real(12345678901234567890.0)),
            (" \t\r\n[ 1 , \"x\" ]\n\n", .array([.integer(1), .string("x")])),
        ]
        for (text, value) in table {
            #expect(try PropertyListCodec.decodeJSON(Array(text.utf8)) == value, "\(text)")
        }
        // A real stays a real, an integer an integer.
        #expect(try PropertyListCodec.decodeJSON(Array("2.0".utf8)).type == .real)
        #expect(try PropertyListCodec.decodeJSON(Array("2".utf8)).type == .integer)
    }

    @Test("string escapes read as the characters they name, NUL included")
    func escapes() throws {
        let table: [(String, String)] = [
            (#""\"\\\/""#, "\"\\/"),
            (#""\b\f\n\r\t""#, "\u{8}\u{C}\n\r\t"),
            (#""\u0041\u00e9\u00E9""#, "Aéé"),
            (#""\u0000""#, "\u{0}"),
            (#""a\u001fb""#, "a\u{1F}b"),
            (#""\ud83d\ude00""#, "😀"),
            (#""\uD834\uDD1E clef""#, "𝄞 clef"),
            (#""\uffff""#, "\u{FFFF}"),
            (#""plain é 😀 text""#, "plain é 😀 text"),
        ]
        for (text, string) in table {
            #expect(try PropertyListCodec.decodeJSON(Array(text.utf8)) == .string(string), "\(text)")
        }
        #expect(try PropertyListCodec.decodeJSON(Array(#"{"\u0061": 1}"#.utf8)) == .dictionary(["a": .integer(1)]))
    }

    @Test("what RFC 8259 does not allow is refused, with a reason")
    func refusals() {
        let table: [(String, String)] = [
            ("", "the file is empty"),
            (" \n ", "holds no JSON value"),
            ("null", "JSON null has no property-list form"),
            ("0123", "leading zero"),
            ("-01", "leading zero"),
            ("+1", "'+' where a value was expected"),
            (".5", "'.' where a value was expected"),
            ("5.", "no digits after its '.'"),
            ("5.e3", "no digits after its '.'"),
            ("1e", "no digits in its exponent"),
            ("1e+", "no digits in its exponent"),
            ("-", "'-' is not followed by a digit"),
            ("0x10", "'x' after the JSON value"),
            ("NaN", "\"NaN\" is not a JSON value"),
            ("Infinity", "\"Infinity\" is not a JSON value"),
            ("-Infinity", "'-' is not followed by a digit"),
            ("True", "\"True\" is not a JSON value"),
            ("nul", "\"nul\" is not a JSON value"),
            ("1e400", "the number 1e400 is out of range for a real"),
            ("-1e400", "the number -1e400 is out of range for a real"),
            ("18446744073709551616", "outside −9223372036854775808…18446744073709551615"),
            ("-9223372036854775809", "outside −9223372036854775808…18446744073709551615"),
            ("99999999999999999999999", "outside −9223372036854775808…18446744073709551615"),
            (#""\ud800""#, "the escape \\uD800 is a lone surrogate"),
            (#""\ud800x""#, "lone surrogate"),
            (#""\ud800\u0041""#, "lone surrogate"),
            (#""\udc00""#, "the escape \\uDC00 is a lone surrogate"),
            (#""\x""#, "a backslash followed by 'x' is not a JSON escape"),
            (#""\'""#, "not a JSON escape"),
            (#""\u12""#, "without four hex digits"),
            (#""\u12g4""#, "without four hex digits"),
            ("\"a\nb\"", "the control character U+000A unescaped"),
            ("\"a\tb\"", "the control character U+0009 unescaped"),
            ("\"ab\u{0}\"", "the control character U+0000 unescaped"),
            ("\"open", "the string opened on line 1 never closes"),
            ("\"ends in \\", "a string ends in a backslash"),
            (#"{"a": 1, "a": 2}"#, "the object holds the member name \"a\" twice"),
            (#"{"é": 1, "e\u0301": 2}"#, "twice"),
            ("[1,]", "']' where a value was expected"),
            (#"{"a": 1,}"#, "'}' where a member name"),
            ("{a: 1}", "'a' where a member name"),
            (#"{"a" 1}"#, "where ':' was expected after the member name \"a\""),
            (#"{"a": 1 "b": 2}"#, "where ',' or '}' was expected"),
            ("[1 2]", "where ',' or ']' was expected"),
            ("[1", "the array opened on line 1 never closes"),
            (#"{"a": 1"#, "the object opened on line 1 never closes"),
            ("[1, 2", "never closes"),
            ("1 2", "'2' after the JSON value"),
            ("{} x", "'x' after the JSON value"),
            ("[]]", "']' after the JSON value"),
            ("\u{C}1", "the control character U+000C where a value was expected"),
            ("1\u{B}", "the control character U+000B after the JSON value"),
            ("\u{A0}1", "where a value was expected"),
            ("// comment\n1", "'/' where a value was expected"),
        ]
        for (text, reason) in table {
            let refused = refusal(text)
            #expect(refused?.contains(reason) == true, "\(text.debugDescription): \(refused ?? "read")")
        }
    }

    @Test("a refusal names the line, and null names where it sits")
    func refusalsSayWhere() {
        #expect(refusal("[\n1,\n2,\n01]") == "line 4: the number 01 has a leading zero, which JSON does not allow")
        #expect(refusal("null") == "line 1: JSON null has no property-list form")
        #expect(refusal("[1, null]") == "line 1: JSON null has no property-list form (at 1)")
        #expect(refusal(#"{"servers": [{}, {}, {"started": null}]}"#) == "line 1: JSON null has no property-list form (at servers.2.started)")
        #expect(refusal("{\n\"a.b\": {\n\"\": null}}") == #"line 3: JSON null has no property-list form (at "a.b"."")"#)
        #expect(refusal("{\"a\": 1,\n\"a\": 2}") == #"line 2: the object holds the member name "a" twice"#)
        #expect(refusal("[\n\"x\ny\"]") == "line 2: a string holds the control character U+000A unescaped, which JSON does not allow (write \\u000A)")
    }

    // MARK: - Writing

    @Test("JSON is written as plutil -convert json -r writes it: sorted, two spaces, a final newline")
    func layout() throws {
        let value = PropertyListValue.dictionary([
            "name": .string("kvsfs"),
            "count": .integer(3),
            "big": .unsignedInteger(.max),
            "ratio": .real(0.5),
            "on": .boolean(true),
            "list": .array([.integer(1), .array([]), .dictionary(["z": .boolean(false)])]),
            "empty": .dictionary([:]),
        ])
        #expect(try json(value) == """
            {
              "big" : 18446744073709551615,
              "count" : 3,
              "empty" : {},
              "list" : [
                1,
                [],
                {
                  "z" : false
                }
              ],
              "name" : "kvsfs",
              "on" : true,
              "ratio" : 0.5
            }

            """)
        #expect(try json(.string("top")) == "\"top\"\n")
        #expect(try json(.array([])) == "[]\n")
        #expect(try json(.integer(Int.min)) == "-9223372036854775808\n")
    }

    @Test("keys are in the order encodeXML writes them")
    func keyOrder() throws {
        let keys = ["b", "B", "a", "é", "e\u{301}x", "", "10", "9", "Z"]
        let value = PropertyListValue.dictionary(Dictionary(uniqueKeysWithValues: keys.map { ($0, PropertyListValue.integer(0)) }))
        let written = try json(value)
        var positions = [Int]()
        for key in keys.sorted() {
            let range = try #require(written.range(of: "\n  \"\(key)\" : "))
            positions.append(written.distance(from: written.startIndex, to: range.lowerBound))
        }
        #expect(positions == positions.sorted())
    }

    @Test("reals are the shortest text that reads back the same, and always read back as reals")
    func reals() throws {
        let table: [(Double, String)] = [
            (3, "3.0"), (-0.0, "-0.0"), (0.1, "0.1"), (1e300, "1e+300"), (1e-7, "1e-07"), (2.5e-308, "2.5e-308"),
            (.greatestFiniteMagnitude, "1.7976931348623157e+308"), (.leastNonzeroMagnitude, "5e-324"), (1e16, "1e+16"),
            (123456789.125, "123456789.125"),
        ]
        for (real, text) in table {
            #expect(try json(.real(real)) == text + "\n")
            #expect(try PropertyListCodec.decodeJSON(Array(text.utf8)) == .real(real))
        }
    }

    @Test("strings are escaped as RFC 8259 asks")
    func stringEscaping() throws {
        #expect(try json(.string("q\"b\\s/")) == #""q\"b\\s/""# + "\n")
        #expect(try json(.string("\u{8}\u{C}\n\r\t")) == #""\b\f\n\r\t""# + "\n")
        #expect(try json(.string("\u{0}\u{1}\u{1F}\u{7F}")) == "\"\\u0000\\u0001\\u001f\u{7F}\"\n")
        #expect(try json(.string("é 😀 \u{2028}")) == "\"é 😀 \u{2028}\"\n")
        #expect(try json(.dictionary(["a\"b": .integer(1)])) == "{\n  \"a\\\"b\" : 1\n}\n")
    }

    @Test("dates, data, NaN and infinities have no JSON form, and the refusal says where they sit")
    func writingRefusals() {
        #expect(writingRefusal(.date(Date(timeIntervalSince1970: 0))) == "a date value has no JSON form")
        #expect(writingRefusal(.data(Data([1]))) == "a data value has no JSON form")
        #expect(writingRefusal(.real(.nan)) == "a NaN real has no JSON form")
        #expect(writingRefusal(.real(.infinity)) == "an infinite real has no JSON form")
        #expect(writingRefusal(.real(-.infinity)) == "an infinite real has no JSON form")
        let servers = PropertyListValue.dictionary([
            "servers": .array([.string("a"), .string("b"), .dictionary(["name": .string("c"), "started": .date(Date(timeIntervalSince1970: 0))])]),
        ])
        #expect(writingRefusal(servers) == "a date value has no JSON form (at servers.2.started)")
        #expect(writingRefusal(.array([.array([.data(Data())])])) == "a data value has no JSON form (at 0.0)")
        #expect(writingRefusal(.dictionary(["a b": .real(.nan)])) == #"a NaN real has no JSON form (at "a b")"#)
    }

    // MARK: - Round trips

    static let samples: [PropertyListValue] = [
        .string(""), .string("héllo & <world> \"quoted\"\ttab\nline \\ / 😀"), .string("\u{0}\u{1}\u{1F}\u{7F}\u{FFFE}\u{FFFF}"),
        .integer(0), .integer(-42), .integer(Int.max), .integer(Int.min), .unsignedInteger(UInt64(Int.max) + 1), .unsignedInteger(.max),
        .real(0), .real(-0.0), .real(3), .real(3.25), .real(-0.1), .real(1e300), .real(-1e-300), .real(.greatestFiniteMagnitude),
        .real(.leastNonzeroMagnitude), .real(1e15), .real(1e16), .real(123456789012345.6),
        .boolean(true), .boolean(false),
        .array([]), .dictionary([:]),
        .array([.string("a"), .integer(1), .dictionary(["nested": .array([.boolean(false), .real(0.5)])])]),
        .dictionary(["b": .integer(2), "a": .string("1"), "ünï": .array([.integer(1), .integer(2)]), "": .dictionary(["x.y": .string("")])]),
    ]

    @Test("a value reads back from its JSON as the same value", arguments: samples)
    func roundTrip(value: PropertyListValue) throws {
        let encoded = try PropertyListCodec.encodeJSON(value)
        #expect(try PropertyListCodec.decodeJSON(encoded).isSame(as: value))
        #expect(try PropertyListCodec.encodeJSON(try PropertyListCodec.decodeJSON(encoded)) == encoded)
    }

    @Test("random values without dates, data or non-finite reals read back from their JSON")
    func randomRoundTrips() throws {
        var generator = JSONValueGenerator(seed: 0x4A53_4F4E)
        for _ in 0..<300 {
            let value = generator.value(depth: 0)
            let encoded = try PropertyListCodec.encodeJSON(value)
            let again = try PropertyListCodec.decodeJSON(encoded)
            #expect(again.isSame(as: value), "\(value)")
        }
    }

    // MARK: - Bounds

    @Test("nesting is bounded: 128 arrays or objects are read, 129 are refused")
    func depth() throws {
        func nestedArrays(_ n: Int) -> String { String(repeating: "[", count: n) + String(repeating: "]", count: n) }
        func nestedObjects(_ n: Int) -> String { String(repeating: #"{"k":"#, count: n - 1) + "{}" + String(repeating: "}", count: n - 1) }
        for nested in [nestedArrays, nestedObjects] {
            #expect(throws: Never.self) { try PropertyListCodec.decodeJSON(Array(nested(128).utf8)) }
            #expect(refusal(nested(129))?.contains("nested more than 128 deep") == true)
            #expect(throws: Never.self) { try PropertyListCodec.decodeJSON(Array(nested(5).utf8), limits: PropertyListDecodingLimits(maxDepth: 5)) }
            #expect(throws: StoreError.self) { try PropertyListCodec.decodeJSON(Array(nested(5).utf8), limits: PropertyListDecodingLimits(maxDepth: 4)) }
        }
        // Deep enough to overflow the stack if the bound were checked after recursing.
        #expect(refusal(String(repeating: "[", count: 1_000_000))?.contains("nested more than 128 deep") == true)
    }

    @Test("the object count is bounded, keys and values counted")
    func objects() {
        let limits = PropertyListDecodingLimits(maxObjects: 5)
        #expect(throws: Never.self) { try PropertyListCodec.decodeJSON(Array("[1, 2, 3, 4]".utf8), limits: limits) }
        #expect(throws: StoreError.invalidPropertyList("the property list holds more than 5 objects")) {
            try PropertyListCodec.decodeJSON(Array("[1, 2, 3, 4, 5]".utf8), limits: limits)
        }
        #expect(throws: StoreError.invalidPropertyList("the property list holds more than 5 objects")) {
            try PropertyListCodec.decodeJSON(Array(#"{"a": 1, "b": 2, "c": 3}"#.utf8), limits: limits)
        }
    }

    /// Samples whose canonical XML encodeXML writes as it stands (no control characters).
    static let sizeSamples: [PropertyListValue] = samples.filter { !holdsControlCharacters($0) } + [.string("a & b < c > d \u{FFFE}")]

    private static func holdsControlCharacters(_ value: PropertyListValue) -> Bool {
        func control(_ text: String) -> Bool { text.unicodeScalars.contains { $0.value < 0x20 && $0 != "\t" && $0 != "\n" } }
        switch value {
        case .string(let text): return control(text)
        case .array(let items): return items.contains(where: holdsControlCharacters)
        case .dictionary(let items): return items.contains { control($0.key) || holdsControlCharacters($0.value) }
        default: return false
        }
    }

    @Test("the byte limit is the canonical XML length: a value of exactly the limit is read, one byte less refuses it",
          arguments: sizeSamples)
    func canonicalSizeIsExact(value: PropertyListValue) throws {
        let size = try PropertyListCodec.encodeXML(value).count
        let encoded = try PropertyListCodec.encodeJSON(value)
        #expect(try PropertyListCodec.decodeJSON(encoded, limits: PropertyListDecodingLimits(maxBytes: size)).isSame(as: value))
        #expect(throws: StoreError.valueTooLarge(size: size, limit: size - 1)) {
            try PropertyListCodec.decodeJSON(encoded, limits: PropertyListDecodingLimits(maxBytes: size - 1))
        }
        // The XML reader counts the same value to the same byte.
        let xml = try PropertyListCodec.encodeXML(value)
        #expect(throws: StoreError.valueTooLarge(size: size, limit: size - 1)) {
            try PropertyListCodec.decode(xml, limits: PropertyListDecodingLimits(maxBytes: size - 1))
        }
    }

    @Test("JSON written otherwise than encodeJSON writes it counts the canonical length of what it reads")
    func canonicalSizeOfOtherSpellings() throws {
        let table: [String] = [
            #"{"b":[1E2,-0.0,1e-7,"\u0026\u003c\u003e\/"],"a":{"x":true}}"#,
            "[ 0.50 , 100.000 , 1e15, 12e-1 ]",
            #""\ud83d\ude00 \u00e9 \uFFFF""#,
        ]
        for text in table {
            let value = try PropertyListCodec.decodeJSON(Array(text.utf8))
            let size = try PropertyListCodec.encodeXML(value).count
            #expect(throws: Never.self) { try PropertyListCodec.decodeJSON(Array(text.utf8), limits: PropertyListDecodingLimits(maxBytes: size)) }
            #expect(throws: StoreError.valueTooLarge(size: size, limit: size - 1)) {
                try PropertyListCodec.decodeJSON(Array(text.utf8), limits: PropertyListDecodingLimits(maxBytes: size - 1))
            }
        }
    }

    @Test("a value over a small byte limit is refused as too large before it is built")
    func tooLarge() {
        let long = "[" + Array(repeating: #""abcdefghij""#, count: 10_000).joined(separator: ",") + "]"
        let result = decode(long, limits: PropertyListDecodingLimits(maxBytes: 1000))
        guard case .failure(.valueTooLarge(let size, let limit)) = result else {
            Issue.record("expected valueTooLarge, got \(result)")
            return
        }
        #expect(limit == 1000)
        #expect(size > 1000 && size < 1100)
    }
}

/// Random property-list values that have a JSON form, from a fixed seed.
private struct JSONValueGenerator {
    private var random: SeededGenerator

    init(seed: UInt64) { random = SeededGenerator(seed: seed) }

    private mutating func below(_ n: Int) -> Int { Int.random(in: 0..<n, using: &random) }

    mutating func value(depth: Int) -> PropertyListValue {
        switch below(depth < 4 ? 8 : 6) {
        case 0: return .string(string())
        case 1: return .integer(Int(truncatingIfNeeded: random.next()) >> below(64))
        case 2: return .unsignedInteger(UInt64.random(in: UInt64(Int.max) + 1 ... .max, using: &random))
        case 3:
            let real = Double(bitPattern: random.next())
            return .real(real.isFinite ? real : Double(below(1000)) / 8)
        case 4: return .boolean(below(2) == 0)
        case 5: return .real(Double(Int(truncatingIfNeeded: random.next()) >> below(64)))
        case 6: return .array((0..<below(5)).map { _ in value(depth: depth + 1) })
        default:
            var items = [String: PropertyListValue]()
            for _ in 0..<below(5) { items[string()] = value(depth: depth + 1) }
            return .dictionary(items)
        }
    }

    private mutating func string() -> String {
        let alphabet: [Unicode.Scalar] = ["a", "Z", "0", " ", ".", "\"", "\\", "/", "\u{0}", "\u{1F}", "\n", "\t", "é", "😀", "\u{2028}", "\u{FFFF}", "<", "&"]
        var text = String.UnicodeScalarView()
        for _ in 0..<below(8) { text.append(alphabet[below(alphabet.count)]) }
        return String(text)
    }
}
