/// The values the workload writes: property-list strings in the mount's canonical XML, so that
/// the bytes written are the bytes a read gives back.
///
/// Each value starts with a tag naming the write that made it (`c3.t1.42`: cycle 3, thread 1,
/// operation 42), which is what a mismatch report shows of it.
enum Value {
    private static let head = Array("""
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        <string>
        """.utf8)
    private static let tail = Array("</string>\n</plist>\n".utf8)
    private static let filler = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)

    /// A value tagged `tag`, of about `size` bytes in all (never less than the tag needs).
    static func make(tag: String, size: Int) -> [UInt8] {
        var text = Array(tag.utf8) + [UInt8(ascii: " ")]
        let wanted = max(0, size - head.count - tail.count - text.count)
        let offset = text.count
        text += (0..<wanted).map { filler[($0 &* 7 &+ offset) % filler.count] }
        return head + text + tail
    }

    /// `bytes` in a report: "absent", the tag and size of a value this harness wrote, or the
    /// start of anything else.
    static func describe(_ bytes: [UInt8]?) -> String {
        guard let bytes else { return "absent" }
        if bytes.starts(with: head), bytes.count >= head.count + tail.count, Array(bytes.suffix(tail.count)) == tail,
           let space = bytes[head.count...].firstIndex(of: UInt8(ascii: " ")) {
            return "\(String(decoding: bytes[head.count..<space], as: UTF8.self)) (\(bytes.count) bytes)"
        }
        let start = bytes.prefix(80).map { $0 >= 0x20 && $0 < 0x7F ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16) }
        return "\(bytes.count) bytes not written by this harness: \"\(start.joined())\(bytes.count > 80 ? "..." : "")\""
    }
}
