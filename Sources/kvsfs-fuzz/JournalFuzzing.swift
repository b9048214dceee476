import KVStore

/// Any bytes, as a change journal found at open.
///
/// The bytes are read twice: as they are (a torn or corrupt journal), and with every record's
/// checksum made right, so that mutations reach the record payloads rather than stopping at
/// the checksum. Invariants: reading never crashes, the good records end within the input,
/// and the rows read re-encode to a record that reads back as the same rows.
enum JournalFuzzing {
    static func run(_ bytes: [UInt8]) {
        check(bytes)
        check(withChecksumsMadeRight(bytes))
    }

    private static func check(_ bytes: [UInt8]) {
        let (rows, end) = ChangeJournal.decodeRecords(bytes)
        guard end >= 0, end <= bytes.count else { fatalError("the good records end at \(end) in \(bytes.count) bytes") }
        let (same, _) = ChangeJournal.decodeRecords(Array(bytes[..<end]))
        guard same == rows else { fatalError("the journal cut at its end (\(end)) reads as other rows") }
        let record = ChangeJournal.encodeRecord(rows)
        let (again, againEnd) = ChangeJournal.decodeRecords(record)
        guard again == rows, againEnd == record.count else { fatalError("\(rows.count) rows read do not read back once written") }
    }

    /// The bytes with each `length, checksum, payload` record's checksum set to the payload's,
    /// as far as the lengths lead.
    private static func withChecksumsMadeRight(_ bytes: [UInt8]) -> [UInt8] {
        var bytes = bytes
        var offset = 0
        while bytes.count - offset >= 12 {
            let length = (0..<4).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
            let payload = offset + 12
            guard bytes.count - payload >= length else { break }
            let sum = ChangeJournal.checksum(bytes[payload..<payload + length])
            for index in 0..<8 { bytes[offset + 4 + index] = UInt8(truncatingIfNeeded: sum >> (8 * index)) }
            offset = payload + length
        }
        return bytes
    }
}
