import Foundation
import KVStore
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

    @Test("strings with control characters XML cannot carry are refused")
    func controlCharacters() {
        #expect(throws: StoreError.self) { try PropertyListCodec.encodeXML(.string("bell\u{7}")) }
        #expect(throws: StoreError.self) { try PropertyListCodec.encodeXML(.string("cr\r")) }
    }
}

extension PropertyListValue: CustomTestStringConvertible {
    public var testDescription: String { "\(type.rawValue)" }
}
