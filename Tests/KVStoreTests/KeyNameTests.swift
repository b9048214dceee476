import KVStore
import Testing

@Suite("The key rule")
struct KeyNameTests {
    @Test("every spelling of a name normalises to the same NFC bytes, Hangul included")
    func normalForms() {
        let cases: [(String, String)] = [
            ("cafe\u{301}", "caf\u{E9}"),
            ("caf\u{E9}", "caf\u{E9}"),
            ("\u{AC00}\u{11A8}", "\u{AC01}"),         // LV + T: Foundation alone leaves it
            ("\u{1100}\u{1161}\u{11A8}", "\u{AC01}"),  // L + V + T
            ("\u{1100}\u{1161}", "\u{AC00}"),
            ("\u{AC01}\u{11A8}", "\u{AC01}\u{11A8}"),  // LVT + T does not compose
            ("a\u{AC00}\u{301}\u{11A8}", "a\u{AC00}\u{301}\u{11A8}"),  // a mark between blocks it
            ("plain-ascii", "plain-ascii"),
        ]
        for (spelling, nfc) in cases {
            #expect(Array(KeyName.canonical(spelling).unicodeScalars) == Array(nfc.unicodeScalars), "\(spelling.unicodeScalars.map { String($0.value, radix: 16) })")
            #expect(KeyName.isCanonical(KeyName.canonical(spelling)))
        }
        #expect(!KeyName.isCanonical("\u{AC00}\u{11A8}"))
        #expect(!KeyName.isCanonical("cafe\u{301}"))
    }
}

@Suite("Characters XML cannot carry")
struct XMLCharacterTests {
    @Test("a string or key holding U+FFFE or U+FFFF is kept as a character reference, and marked as not XML 1.0")
    func nonCharacters() throws {
        for text in ["a\u{FFFE}b", "\u{FFFF}", "x\u{FFFF}"] {
            for value in [PropertyListValue.string(text), .dictionary([text: .boolean(true)])] {
                let xml = try PropertyListCodec.encodeXML(value)
                #expect(try PropertyListCodec.decode(xml) == value)
                #expect(!PropertyListCodec.carriesInXML10(xml))
                #expect(try PropertyListCodec.decode(PropertyListCodec.encodeBinary(value)) == value)
            }
        }
        // Their neighbours are XML 1.0 as they are.
        let neighbours = try PropertyListCodec.encodeXML(.string("\u{FFFD}\u{FFEF}\u{EFBF}\u{10000}"))
        #expect(PropertyListCodec.carriesInXML10(neighbours) && String(decoding: neighbours, as: UTF8.self).contains("\u{FFFD}"))
    }
}
