/// The commonest value written to a key, an XML property list holding one plain string, read
/// without Foundation's parser.
///
/// Only a document whose every byte is unambiguous is read here: the XML declaration and
/// DOCTYPE exactly as Apple's tools (and kvsfs) write them, `<plist version="1.0">`, one
/// `<string>` of printable ASCII, tabs and newlines with no markup or entity in it, and
/// whitespace between the tags. Anything else, valid or not, is left to Foundation, which
/// gives the same value for every document read here.
enum PlainStringPropertyList {
    static func decode(_ bytes: some Collection<UInt8>) -> PropertyListValue? {
        if let parsed = bytes.withContiguousStorageIfAvailable({ parse($0) }) { return parsed }
        return Array(bytes).withUnsafeBufferPointer { parse($0) }
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> PropertyListValue? {
        var at = 0
        func skip(_ literal: [UInt8]) -> Bool {
            guard bytes.count - at >= literal.count, literal.indices.allSatisfy({ bytes[at + $0] == literal[$0] }) else { return false }
            at += literal.count
            return true
        }
        func skipWhitespace() {
            while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0A { at += 1 }
        }
        guard skip(declaration) else { return nil }
        skipWhitespace()
        if skip(doctype) { skipWhitespace() }
        guard skip(plistOpen) else { return nil }
        skipWhitespace()
        guard skip(stringOpen) else { return nil }
        let start = at
        while at < bytes.count, bytes[at] != UInt8(ascii: "<") {
            guard isPlain(bytes[at]) else { return nil }
            at += 1
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
        guard skip(stringClose) else { return nil }
        skipWhitespace()
        guard skip(plistClose) else { return nil }
        skipWhitespace()
        return at == bytes.count ? .string(text) : nil
    }

    private static let declaration = Array(#"<?xml version="1.0" encoding="UTF-8"?>"#.utf8)
    private static let doctype = Array(#"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#.utf8)
    private static let plistOpen = Array(#"<plist version="1.0">"#.utf8)
    private static let stringOpen = Array("<string>".utf8)
    private static let stringClose = Array("</string>".utf8)
    private static let plistClose = Array("</plist>".utf8)

    /// Printable ASCII but markup and entities, a tab or a newline (no carriage return, which
    /// XML would rewrite).
    private static func isPlain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "\t"), UInt8(ascii: "\n"): true
        case UInt8(ascii: "&"), UInt8(ascii: "<"), UInt8(ascii: ">"): false
        case 0x20...0x7E: true
        default: false
        }
    }
}
