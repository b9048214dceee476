import Foundation

/// The characters of a text (XML or OpenStep) property list, as valid UTF-8.
///
/// The encoding is found as Foundation finds it: a byte-order mark (UTF-8, UTF-16, UTF-32), a
/// zero among the first two bytes (UTF-16 without a mark), else the `encoding` an XML
/// declaration names, else UTF-8. Text in any of them that does not decode is refused.
enum PropertyListText {
    /// Calls `body` with the document as UTF-8 (the input itself, less a byte-order mark, when
    /// it already is UTF-8).
    static func withUTF8<R>(_ bytes: UnsafeBufferPointer<UInt8>,
                            _ body: (UnsafeBufferPointer<UInt8>) throws(StoreError) -> R) throws(StoreError) -> R {
        switch try encoding(of: bytes) {
        case .utf8(let skip):
            let text = UnsafeBufferPointer(rebasing: bytes[skip...])
            if let offset = firstInvalidUTF8(text) {
                throw .invalidPropertyList("byte \(offset + skip) is not valid UTF-8")
            }
            return try body(text)
        case .unicode(let unitSize, let bigEndian, let skip):
            var converted = try transcode(UnsafeBufferPointer(rebasing: bytes[skip...]), unitSize: unitSize, bigEndian: bigEndian)
            return try converted.withUnsafeMutableBufferPointer { (buffer) throws(StoreError) -> R in try body(UnsafeBufferPointer(buffer)) }
        case .foundation(let encoding, let name):
            guard let string = String(bytes: bytes, encoding: encoding) else {
                throw .invalidPropertyList("the text is not valid \(name)")
            }
            var converted = Array(string.utf8)
            return try converted.withUnsafeMutableBufferPointer { (buffer) throws(StoreError) -> R in try body(UnsafeBufferPointer(buffer)) }
        }
    }

    private static let utf8Name = Array("utf-8".utf8)

    private enum Encoding {
        case utf8(skip: Int)
        case unicode(unitSize: Int, bigEndian: Bool, skip: Int)
        case foundation(String.Encoding, name: String)
    }

    private static func encoding(of bytes: UnsafeBufferPointer<UInt8>) throws(StoreError) -> Encoding {
        func starts(_ prefix: [UInt8]) -> Bool { bytes.count >= prefix.count && zip(bytes, prefix).allSatisfy { $0 == $1 } }
        if starts([0x00, 0x00, 0xFE, 0xFF]) { return .unicode(unitSize: 4, bigEndian: true, skip: 4) }
        if starts([0xFF, 0xFE, 0x00, 0x00]) { return .unicode(unitSize: 4, bigEndian: false, skip: 4) }
        if starts([0xEF, 0xBB, 0xBF]) { return .utf8(skip: 3) }
        if starts([0xFF, 0xFE]) { return .unicode(unitSize: 2, bigEndian: false, skip: 2) }
        if starts([0xFE, 0xFF]) { return .unicode(unitSize: 2, bigEndian: true, skip: 2) }
        if bytes.count >= 2, bytes[0] == 0 { return .unicode(unitSize: 2, bigEndian: true, skip: 0) }
        if bytes.count >= 2, bytes[1] == 0 { return .unicode(unitSize: 2, bigEndian: false, skip: 0) }
        guard let declared = declaredEncoding(bytes) else { return .utf8(skip: 0) }
        if declared.count == utf8Name.count, zip(declared, utf8Name).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) { return .utf8(skip: 0) }
        let name = String(decoding: declared, as: UTF8.self)
        switch name.lowercased() {
        // A document whose declaration names a 16- or 32-bit encoding but has no zero bytes up
        // front is evidently 8-bit: it is read as UTF-8.
        case "utf-8", "utf8", "us-ascii", "ascii", "utf-16", "utf-16be", "utf-16le", "utf-32", "utf-32be", "utf-32le":
            return .utf8(skip: 0)
        case "iso-8859-1", "iso_8859-1", "latin1", "l1", "iso-latin-1": return .foundation(.isoLatin1, name: name)
        case "iso-8859-2", "iso_8859-2", "latin2", "l2": return .foundation(.isoLatin2, name: name)
        case "windows-1252", "cp1252": return .foundation(.windowsCP1252, name: name)
        case "windows-1250", "cp1250": return .foundation(.windowsCP1250, name: name)
        case "macintosh", "x-mac-roman", "macroman": return .foundation(.macOSRoman, name: name)
        case "shift_jis", "shift-jis", "sjis": return .foundation(.shiftJIS, name: name)
        case "euc-jp": return .foundation(.japaneseEUC, name: name)
        default:
            throw .invalidPropertyList("the XML declaration names the encoding \(name), which is not read here (write UTF-8)")
        }
    }

    /// The value of `encoding="…"` in a leading `<?xml … ?>` declaration.
    private static func declaredEncoding(_ bytes: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8>? {
        let opening = Array("<?xml".utf8)
        guard bytes.count > opening.count, zip(bytes, opening).allSatisfy({ $0 == $1 }) else { return nil }
        let name = Array("encoding".utf8)
        var at = opening.count
        while at < bytes.count, bytes[at] != UInt8(ascii: "?"), bytes[at] != UInt8(ascii: ">") {
            if bytes.count - at > name.count, zip(bytes[at...], name).allSatisfy({ $0 == $1 }) {
                var cursor = at + name.count
                while cursor < bytes.count, isSpace(bytes[cursor]) { cursor += 1 }
                guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: "=") else { return nil }
                cursor += 1
                while cursor < bytes.count, isSpace(bytes[cursor]) { cursor += 1 }
                guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: "\"") || bytes[cursor] == UInt8(ascii: "'") else { return nil }
                let quote = bytes[cursor]
                let start = cursor + 1
                guard let end = bytes[start...].firstIndex(of: quote) else { return nil }
                return UnsafeBufferPointer(rebasing: bytes[start..<end])
            }
            at += 1
        }
        return nil
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    /// Big-endian UTF-16 to UTF-8 (binary property lists' strings).
    static func utf16(_ bytes: UnsafeBufferPointer<UInt8>) throws(StoreError) -> [UInt8] {
        try transcode(bytes, unitSize: 2, bigEndian: true)
    }

    /// UTF-16 or UTF-32 code units to UTF-8, refusing lone surrogates, values past U+10FFFF and
    /// a trailing partial unit.
    private static func transcode(_ bytes: UnsafeBufferPointer<UInt8>, unitSize: Int, bigEndian: Bool) throws(StoreError) -> [UInt8] {
        guard bytes.count % unitSize == 0 else {
            throw .invalidPropertyList("the text is UTF-\(unitSize * 8) but ends in the middle of a character")
        }
        func unit(_ index: Int) -> UInt32 {
            var value: UInt32 = 0
            for k in 0..<unitSize {
                let byte = UInt32(bytes[index * unitSize + (bigEndian ? k : unitSize - 1 - k)])
                value = value << 8 | byte
            }
            return value
        }
        let count = bytes.count / unitSize
        var out = [UInt8]()
        out.reserveCapacity(count)
        var index = 0
        while index < count {
            var scalarValue = unit(index)
            index += 1
            if unitSize == 2, (0xD800...0xDBFF).contains(scalarValue) {
                guard index < count, (0xDC00...0xDFFF).contains(unit(index)) else {
                    throw .invalidPropertyList("the UTF-16 text holds a lone surrogate")
                }
                scalarValue = 0x10000 + ((scalarValue - 0xD800) << 10) + (unit(index) - 0xDC00)
                index += 1
            }
            guard let scalar = Unicode.Scalar(scalarValue) else {
                throw .invalidPropertyList("the UTF-\(unitSize * 8) text holds \(scalarValue), which is not a Unicode character")
            }
            out.append(contentsOf: scalar.utf8)
        }
        return out
    }

    /// The offset of the first byte that is not part of valid UTF-8 (overlong forms,
    /// surrogates and values past U+10FFFF are invalid), or nil.
    static func firstInvalidUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        var at = 0
        let count = bytes.count
        while at < count {
            let lead = bytes[at]
            if lead < 0x80 { at += 1; continue }
            let length: Int
            var low: UInt8 = 0x80, high: UInt8 = 0xBF  // the allowed range of the second byte
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; high = 0x9F
            case 0xF0: length = 4; low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; high = 0x8F
            default: return at
            }
            guard count - at >= length, (low...high).contains(bytes[at + 1]) else { return at }
            for k in 2..<max(2, length) where bytes[at + k] & 0xC0 != 0x80 { return at }
            at += length
        }
        return nil
    }

    // MARK: - Messages

    /// The line (from 1) of the byte at `position`.
    static func line(in bytes: UnsafeBufferPointer<UInt8>, at position: Int) -> Int {
        var line = 1
        for byte in UnsafeBufferPointer(rebasing: bytes[..<min(max(position, 0), bytes.count)]) where byte == 0x0A { line += 1 }
        return line
    }

    /// The character at `position`, quoted, for a message.
    static func describe(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int) -> String {
        guard position < bytes.count else { return "the end" }
        var end = position + 1
        while end < bytes.count, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return "'\(String(decoding: UnsafeBufferPointer(rebasing: bytes[position..<end]), as: UTF8.self))'"
    }

    /// At most 40 characters of `string`.
    static func shortened(_ string: String) -> String {
        string.count > 40 ? String(string.prefix(40)) + "…" : string
    }

    static func quoted(_ string: String) -> String { shortened(string).debugDescription }
}
