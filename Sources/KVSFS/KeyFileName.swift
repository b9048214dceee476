/// The reversible mapping between keys and file names.
///
/// A key is shown under its own name, except that `/` and NUL are written `%2F` and `%00`,
/// a `%` followed by two upper-case hex digits is written `%25`, the keys `.` and `..` are
/// written `%2E` and `%2E%2E`, and a key whose name would be taken for an editor file
/// (`EditorFileRule`) has its first and last characters written as `%XX`. Only canonical
/// names (those this mapping produces) name keys, so every key has exactly one file name.
public enum KeyFileName {
    /// The longest key, in bytes of UTF-8, a mount's key-name quota may allow: escaped whole,
    /// three bytes for each, its file name is 240 bytes, within the 255 a name may have.
    public static let longestKeyBytes = 80

    /// The file name of `key`.
    public static func fileName(forKey key: String) -> String {
        if key == "." { return "%2E" }
        if key == ".." { return "%2E%2E" }
        let utf8 = Array(key.utf8)
        let plain = escaping(utf8)
        guard EditorFileRule.isEditorFile(plain) else { return plain }
        // Escape the key's first character (every byte of it) and its last if ASCII too: no
        // editor-file name starts with `%` or ends in a hex digit. Both are taken from the key,
        // not from `plain`, so that an escape already there is kept whole.
        let first = key.unicodeScalars.first!.utf8.count
        let last = utf8.count - 1
        return escaping(utf8) { index in index < first || (index == last && utf8[last] < 0x80) }
    }

    /// `utf8` with `/`, NUL and a `%` that would read as an escape written `%XX`, and so is
    /// every byte at an index `alsoEscaping` picks.
    private static func escaping(_ utf8: [UInt8], alsoEscaping: (Int) -> Bool = { _ in false }) -> String {
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count)
        for (index, byte) in utf8.enumerated() {
            switch byte {
            case UInt8(ascii: "/"), 0:
                appendEscape(byte, to: &bytes)
            case UInt8(ascii: "%") where index + 2 < utf8.count && isUpperHex(utf8[index + 1]) && isUpperHex(utf8[index + 2]):
                appendEscape(byte, to: &bytes)
            default:
                if alsoEscaping(index) { appendEscape(byte, to: &bytes) } else { bytes.append(byte) }
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The key a file name stands for, or nil when the name is not the canonical name of any key.
    public static func key(forFileName name: String) -> String? {
        guard !name.isEmpty, name != ".", name != ".." else { return nil }
        let utf8 = Array(name.utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "%"), index + 2 < utf8.count, let high = hexValue(utf8[index + 1]), let low = hexValue(utf8[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        guard let key = String(validating: bytes, as: UTF8.self), !key.isEmpty else { return nil }
        return fileName(forKey: key) == name ? key : nil
    }

    private static func appendEscape(_ byte: UInt8, to bytes: inout [UInt8]) {
        let digits = Array("0123456789ABCDEF".utf8)
        bytes.append(UInt8(ascii: "%"))
        bytes.append(digits[Int(byte >> 4)])
        bytes.append(digits[Int(byte & 0xF)])
    }

    private static func isUpperHex(_ byte: UInt8) -> Bool { hexValue(byte) != nil }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Which file names are editors' and tools' scratch files rather than keys.
///
/// They live only in the mount's memory: never stored, never synced, never counted against
/// the quota, gone when the mount ends. The names:
/// - `.NAME.swp` … `.NAME.swa` and `.NAME.swpx`: vim's (and nano's) swap and lock files;
/// - `NAME~`: backups (vim, nano, emacs, `cp --backup`);
/// - `sedXXXXXX` (six letters or digits): `sed -i`'s temporary file;
/// - `.NAME.XXXXXX` (six letters or digits) made as mkstemp makes a file (O_EXCL, mode 0600):
///   rsync's temporary file. The name alone does not decide it (`isTransferShaped`): a key may
///   be named so (`.vimrc.backup`, `.backup.202406`), and a name that exists is always what it
///   was; only a new file made that way is scratch (see `KeyValueFileSystem.create`).
/// - `#NAME#` and `.#NAME`: emacs's auto-save and lock files.
public enum EditorFileRule {
    public static func isEditorFile(_ name: String) -> Bool {
        let utf8 = Array(name.utf8)
        guard let first = utf8.first, let last = utf8.last else { return false }
        if last == UInt8(ascii: "~") { return true }
        if first == UInt8(ascii: "#"), last == UInt8(ascii: "#"), utf8.count >= 2 { return true }
        if first == UInt8(ascii: "."), utf8.count >= 2, utf8[1] == UInt8(ascii: "#") { return true }
        if first == UInt8(ascii: "."), isSwapName(utf8) { return true }
        if utf8.count == 9, name.hasPrefix("sed"),
           utf8[3...].allSatisfy({ isAlphanumeric($0) }) { return true }
        return false
    }

    /// `.NAME.XXXXXX`: a dot, a name, a dot and six letters or digits, as rsync names the
    /// temporary file it makes with mkstemp.
    public static func isTransferShaped(_ name: String) -> Bool {
        let utf8 = Array(name.utf8)
        guard utf8.count >= 9, utf8[0] == UInt8(ascii: "."), utf8[utf8.count - 7] == UInt8(ascii: ".") else { return false }
        return utf8.suffix(6).allSatisfy(isAlphanumeric)
    }

    /// `.x.swp`, `.x.swo`, … `.x.swa`, `.x.swpx`.
    private static func isSwapName(_ utf8: [UInt8]) -> Bool {
        let name = String(decoding: utf8, as: UTF8.self)
        if name.hasSuffix(".swpx") { return utf8.count > 6 }
        guard utf8.count > 5 else { return false }
        let tail = utf8.suffix(4)
        return tail.starts(with: Array(".sw".utf8)) && (UInt8(ascii: "a")...UInt8(ascii: "p")).contains(tail.last!)
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
