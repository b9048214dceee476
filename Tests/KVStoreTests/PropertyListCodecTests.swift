import Foundation
import KVStore
import KVTestSupport
import Testing

@Suite("Property-list codec")
struct PropertyListCodecTests {
    @Test("a bare word is an OpenStep string, as echo writes it")
    func bareWord() throws {
        #expect(try PropertyListCodec.decode(Array("hello\n".utf8)) == .string("hello"))
    }

    @Test("OpenStep arrays, dictionaries, quoted strings and data")
    func openStep() throws {
        #expect(try PropertyListCodec.decode(Array("(a, \"b c\")".utf8)) == .array([.string("a"), .string("b c")]))
        #expect(try PropertyListCodec.decode(Array("{k = v;}".utf8)) == .dictionary(["k": .string("v")]))
        #expect(try PropertyListCodec.decode(Array("<0fab>".utf8)) == .data(Data([0x0f, 0xab])))
    }

    @Test("XML scalars keep their types")
    func xmlTypes() throws {
        func xml(_ body: String) -> [UInt8] { Array("<?xml version=\"1.0\"?><plist version=\"1.0\">\(body)</plist>".utf8) }
        #expect(try PropertyListCodec.decode(xml("<integer>3</integer>")) == .integer(3))
        #expect(try PropertyListCodec.decode(xml("<real>2.5</real>")) == .real(2.5))
        #expect(try PropertyListCodec.decode(xml("<true/>")) == .boolean(true))
        #expect(try PropertyListCodec.decode(xml("<false/>")) == .boolean(false))
        #expect(try PropertyListCodec.decode(xml("<date>2026-01-02T03:04:05Z</date>")) == .date(Date(timeIntervalSince1970: 1767323045)))
    }

    @Test("text that is no property list is refused")
    func invalid() {
        for text in ["hello world\n", "(unclosed", "<plist><string>x</plist>", ""] {
            #expect(throws: StoreError.self, "\(text.debugDescription)") { try PropertyListCodec.decode(Array(text.utf8)) }
        }
    }

    static let samples: [PropertyListValue] = [
        .string("héllo & <world> \"quoted\"\ttab\nline"),
        .integer(-42), .integer(Int.max), .real(3.25), .real(-0.1), .real(1e300), .boolean(true), .boolean(false),
        .date(Date(timeIntervalSince1970: 1_700_000_000)), .data(Data((0..<300).map { UInt8($0 % 256) })),
        .array([]), .dictionary([:]),
        .array([.string("a"), .integer(1), .dictionary(["nested": .array([.boolean(false), .real(0.5)])])]),
        .dictionary(["b": .integer(2), "a": .string("1"), "ünï": .data(Data([1, 2]))]),
    ]

    @Test("canonical XML reads back as the same value", arguments: samples)
    func xmlRoundTrip(value: PropertyListValue) throws {
        #expect(try PropertyListCodec.decode(PropertyListCodec.encodeXML(value)) == value)
    }

    @Test("binary reads back as the same value", arguments: samples)
    func binaryRoundTrip(value: PropertyListValue) throws {
        let binary = try PropertyListCodec.encodeBinary(value)
        #expect(binary.starts(with: Array("bplist00".utf8)))
        #expect(try PropertyListCodec.decode(binary) == value)
    }

    @Test("canonical XML is deterministic: dictionary keys sorted, Apple's header")
    func canonical() throws {
        let xml = String(decoding: try PropertyListCodec.encodeXML(.dictionary(["b": .integer(2), "a": .integer(1)])), as: UTF8.self)
        #expect(xml == """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
            \t<key>a</key>
            \t<integer>1</integer>
            \t<key>b</key>
            \t<integer>2</integer>
            </dict>
            </plist>

            """)
    }

    @Test("strings may hold any control character: canonical XML writes them as references, and only CR's is XML 1.0")
    func controlCharacters() throws {
        for (text, reference) in [("bell\u{7}", "bell&#7;"), ("cr\r", "cr&#13;"), ("nul\u{0}", "nul&#0;"), ("esc\u{1B}", "esc&#27;"),
                                  ("tab\tnewline\n", "tab\tnewline\n")] {
            let xml = try PropertyListCodec.encodeXML(.string(text))
            #expect(String(decoding: xml, as: UTF8.self).contains("<string>\(reference)</string>"))
            #expect(try PropertyListCodec.decode(xml) == .string(text), "\(text.debugDescription) reads back")
            #expect(PropertyListCodec.carriesInXML10(xml) == (text.hasPrefix("cr") || text.hasPrefix("tab")), "\(text.debugDescription)")
            // The size the readers count is the encoder's, whatever format the value came in.
            for format in ValueFormat.allCases {
                let limits = PropertyListDecodingLimits(maxBytes: xml.count - 1)
                #expect(throws: StoreError.valueTooLarge(size: xml.count, limit: xml.count - 1)) {
                    try PropertyListCodec.decode(try PropertyListCodec.encode(.string(text), as: format), limits: limits)
                }
            }
        }
        // A text that merely looks like a reference is escaped, and stays XML 1.0.
        #expect(PropertyListCodec.carriesInXML10(try PropertyListCodec.encodeXML(.string("&#1;"))))
    }
}

extension PropertyListValue: CustomTestStringConvertible {
    public var testDescription: String { "\(type.rawValue)" }
}

@Suite("The plain-string reader")
struct PlainStringReaderTests {
    /// Documents near the plain-string form: the first choice of each part is the form the
    /// reader takes, the others are ones it must leave to Foundation (other declarations,
    /// entities, CDATA, carriage returns, other elements, trailing text, non-ASCII).
    static let declarations = [#"<?xml version="1.0" encoding="UTF-8"?>"#, #"<?xml version="1.0"?>"#, "", " "]
    static let doctypes = [#"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#, ""]
    static let gaps = ["\n", "", "\n\t ", "\r\n", "x"]
    static let pieces = ["a", "hello", " ", "\t", "\n", "\r", "&amp;", "&lt;", "&#65;", "&", "<", ">", "]]>", "<![CDATA[x]]>",
                         "é", "😀", "\u{1}", "\u{7F}", "0", "<b/>", "plist"]
    static let elements = [("<string>", "</string>"), ("<string>", "</strin>"), ("<key>", "</key>"), ("<integer>", "</integer>")]

    @Test("whatever it reads, Foundation reads the same; what Foundation refuses, the codec refuses")
    func agreesWithFoundation() {
        var generator = SeededGenerator(seed: 0x6B76_7366)
        /// Mostly the first choice, so that most documents are near the plain form.
        func pick<T>(_ choices: [T]) -> T {
            Int.random(in: 0..<4, using: &generator) == 0 ? choices.randomElement(using: &generator)! : choices[0]
        }
        var strings = 0
        for _ in 0..<4000 {
            let content = (0..<Int.random(in: 0...3, using: &generator)).map { _ in Self.pieces.randomElement(using: &generator)! }.joined()
            let (open, close) = pick(Self.elements)
            let trailer = pick(Self.gaps)
            let document = [pick(Self.declarations), pick(Self.gaps), pick(Self.doctypes), pick(Self.gaps),
                            #"<plist version="1.0">"#, pick(Self.gaps), open, content, close, pick(Self.gaps), "</plist>",
                            trailer].joined()
            let bytes = Array(document.utf8)
            let foundation = try? PropertyListSerialization.propertyList(from: Data(bytes), options: [], format: nil)
            let codec = try? PropertyListCodec.decode(bytes)
            if trailer == "x" {
                // Foundation ignores text after the root; a key holds one value, so the codec refuses it.
                #expect(codec == nil, "\(document.debugDescription)")
            } else if let text = foundation as? String {
                strings += 1
                #expect(codec == .string(text), "\(document.debugDescription)")
            } else if case .string? = codec {
                Issue.record("the codec read a string where Foundation read \(String(describing: foundation)): \(document.debugDescription)")
            }
        }
        #expect(strings > 1000, "the generator reaches readable strings often enough to test the reader")
    }
}
