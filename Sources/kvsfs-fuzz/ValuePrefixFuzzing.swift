import KVStore

/// Any bytes, through the check made at each write() and the decoder behind it.
///
/// Invariant: no prefix of bytes the decoder accepts is ever refused by the check, fed whole,
/// byte by byte, or split in two at any of the first 64 offsets and 64 more spread over the
/// rest; and bytes the check refuses are refused by the decoder too.
enum ValuePrefixFuzzing {
    static func run(_ bytes: [UInt8]) {
        let accepted = (try? PropertyListCodec.decode(bytes)) != nil
        var whole = ValuePrefixCheck()
        let verdict = bytes.withUnsafeBytes { whole.feed($0) }
        if case .refused(let reason) = verdict, accepted {
            fatalError("the decoder accepts what the check refuses (\(reason)): \(bytes)")
        }
        guard accepted else { return }
        var byByte = ValuePrefixCheck()
        for (offset, byte) in bytes.enumerated() {
            if case .refused(let reason) = [byte].withUnsafeBytes({ byByte.feed($0) }) {
                fatalError("byte by byte, the prefix ending at \(offset) is refused (\(reason)): \(bytes)")
            }
        }
        let spread = stride(from: 64, to: bytes.count, by: max(1, bytes.count / 64))
        for split in Array(0...min(bytes.count, 64)) + spread {
            var check = ValuePrefixCheck()
            let first = bytes[..<split].withUnsafeBytes { check.feed($0) }
            let rest = bytes[split...].withUnsafeBytes { check.feed($0) }
            for case .refused(let reason) in [first, rest] {
                fatalError("split at \(split), the check refuses (\(reason)): \(bytes)")
            }
        }
    }
}
