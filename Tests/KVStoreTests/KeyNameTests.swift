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
    @Test("a string holding U+FFFE or U+FFFF is refused, since its canonical XML would not be well-formed")
    func nonCharacters() throws {
        for text in ["a\u{FFFE}b", "\u{FFFF}", "x\u{FFFF}"] {
            #expect(throws: StoreError.self) { try PropertyListCodec.encodeXML(.string(text)) }
            #expect(throws: StoreError.self) { try PropertyListCodec.encodeXML(.dictionary([text: .boolean(true)])) }
        }
        // Their neighbours are fine.
        _ = try PropertyListCodec.encodeXML(.string("\u{FFFD}\u{FFEF}\u{EFBF}\u{10000}"))
    }
}
