import Foundation

/// What a key is, the same at every door: a non-empty string of Unicode scalars (valid UTF-8
/// in a file name or on the wire), in Normalization Form C.
///
/// Every door normalises: a file name in the mount, a push to the server or the file remote,
/// a change fetched from a remote. The two spellings of `café` (precomposed, or `e` with a
/// combining accent) are therefore one key everywhere: one row in each database, one file in
/// the mount (listed in NFC), one count against the quotas. Once normalised, keys compare by
/// their bytes, as both databases compare them and as Swift's string equality then agrees.
public enum KeyName {
    /// The longest key, in bytes of UTF-8, that any door takes, whatever a store's key-name
    /// quota says (that quota is judged per change, later): the wire's bound (KVWire's
    /// `WireLimits`) and a history mark's. A mount's own quota is lower still
    /// (`KeyFileName.longestKeyBytes` in KVSFS), so that every key has a file name.
    public static let maximumBytes = 1024

    /// `key` in Normalization Form C.
    public static func canonical(_ key: String) -> String {
        isASCII(key) ? key : composingHangul(key.precomposedStringWithCanonicalMapping)
    }

    /// Whether `key` is already in Normalization Form C (byte for byte).
    public static func isCanonical(_ key: String) -> Bool {
        isASCII(key) || key.utf8.elementsEqual(canonical(key).utf8)
    }

    /// Composes adjacent Hangul jamo as Unicode's algorithm does (L+V to LV, LV+T to LVT).
    /// Foundation's NFC on Linux leaves an LV syllable followed by a trailing consonant
    /// (U+AC00 U+11A8) as it is, where NFC is U+AC01: two spellings of one key would
    /// otherwise stay two byte strings.
    static func composingHangul(_ text: String) -> String {
        let syllables: ClosedRange<UInt32> = 0xAC00...0xD7A3
        let leading: ClosedRange<UInt32> = 0x1100...0x1112
        let vowels: ClosedRange<UInt32> = 0x1161...0x1175
        let trailing: ClosedRange<UInt32> = 0x11A8...0x11C2
        var scalars = [Unicode.Scalar]()
        var composed = false
        for scalar in text.unicodeScalars {
            if let last = scalars.last?.value {
                var joined: UInt32?
                if leading.contains(last), vowels.contains(scalar.value) {
                    joined = 0xAC00 + ((last - 0x1100) * 21 + (scalar.value - 0x1161)) * 28
                } else if syllables.contains(last), (last - 0xAC00) % 28 == 0, trailing.contains(scalar.value) {
                    joined = last + (scalar.value - 0x11A7)
                }
                if let joined, let syllable = Unicode.Scalar(joined) {
                    scalars[scalars.count - 1] = syllable
                    composed = true
                    continue
                }
            }
            scalars.append(scalar)
        }
        guard composed else { return text }
        var result = String.UnicodeScalarView()
        result.append(contentsOf: scalars)
        return String(result)
    }

    /// ASCII is its own normal form: the common case costs one pass over the bytes.
    private static func isASCII(_ key: String) -> Bool {
        key.utf8.allSatisfy { $0 < 0x80 }
    }
}
