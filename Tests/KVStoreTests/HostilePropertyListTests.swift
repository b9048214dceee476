import Foundation
import KVStore
import KVTestSupport
import Testing

/// A binary property list of `objects` (each already encoded), the top one first unless
/// `top` says otherwise, with 1-byte references.
private func bplist(_ objects: [[UInt8]], top: UInt64 = 0) -> [UInt8] {
    var out = Array("bplist00".utf8)
    var offsets = [Int]()
    for object in objects {
        offsets.append(out.count)
        out += object
    }
    let table = out.count
    let offsetSize = table < 256 ? 1 : 2
    for offset in offsets { out += bigEndian(UInt64(offset), offsetSize) }
    out += [0, 0, 0, 0, 0, 0, UInt8(offsetSize), 1]
    out += bigEndian(UInt64(objects.count), 8) + bigEndian(top, 8) + bigEndian(UInt64(table), 8)
    return out
}

private func bigEndian(_ value: UInt64, _ size: Int) -> [UInt8] {
    (0..<size).reversed().map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) }
}

/// The 57-byte binary property list of one date, written as in the report that found the crash:
/// `b'bplist00\x33' + pack('>d', d) + (8).to_bytes(8) + bytes(6) + bytes([8, 4]) + pack('>QQQ', 1, 0, 17)`.
private func binaryDate(_ seconds: Double) -> [UInt8] {
    Array("bplist00".utf8) + [0x33] + bigEndian(seconds.bitPattern, 8) + bigEndian(8, 8) + [0, 0, 0, 0, 0, 0, 8, 4]
        + bigEndian(1, 8) + bigEndian(0, 8) + bigEndian(17, 8)
}

/// Twenty arrays, each holding the one before twice: 2^20 strings once expanded.
private let referenceBomb: [UInt8] = bplist([[0x51, UInt8(ascii: "x")]] + (0..<20).map { [0xA2, UInt8($0), UInt8($0)] }, top: 20)

private func xml(_ body: String) -> [UInt8] {
    Array("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n\(body)\n</plist>\n".utf8)
}

private func decode(_ bytes: [UInt8], limits: PropertyListDecodingLimits = .standard) -> Result<PropertyListValue, StoreError> {
    Result { () throws(StoreError) in try PropertyListCodec.decode(bytes, limits: limits) }
}

/// Whether decoding `bytes` is refused as not a property list (any reason).
private func isRefused(_ bytes: [UInt8]) -> Bool {
    if case .failure(.invalidPropertyList) = decode(bytes) { return true }
    return false
}

/// Whether the refusal's reason contains `text`.
private func refusal(_ bytes: [UInt8], mentions text: String) -> Bool {
    if case .failure(.invalidPropertyList(let reason)) = decode(bytes) { return reason.contains(text) }
    return false
}

private func same(_ a: PropertyListValue, _ b: PropertyListValue) -> Bool { a.isSame(as: b) }

@Suite("Hostile property lists")
struct HostilePropertyListTests {
    @Test("a binary date of NaN, ±infinity, 1e300 or 1e18 is refused, not a crash", arguments: [Double.nan, .infinity, -.infinity, 1e300, 1e18, -1e18])
    func hostileDates(seconds: Double) {
        let bytes = binaryDate(seconds)
        #expect(bytes.count == 57)
        #expect(refusal(bytes, mentions: "date"), "\(seconds)")
    }

    @Test("binary dates within the rule read as whole seconds")
    func binaryDatesInRange() throws {
        #expect(try PropertyListCodec.decode(binaryDate(0.75)) == .date(Date(timeIntervalSinceReferenceDate: 0)))
        #expect(try PropertyListCodec.decode(binaryDate(-1.5)) == .date(Date(timeIntervalSinceReferenceDate: -2)))
        let first = -62_135_596_800 - 978_307_200.0, last = 253_402_300_799 - 978_307_200.0
        #expect(try PropertyListCodec.decode(binaryDate(first)) == .date(Date(timeIntervalSince1970: -62_135_596_800)))
        #expect(try PropertyListCodec.decode(binaryDate(last + 0.5)) == .date(Date(timeIntervalSince1970: 253_402_300_799)))
        #expect(isRefused(binaryDate(first - 1)))
        #expect(isRefused(binaryDate(last + 1)))
    }

    @Test("twenty arrays of references to references are refused as too large, in milliseconds")
    func referenceBombIsRefused() {
        let clock = ContinuousClock()
        var result: Result<PropertyListValue, StoreError>?
        let elapsed = clock.measure { result = decode(referenceBomb) }
        guard case .failure(.valueTooLarge(let size, let limit))? = result else {
            Issue.record("expected valueTooLarge, got \(String(describing: result))")
            return
        }
        #expect(limit == 1_048_576 && size > limit)
        #expect(elapsed < .milliseconds(500), "took \(elapsed)")
        // With a large byte limit, the object count stops it.
        let counted = decode(referenceBomb, limits: PropertyListDecodingLimits(maxBytes: .max))
        guard case .failure(.invalidPropertyList(let reason)) = counted else {
            Issue.record("expected the object limit, got \(counted)")
            return
        }
        #expect(reason.contains("262144 objects"))
    }

    @Test("a shared object counts at every place that names it")
    func sharedObjectsCountEachTime() throws {
        // One string named by an array four times.
        let bytes = bplist([[0xA4, 1, 1, 1, 1], [0x51, UInt8(ascii: "x")]])
        let value = try PropertyListCodec.decode(bytes)
        #expect(value == .array(Array(repeating: .string("x"), count: 4)))
        #expect(throws: StoreError.self) { try PropertyListCodec.decode(bytes, limits: PropertyListDecodingLimits(maxObjects: 4)) }
        #expect(try PropertyListCodec.decode(bytes, limits: PropertyListDecodingLimits(maxObjects: 5)) == value)
    }

    @Test("binary integers: 16 bytes only within −2^63…2^64−1, never truncated")
    func binaryIntegers() throws {
        let twoToThe100 = [0x14] + bigEndian(1 << 36, 8) + bigEndian(0, 8)
        #expect(refusal(bplist([twoToThe100]), mentions: "128-bit integer"))
        let max = [0x14] + bigEndian(0, 8) + bigEndian(.max, 8)
        #expect(try PropertyListCodec.decode(bplist([max])) == .unsignedInteger(.max))
        let minusFive = [0x14] + bigEndian(.max, 8) + bigEndian(UInt64(bitPattern: -5), 8)
        #expect(try PropertyListCodec.decode(bplist([minusFive])) == .integer(-5))
        let positiveWithHighBits = [0x14] + bigEndian(.max, 8) + bigEndian(5, 8)
        #expect(isRefused(bplist([positiveWithHighBits])))
        #expect(try PropertyListCodec.decode(bplist([[0x13] + bigEndian(UInt64(bitPattern: -7), 8)])) == .integer(-7))
        #expect(try PropertyListCodec.decode(bplist([[0x12] + bigEndian(0xFFFF_FFFF, 4)])) == .integer(0xFFFF_FFFF))
        #expect(isRefused(bplist([[0x15] + Array(repeating: 0, count: 32)])))
    }

    @Test("UInt64.max is read from XML and binary, and round-trips in both formats")
    func unsignedMaximum() throws {
        let fromXML = try PropertyListCodec.decode(xml("<integer>18446744073709551615</integer>"))
        #expect(fromXML == .unsignedInteger(.max))
        #expect(fromXML.type == .integer)
        #expect(try PropertyListCodec.decode(xml("<integer>9223372036854775808</integer>")) == .unsignedInteger(1 << 63))
        #expect(try PropertyListCodec.decode(xml("<integer>9223372036854775807</integer>")) == .integer(.max))
        #expect(try PropertyListCodec.decode(xml("<integer>-9223372036854775808</integer>")) == .integer(.min))
        #expect(isRefused(xml("<integer>18446744073709551616</integer>")))
        #expect(isRefused(xml("<integer>-9223372036854775809</integer>")))
        let canonical = String(decoding: try PropertyListCodec.encodeXML(fromXML), as: UTF8.self)
        #expect(canonical.contains("<integer>18446744073709551615</integer>"))
        let binary = try PropertyListCodec.encodeBinary(fromXML)
        #expect(binary[8] == 0x14, "16 bytes, as Apple writes integers above Int64.max")
        #expect(try PropertyListCodec.decode(binary) == fromXML)
        #expect(try PropertyListCodec.decode(PropertyListCodec.encodeXML(fromXML)) == fromXML)
    }

    @Test("data must be valid base64", arguments: ["!!!***", "AQ", "AQI", "A===", "AQ=I", "AQ==AQ==", "AQ==x", "&#65;QID", "AQ\u{1}ID"])
    func badBase64(text: String) {
        #expect(refusal(xml("<data>\(text)</data>"), mentions: "data"), "\(text.debugDescription)")
    }

    @Test("base64 may have whitespace between its characters and padding at its end")
    func goodBase64() throws {
        #expect(try PropertyListCodec.decode(xml("<data>\n\tAQ\n\tID\n</data>")) == .data(Data([1, 2, 3])))
        #expect(try PropertyListCodec.decode(xml("<data>AQ==</data>")) == .data(Data([1])))
        #expect(try PropertyListCodec.decode(xml("<data>AQI=</data>")) == .data(Data([1, 2])))
        #expect(try PropertyListCodec.decode(xml("<data>AQ = =</data>")) == .data(Data([1])))
        #expect(try PropertyListCodec.decode(xml("<data></data>")) == .data(Data()))
        #expect(try PropertyListCodec.decode(xml("<data/>")) == .data(Data()))
    }

    @Test("XML dates must be real dates and times within years 1–9999",
          arguments: ["2020-13-45T99:99:99Z", "2021-02-29T00:00:00Z", "2020-04-31T00:00:00Z", "2020-01-01T24:00:00Z",
                      "2020-01-01T00:60:00Z", "2020-01-01T00:00:60Z", "0000-01-01T00:00:00Z", "-0001-01-01T00:00:00Z",
                      "10000-01-01T00:00:00Z", "2020-01-01T00:00:00", "2020-1-01T00:00:00Z", " 2020-01-01T00:00:00Z",
                      "2020-01-01T00:00:00Z ", "2020-01-01"])
    func badDates(text: String) {
        #expect(isRefused(xml("<date>\(text)</date>")), "\(text)")
    }

    @Test("XML dates at the edges of the rule")
    func goodDates() throws {
        #expect(try PropertyListCodec.decode(xml("<date>0001-01-01T00:00:00Z</date>")) == .date(Date(timeIntervalSince1970: -62_135_596_800)))
        #expect(try PropertyListCodec.decode(xml("<date>9999-12-31T23:59:59Z</date>")) == .date(Date(timeIntervalSince1970: 253_402_300_799)))
        #expect(try PropertyListCodec.decode(xml("<date>2000-02-29T12:00:00Z</date>")) == .date(Date(timeIntervalSince1970: 951_825_600)))
    }

    @Test("the encoders refuse dates the decoders would refuse")
    func encodersRefuseOutOfRangeDates() {
        for date in [Date(timeIntervalSince1970: 1e18), Date(timeIntervalSince1970: -62_135_596_801)] {
            #expect(throws: StoreError.self) { try PropertyListCodec.encodeXML(.date(date)) }
            #expect(throws: StoreError.self) { try PropertyListCodec.encodeBinary(.date(date)) }
        }
    }

    @Test("empty keys and keys holding only a comment are the empty key")
    func emptyKeys() throws {
        #expect(try PropertyListCodec.decode(xml("<dict><key></key><string>a</string></dict>")) == .dictionary(["": .string("a")]))
        #expect(try PropertyListCodec.decode(xml("<dict><key/><string>a</string></dict>")) == .dictionary(["": .string("a")]))
        #expect(try PropertyListCodec.decode(xml("<dict><key><!-- c --></key><string>a</string></dict>")) == .dictionary(["": .string("a")]))
        #expect(try PropertyListCodec.decode(xml("<dict><key>a<!-- c -->b</key><string>x<?pi?>y</string></dict>")) == .dictionary(["ab": .string("xy")]))
        let value = PropertyListValue.dictionary(["": .integer(1)])
        #expect(try PropertyListCodec.decode(PropertyListCodec.encodeXML(value)) == value)
        #expect(try PropertyListCodec.decode(PropertyListCodec.encodeBinary(value)) == value)
    }

    @Test("a dictionary holding one key twice is refused, in every format")
    func duplicateKeys() {
        #expect(refusal(xml("<dict><key>k</key><true/><key>k</key><false/></dict>"), mentions: "the dictionary holds the key \"k\" twice"))
        #expect(refusal(xml("<dict><key>\u{E9}</key><true/><key>e\u{301}</key><false/></dict>"), mentions: "twice"))
        #expect(refusal(Array("{ k = a; k = b; }".utf8), mentions: "the dictionary holds the key \"k\" twice"))
        #expect(refusal(Array("\"k\" = a;\n\"k\" = b;\n".utf8), mentions: "twice"))
        let binary = bplist([[0xD2, 1, 2, 3, 3], [0x51, UInt8(ascii: "k")], [0x51, UInt8(ascii: "k")], [0x09]])
        #expect(refusal(binary, mentions: "the dictionary holds the key \"k\" twice"))
    }

    @Test("strings are valid Unicode")
    func invalidUnicode() {
        let latin1InUTF8 = Array("<plist><string>caf".utf8) + [0xE9] + Array("</string></plist>".utf8)
        #expect(refusal(latin1InUTF8, mentions: "UTF-8"))
        #expect(refusal(Array("<plist><string>".utf8) + [0xED, 0xA0, 0x80] + Array("</string></plist>".utf8), mentions: "UTF-8"))
        #expect(refusal(Array("<plist><string>".utf8) + [0xC0, 0xAF] + Array("</string></plist>".utf8), mentions: "UTF-8"))
        #expect(isRefused(xml("<string>&#xD800;</string>")))
        #expect(isRefused(xml("<string>&#x110000;</string>")))
        #expect(refusal(bplist([[0x61, 0xD8, 0x00]]), mentions: "surrogate"))
        #expect(refusal(bplist([[0x62, 0xDC, 0x00, 0x00, 0x41]]), mentions: "surrogate"))
        #expect(refusal(bplist([[0x53, 0x61, 0xE9, 0x62]]), mentions: "ASCII"))
        #expect(refusal(Array("\"\\UD83D\"".utf8), mentions: "surrogate"))
        #expect(refusal(Array("\"\\UDE00\"".utf8), mentions: "surrogate"))
    }

    @Test("UIDs, sets, null, fill and objects that contain themselves are refused")
    func binaryObjectsOutsideTheRule() {
        #expect(refusal(bplist([[0x80, 5]]), mentions: "UID"))
        #expect(refusal(bplist([[0xC1, 1], [0x09]]), mentions: "set"))
        #expect(refusal(bplist([[0x00]]), mentions: "null"))
        #expect(isRefused(bplist([[0x0F]])))
        #expect(refusal(bplist([[0xA1, 0]]), mentions: "contains itself"))
        #expect(refusal(bplist([[0xA1, 1], [0xD1, 2, 0], [0x51, UInt8(ascii: "k")]]), mentions: "contains itself"))
        #expect(refusal(bplist([[0xD1, 1, 1], [0x10, 5]]), mentions: "not a string"))
        #expect(refusal(bplist([[0x21, 0, 0]]), mentions: "real"))
    }

    @Test("a binary trailer that does not hold together is refused")
    func binaryTrailer() throws {
        let good = bplist([[0x51, UInt8(ascii: "x")]])
        #expect(try PropertyListCodec.decode(good) == .string("x"))
        func with(_ position: Int, _ byte: UInt8) -> [UInt8] {
            var bytes = good
            bytes[bytes.count - 32 + position] = byte
            return bytes
        }
        #expect(refusal(with(6, 0), mentions: "offsets 0 bytes"))
        #expect(refusal(with(6, 9), mentions: "offsets 9 bytes"))
        #expect(refusal(with(7, 0), mentions: "references 0 bytes"))
        #expect(refusal(with(15, 0), mentions: "objects"))
        #expect(refusal(with(23, 1), mentions: "top object"))
        #expect(refusal(with(31, 9), mentions: "offset table"))
        var badOffset = good
        badOffset[badOffset.count - 33] = 0xF0
        #expect(refusal(badOffset, mentions: "outside the objects"))
        #expect(refusal(bplist([[0xA1, 7]]), mentions: "refers to object 7"))
        #expect(refusal(bplist([[0x5F, 0x10, 5, 0x41]]), mentions: "past the end"))
        #expect(refusal(bplist([[0x5F, 0x10, 200, 0x41]]), mentions: "larger than the file"))
        #expect(refusal(Array("bplist10".utf8) + good.dropFirst(8), mentions: "bplist0"))
        // `bplist0` and any one byte is the header, as Apple's reader takes it.
        #expect(try PropertyListCodec.decode(Array("bplist0?".utf8) + good.dropFirst(8)) == PropertyListCodec.decode(good))
    }

    @Test("nesting is bounded: 128 arrays are read, 129 are refused, in every format")
    func depth() throws {
        func nestedXML(_ n: Int) -> [UInt8] { xml(String(repeating: "<array>", count: n) + String(repeating: "</array>", count: n)) }
        func nestedOpenStep(_ n: Int) -> [UInt8] { Array((String(repeating: "(", count: n) + String(repeating: ")", count: n)).utf8) }
        func nestedBinary(_ n: Int) -> [UInt8] { bplist([[0xA0]] + (0..<(n - 1)).map { [0xA1, UInt8($0)] }, top: UInt64(n - 1)) }
        for nested in [nestedXML, nestedOpenStep, nestedBinary] {
            #expect(throws: Never.self) { try PropertyListCodec.decode(nested(128)) }
            #expect(refusal(nested(129), mentions: "nested more than 128 deep"))
            #expect(refusal(nested(5), mentions: "nested") == false)
            #expect(throws: StoreError.self) { try PropertyListCodec.decode(nested(5), limits: PropertyListDecodingLimits(maxDepth: 4)) }
        }
    }

    @Test("the byte limit is the canonical XML length: a value of exactly the limit is read, one byte less refuses it",
          arguments: PropertyListCodecTests.samples)
    func canonicalSizeIsExact(value: PropertyListValue) throws {
        let size = try PropertyListCodec.encodeXML(value).count
        for encoded in [try PropertyListCodec.encodeXML(value), try PropertyListCodec.encodeBinary(value)] {
            #expect(try PropertyListCodec.decode(encoded, limits: PropertyListDecodingLimits(maxBytes: size)) == value)
            #expect(throws: StoreError.valueTooLarge(size: size, limit: size - 1)) {
                try PropertyListCodec.decode(encoded, limits: PropertyListDecodingLimits(maxBytes: size - 1))
            }
        }
    }

    @Test("the plain-string path keeps to the byte limit too")
    func plainStringLimit() throws {
        let text = String(repeating: "a", count: 1000)
        let bytes = xml("<string>\(text)</string>")
        let size = try PropertyListCodec.encodeXML(.string(text)).count
        #expect(try PropertyListCodec.decode(bytes, limits: PropertyListDecodingLimits(maxBytes: size)) == .string(text))
        #expect(throws: StoreError.valueTooLarge(size: size, limit: size - 1)) {
            try PropertyListCodec.decode(bytes, limits: PropertyListDecodingLimits(maxBytes: size - 1))
        }
    }

    @Test("OpenStep text as Foundation reads it")
    func openStep() throws {
        #expect(try PropertyListCodec.decode(Array("hello".utf8)) == .string("hello"))
        #expect(try PropertyListCodec.decode(Array("hello\n".utf8)) == .string("hello"))
        #expect(try PropertyListCodec.decode(Array("hello // greeting\n".utf8)) == .string("hello"))
        #expect(refusal(Array("hello world\n".utf8), mentions: "expected ';' or '='"))
        #expect(try PropertyListCodec.decode(Array("\"a\" = \"b\";\n".utf8)) == .dictionary(["a": .string("b")]))
        #expect(try PropertyListCodec.decode(Array("a;".utf8)) == .dictionary(["a": .string("a")]))
        #expect(try PropertyListCodec.decode(Array(" \n".utf8)) == .dictionary([:]))
        #expect(try PropertyListCodec.decode(Array("(a, b,)".utf8)) == .array([.string("a"), .string("b")]))
        #expect(try PropertyListCodec.decode(Array("<0fab 12>".utf8)) == .data(Data([0x0F, 0xAB, 0x12])))
        #expect(try PropertyListCodec.decode(Array(#""\U00e9\101\n\"""#.utf8)) == .string("éA\n\""))
        #expect(try PropertyListCodec.decode(Array(#""\UD83D\UDE00""#.utf8)) == .string("😀"))
        for text in ["(a,,)", "(,)", "{ a = b }", "\"open", "<0fa>", "<0g>", "/* open", "a = b; junk!", "(a) b", "\"\\376\""] {
            #expect(isRefused(Array(text.utf8)), "\(text.debugDescription)")
        }
    }

    @Test("text in UTF-16 (with a byte-order mark or without) and in a declared Latin-1 is read")
    func encodings() throws {
        let text = "<?xml version=\"1.0\" encoding=\"UTF-16\"?><plist version=\"1.0\"><string>Zoë 😀</string></plist>"
        #expect(try PropertyListCodec.decode([0xFF, 0xFE] + text.utf16.flatMap { [UInt8(truncatingIfNeeded: $0), UInt8($0 >> 8)] }) == .string("Zoë 😀"))
        #expect(try PropertyListCodec.decode(text.utf16.flatMap { [UInt8($0 >> 8), UInt8(truncatingIfNeeded: $0)] }) == .string("Zoë 😀"))
        #expect(try PropertyListCodec.decode([0xEF, 0xBB, 0xBF] + Array("hello".utf8)) == .string("hello"))
        let latin1 = Array("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><plist><string>caf".utf8) + [0xE9] + Array("</string></plist>".utf8)
        #expect(try PropertyListCodec.decode(latin1) == .string("café"))
        #expect(isRefused([0xFF, 0xFE, 0x41]))
        #expect(isRefused(Array("<?xml version=\"1.0\" encoding=\"EBCDIC\"?><plist/>".utf8)))
    }

    @Test("XML as Foundation reads it: declaration, DOCTYPE, comments, PIs, CDATA, entities, empty elements, attributes")
    func xmlForms() throws {
        #expect(try PropertyListCodec.decode(xml("<string>&lt;&gt;&amp;&apos;&quot;&#65;&#x1F600;<![CDATA[<&>]]></string>")) == .string("<>&'\"A😀<&>"))
        #expect(try PropertyListCodec.decode(xml("<!-- c --><?pi x?>\n<array><!-- c --><string/><dict/><array/><true/><false/></array>"))
            == .array([.string(""), .dictionary([:]), .array([]), .boolean(true), .boolean(false)]))
        #expect(try PropertyListCodec.decode(Array("<string attr=\"1\" >a</string >".utf8)) == .string("a"))
        #expect(try PropertyListCodec.decode(xml("<key>k</key>")) == .string("k"))
        #expect(try PropertyListCodec.decode(xml("<integer> -0x1F</integer>")) == .integer(-31))
        guard case .real(let notANumber) = try PropertyListCodec.decode(xml("<real>nan</real>")) else {
            Issue.record("nan is not read as a real")
            return
        }
        #expect(notANumber.isNaN)
        #expect(try PropertyListCodec.decode(xml("<real>-infinity</real>")) == .real(-.infinity))
        #expect(try PropertyListCodec.decode(xml("<real>.5</real>")) == .real(0.5))
        // After the root: comments, processing instructions and white space; nothing else (Foundation ignores the rest).
        #expect(try PropertyListCodec.decode(Array("<plist><string>a</string></plist>\n<!-- c --><?pi?>\n".utf8)) == .string("a"))
        #expect(isRefused(Array("<plist><string>a</string></plist>trailing".utf8)))
        #expect(isRefused(Array("<string>a</string><string>b</string>".utf8)))
        let refused = ["<plist></plist>", "<plist/>", "<plist><string>a</string><string>b</string></plist>", "<plist><foo/></plist>",
                       "<plist><string>a</plist>", "<plist><string>&bogus;</string></plist>", "<plist><string>a<b/></string></plist>",
                       "<plist><integer>1 </integer></plist>", "<plist><integer>0x</integer></plist>", "<plist><real>1,5</real></plist>",
                       "<plist><true>x</true></plist>", "<plist><dict><string>a</string></dict></plist>", "<plist><dict><key>a</key></dict></plist>",
                       "<plist><array>text</array></plist>", "<plist><plist/></plist>", "<!-- open", "<plist><!DOCTYPE x></plist>"]
        for text in refused { #expect(isRefused(Array(text.utf8)), "\(text)") }
    }

    @Test("truncated and mangled input of every format is refused or read, never a crash",
          arguments: ["preferences.xml.plist", "preferences.binary.plist", "dict.openstep.plist", "info.binary.plist", "string-entities.xml.plist"])
    func truncatedAndMangled(name: String) throws {
        let bytes = try Corpus.bytes(name)
        for length in 0..<bytes.count {
            let prefix = Array(bytes[..<length])
            let result = decode(prefix)
            // Shorter than "bplist", a prefix is an OpenStep word.
            if name.contains(".binary."), length >= 6 { #expect(isRefused(prefix), "\(name) cut at \(length): \(result)") }
        }
        var generator = SeededGenerator(seed: 0x706C_6973)
        for _ in 0..<3000 {
            var mangled = bytes
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let at = Int.random(in: 0..<mangled.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: mangled[at] = UInt8.random(in: 0...255, using: &generator)
                case 1: mangled[at] = [0x00, 0xFF, 0x0F, 0x7F, 0x80, 0x3C, 0x26][Int.random(in: 0..<7, using: &generator)]
                default: mangled.insert(UInt8.random(in: 0...255, using: &generator), at: at)
                }
            }
            guard case .success(let value) = decode(mangled) else { continue }
            for format in ValueFormat.allCases {
                guard let encoded = try? PropertyListCodec.encode(value, as: format) else { continue }
                guard case .success(let again) = decode(encoded), same(value, again) else {
                    Issue.record("\(name) mangled decodes to a value whose \(format) form does not decode back")
                    continue
                }
            }
        }
        for _ in 0..<2000 {
            let garbage = (0..<Int.random(in: 1...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = decode(garbage)
            _ = decode(Array("bplist00".utf8) + garbage)
            _ = decode(Array("<plist>".utf8) + garbage)
        }
    }
}

/// The seed corpus in `Tests/Corpus/plist`, named by format (`*.xml.plist`, `*.binary.plist`,
/// `*.openstep.plist`); `hostile-*` files lie outside the value rule or the limits.
enum Corpus {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Corpus/plist")

    static func names() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".plist") }.sorted()
    }

    static func bytes(_ name: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: directory.appendingPathComponent(name)))
    }
}

@Suite("The seed corpus against Foundation")
struct CorpusDifferentialTests {
    /// Files Foundation's parser refuses that are within the rule: a key holding only a comment.
    static let beyondFoundation: Swift.Set = ["comment-key.xml.plist"]

    @Test("the corpus has 30 to 60 files of the three formats")
    func corpusShape() throws {
        let names = try Corpus.names()
        #expect((30...60).contains(names.count))
        for format in [".xml.plist", ".binary.plist", ".openstep.plist"] {
            #expect(names.contains { $0.hasSuffix(format) && !$0.hasPrefix("hostile-") }, "\(format)")
            #expect(names.allSatisfy { $0.hasSuffix(".xml.plist") || $0.hasSuffix(".binary.plist") || $0.hasSuffix(".openstep.plist") })
        }
    }

    @Test("every hostile file is refused")
    func hostileFiles() throws {
        for name in try Corpus.names() where name.hasPrefix("hostile-") {
            let result = decode(try Corpus.bytes(name))
            guard case .failure = result else {
                Issue.record("\(name) was read: \(result)")
                continue
            }
        }
    }

    @Test("every other file is read; where Foundation reads it too, both read the same value")
    func agreesWithFoundation() throws {
        var compared = 0
        for name in try Corpus.names() where !name.hasPrefix("hostile-") {
            let bytes = try Corpus.bytes(name)
            guard case .success(let value) = decode(bytes) else {
                Issue.record("\(name) was refused: \(decode(bytes))")
                continue
            }
            guard let object = try? PropertyListSerialization.propertyList(from: Data(bytes), options: [], format: nil) else {
                #expect(Self.beyondFoundation.contains(name), "Foundation refuses \(name)")
                continue
            }
            guard let expected = FoundationPropertyList.value(object) else {
                Issue.record("Foundation reads \(name) as something outside the value types")
                continue
            }
            #expect(same(value, expected), "\(name): \(value) but Foundation reads \(expected)")
            compared += 1
        }
        #expect(compared >= 25)
    }

    @Test("every value read from the corpus round-trips through both formats, and Foundation reads the binary form as the same value")
    func roundTrips() throws {
        for name in try Corpus.names() where !name.hasPrefix("hostile-") {
            guard case .success(let value) = decode(try Corpus.bytes(name)) else { continue }
            // A value XML cannot carry (a control character read from a binary list) is the one
            // reason the XML half may not apply.
            switch Result(catching: { () throws(StoreError) in try PropertyListCodec.encodeXML(value) }) {
            case .success(let canonical):
                #expect(decode(canonical).map { same($0, value) } == .success(true), "\(name) as XML")
            case .failure(let error):
                #expect(String(describing: error).contains("cannot carry"), "\(name): \(error)")
            }
            let binary = try PropertyListCodec.encodeBinary(value)
            #expect(decode(binary).map { same($0, value) } == .success(true), "\(name) as binary")
            let object = try PropertyListSerialization.propertyList(from: Data(binary), options: [], format: nil)
            #expect(FoundationPropertyList.value(object).map { same($0, value) } == true, "Foundation reading \(name) as binary")
        }
    }
}

/// Foundation's objects as values, as the codec mapped them before it had readers of its own.
enum FoundationPropertyList {
    static func value(_ object: Any) -> PropertyListValue? {
        switch object {
        case let string as String:
            return .string(string)
        case let bool as Bool where type(of: object) == Bool.self:
            return .boolean(bool)
        case let number as NSNumber:
            switch String(cString: number.objCType) {
            case "d", "f": return .real(number.doubleValue)
            case "Q" where number.uint64Value > UInt64(Int.max): return .unsignedInteger(number.uint64Value)
            default: return .integer(number.intValue)
            }
        case let date as Date:
            return .date(Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)))
        case let data as Data:
            return .data(data)
        case let array as [Any]:
            var items = [PropertyListValue]()
            for item in array {
                guard let value = value(item) else { return nil }
                items.append(value)
            }
            return .array(items)
        case let dictionary as [AnyHashable: Any]:
            var items = [String: PropertyListValue]()
            for (key, item) in dictionary {
                guard let key = key.base as? String, let value = value(item) else { return nil }
                items[key] = value
            }
            return .dictionary(items)
        default:
            return nil
        }
    }
}
