import Foundation
import KVStore
import KVTestSupport
import Testing

/// The check made at each write(): never refuses a prefix of a value the decoder accepts, and
/// refuses, with a reason, bytes no value can begin with.
@Suite("The prefix check at write()")
struct ValuePrefixTests {
    /// Feeds `bytes` one byte at a time (so the verdict after each byte is that of the prefix
    /// ending there), then in random chunks; returns the first refusal, with its offset.
    private func firstRefusal(_ bytes: [UInt8], chunks generator: inout SeededGenerator) -> (Int, String)? {
        var check = ValuePrefixCheck()
        for (offset, byte) in bytes.enumerated() {
            let verdict = [byte].withUnsafeBytes { check.feed($0) }
            if case .refused(let reason) = verdict { return (offset, reason) }
            if verdict == .undecidable { break }
        }
        var chunked = ValuePrefixCheck()
        var at = 0
        while at < bytes.count {
            let end = min(bytes.count, at + Int.random(in: 1...64, using: &generator))
            let verdict = bytes[at..<end].withUnsafeBytes { chunked.feed($0) }
            if case .refused(let reason) = verdict { return (end - 1, "in chunks: " + reason) }
            at = end
        }
        return nil
    }

    @Test("every prefix of every valid file of the corpora passes, fed byte by byte and in chunks")
    func corpusPrefixes() throws {
        var generator = SeededGenerator(seed: 0x7072_6566)
        var checked = 0
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Corpus")
        for directory in ["plist", "json"] {
            let folder = root.appendingPathComponent(directory)
            for name in try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted() {
                let bytes = [UInt8](try Data(contentsOf: folder.appendingPathComponent(name)))
                guard (try? PropertyListCodec.decode(bytes)) != nil else { continue }
                if let (offset, reason) = firstRefusal(bytes, chunks: &generator) {
                    Issue.record("\(directory)/\(name) is refused at byte \(offset): \(reason)")
                }
                checked += 1
            }
        }
        #expect(checked >= 50, "the corpora reach the check")
    }

    @Test("every prefix of generated values passes, in XML, binary, OpenStep and JSON")
    func generatedPrefixes() throws {
        var generator = SeededGenerator(seed: 0x6B76_7366_7072)
        var documents = 0
        for _ in 0..<1500 {
            let value = Self.value(depth: 0, &generator)
            var forms: [(String, [UInt8])] = [("xml", try PropertyListCodec.encodeXML(value)),
                                              ("binary", try PropertyListCodec.encodeBinary(value))]
            if let openStep = Self.openStep(value, &generator) { forms.append(("openstep", Array(openStep.utf8))) }
            if let json = try? PropertyListCodec.encodeJSON(value) { forms.append(("json", json)) }
            for (format, bytes) in forms {
                // A JSON scalar alone reads as OpenStep (a bare word, a quoted string): the
                // property-list reading wins, as documented. Containers read as JSON.
                let containers: Bool
                switch value {
                case .array, .dictionary: containers = true
                default: containers = false
                }
                guard let decoded = try? PropertyListCodec.decode(bytes),
                      decoded.isSame(as: value) || format == "openstep" || (format == "json" && !containers) else {
                    Issue.record("the \(format) form of \(value) does not read back: \(String(decoding: bytes, as: UTF8.self).debugDescription)")
                    continue
                }
                if let (offset, reason) = firstRefusal(bytes, chunks: &generator) {
                    Issue.record("\(format) refused at byte \(offset) (\(reason)): \(String(decoding: bytes, as: UTF8.self).debugDescription)")
                }
                documents += 1
            }
        }
        #expect(documents > 4000)
    }

    @Test("bytes no value can begin with are refused, with the reason", arguments: [
        ("#!/bin/sh\necho hi\n", "'#' cannot begin a property list or JSON value"),
        ("two words\n", "two bare words"),
        ("hello\u{01}", "a key holds one value: byte 0x01 follows a complete value"),
        ("<plist><strin>", "<strin…> is not a property-list element"),
        ("<plist><string>a</string></plist>\nmore", "a key holds one value: 'm' follows the property list's value"),
        ("{\"a\": null}", "JSON null has no property-list form"),
        ("[1, 2]]", "a key holds one value: ']' follows a complete JSON value"),
        ("{\"port\" 8080}", "'8' where ':' was expected after a JSON member name"),
        ("bplist1", "a binary property list begins with bplist0"),
        ("<?xml version=\"1.0\"?><foo>", "<fo…> is not a property-list element"),
        ("(a, b) c", "a key holds one value: 'c' follows a complete value"),
        ("<plist><dict><string>", "a <string> where a <key> was expected"),
        ("caf\u{FF}", "byte 3 is not valid UTF-8"),
    ])
    func refused(_ text: String, _ reason: String) {
        let bytes = text == "caf\u{FF}" ? Array("caf".utf8) + [0xFF] : Array(text.utf8)
        #expect(ValuePrefixCheck.refusal(of: bytes)?.contains(reason) == true, "\(ValuePrefixCheck.refusal(of: bytes) ?? "viable")")
    }

    @Test("the >> case: a complete canonical value followed by more is refused")
    func append() throws {
        let value = try PropertyListCodec.encodeXML(.dictionary(["a": .array([.integer(1)])]))
        #expect(ValuePrefixCheck.refusal(of: value) == nil)
        #expect(ValuePrefixCheck.refusal(of: value + Array("more\n".utf8))?.contains("a key holds one value") == true)
        #expect(ValuePrefixCheck.refusal(of: value + Array("\n<!-- a comment -->\n".utf8)) == nil)
    }

    @Test("prefixes that can still become a value stay viable", arguments: [
        "{\"port\": 8080}", "{ port = 8080; }", "(a, b)", "hello", "\"two words\"", "<0fab", "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
        "a = b; c = d;", "/usr/bin", "// a comment\n(1)", "{\"a\": [1, -2.5e3, true, false, \"\\u00e9\"]", "   ", "<plist><dict><key>k</key>",
        "\"bell\\a\"", "<string>raw \u{01} control</string>",
    ])
    func viable(_ text: String) {
        #expect(ValuePrefixCheck.refusal(of: Array(text.utf8)) == nil)
    }

    @Test("what the check cannot follow, it leaves to the decode: binary after its header, UTF-16, another declared encoding")
    func undecidable() {
        for bytes: [UInt8] in [Array("bplist00".utf8) + [0xFF, 0x00], [0xFF, 0xFE, 0x3C, 0x00], [0x3C, 0x00, 0x70, 0x00],
                               Array("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><string>caf".utf8) + [0xE9]] {
            var check = ValuePrefixCheck()
            #expect(bytes.withUnsafeBytes { check.feed($0) } == .undecidable, "\(bytes)")
        }
    }

    // MARK: - Generated values

    private static let pieces = ["a", "hello world", "&", "<", ">", "]]>", "\"", "'", "\\", "é", "😀", "\u{1}", "\u{0}", "\r\n", "\t",
                                 "\u{7F}", "\u{FFFE}", "/*", "//", "=", ";", "(", "{", "0x1F", "-", "true", "null"]

    private static func string(_ generator: inout SeededGenerator) -> String {
        (0..<Int.random(in: 0...4, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
    }

    private static func value(depth: Int, _ generator: inout SeededGenerator) -> PropertyListValue {
        switch Int.random(in: 0..<(depth < 4 ? 10 : 7), using: &generator) {
        case 0: return .string(string(&generator))
        case 1: return .integer([0, 1, -1, Int.max, Int.min, 8080].randomElement(using: &generator)!)
        case 2: return .real([0.5, -2.25, 1e300, 3.0, -0.0].randomElement(using: &generator)!)
        case 3: return .boolean(Bool.random(using: &generator))
        case 4: return .date(Date(timeIntervalSince1970: Double(Int.random(in: -1_000_000_000...2_000_000_000, using: &generator))))
        case 5: return .data(Data((0..<Int.random(in: 0...9, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }))
        case 6: return .unsignedInteger(UInt64.max)
        case 7, 8: return .array((0..<Int.random(in: 0...3, using: &generator)).map { _ in value(depth: depth + 1, &generator) })
        default:
            var items = [String: PropertyListValue]()
            for _ in 0..<Int.random(in: 0...3, using: &generator) { items[string(&generator)] = value(depth: depth + 1, &generator) }
            return .dictionary(items)
        }
    }

    /// An OpenStep text of `value`, with random spacing and comments; nil for a value OpenStep
    /// cannot write (only strings, data, arrays and dictionaries).
    private static func openStep(_ value: PropertyListValue, _ generator: inout SeededGenerator) -> String? {
        func gap() -> String { ["", " ", "\n", " /* c */ ", "// c\n", "\t"].randomElement(using: &generator)! }
        switch value {
        case .string(let text):
            var quoted = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": quoted += "\\\""
                case "\\": quoted += "\\\\"
                case "\u{0}"..."\u{1F}": quoted += "\\" + String(repeating: "0", count: 3 - String(scalar.value, radix: 8).count) + String(scalar.value, radix: 8)
                default: quoted.unicodeScalars.append(scalar)
                }
            }
            return quoted + "\""
        case .data(let bytes):
            return "<" + bytes.map { String(format: "%02x", $0) }.joined(separator: Bool.random(using: &generator) ? " " : "") + ">"
        case .array(let items):
            var parts: [String] = []
            for item in items {
                guard let text = openStep(item, &generator) else { return nil }
                parts.append(gap() + text + gap())
            }
            return "(" + parts.joined(separator: ",") + (items.isEmpty || Bool.random(using: &generator) ? "" : ",") + gap() + ")"
        case .dictionary(let items):
            var text = "{" + gap()
            for (key, item) in items.sorted(by: { $0.key < $1.key }) {
                guard let keyText = openStep(.string(key), &generator), let itemText = openStep(item, &generator) else { return nil }
                text += keyText + gap() + "=" + gap() + itemText + gap() + ";" + gap()
            }
            return text + "}"
        default:
            return nil
        }
    }
}
