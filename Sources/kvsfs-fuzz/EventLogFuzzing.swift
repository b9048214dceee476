import KVSync

/// Any bytes, as the event log and the log moved aside (`PATH`, `PATH.1`) that
/// `kvsfs events --since CURSOR` reads, and as single lines of it.
///
/// The first byte says where the bytes split into the older file and the current one, the
/// next eight give the reader's cursor. Invariants: reading never crashes; every line handed
/// back is numbered past the cursor; without a resync they go on from the cursor one by one;
/// the offset is where the current file's last complete line ends; and a line that reads as an
/// event writes out as a line that reads back as the same event.
enum EventLogFuzzing {
    static func run(_ bytes: [UInt8]) {
        guard bytes.count >= 9 else { return }
        let cursor = Int64(bitPattern: (1...8).reduce(UInt64(0)) { $0 << 8 | UInt64(bytes[$1]) })
        let rest = Array(bytes[9...])
        let split = rest.isEmpty ? 0 : Int(bytes[0]) % (rest.count + 1)
        let older = Array(rest[..<split]), current = Array(rest[split...])
        let resumed = EventHistory.resume(after: cursor, older: older, current: current)

        let expectedOffset = current.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
        guard resumed.offset == expectedOffset else { fatalError("offset \(resumed.offset), not \(expectedOffset)") }
        let cursors = resumed.lines.map { EventHistory.cursor(of: $0) }
        guard cursors.allSatisfy({ $0.map { $0 > cursor } ?? false }) else { fatalError("a line at or before \(cursor): \(cursors)") }
        if resumed.resync == nil {
            for (index, held) in cursors.enumerated() where held != cursor &+ 1 &+ Int64(index) {
                fatalError("no resync, yet line \(index) has cursor \(held!) after \(cursor)")
            }
        }
        for line in rest.split(separator: UInt8(ascii: "\n")) {
            roundTrip(String(decoding: line, as: UTF8.self))
        }
    }

    /// An event read from `line` writes as a line that reads back and writes the same again
    /// (the first writing settles the time's precision).
    private static func roundTrip(_ line: String) {
        guard let event = SyncEvent(line: line) else { return }
        do {
            let written = try event.jsonLine()
            guard let again = SyncEvent(line: written) else { fatalError("a written event does not read back: \(written)") }
            guard try again.jsonLine() == written else { fatalError("an event does not write the same twice: \(written)") }
        } catch {
            fatalError("an event read from a line cannot be written: \(error)")
        }
    }
}
