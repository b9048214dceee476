import Foundation

/// What the event log holds for a reader that stopped at a cursor: the events after it, and
/// whether the log still holds every one of them. Both files together are at most twice the
/// log's size (`EventLog` moves a full log aside), which bounds what a reader reads.
public enum EventHistory {
    /// What `kvsfs events --since CURSOR` prints before it follows the log.
    public struct Resumption: Sendable {
        /// A `resync` event when the events after the cursor are not all held: the log moved
        /// on past `PATH.1`, lost lines in a crash, or was started afresh. Nil when every one is.
        public var resync: SyncEvent?
        /// The held lines after the cursor, oldest first, as written.
        public var lines: [String]
        /// How many bytes of the current log these cover: the reader follows from there.
        public var offset: Int
    }

    /// The events held in `path.1` and `path` after `cursor`.
    public static func resume(after cursor: Int64, at path: String) -> Resumption {
        resume(after: cursor, older: readFile(path + ".1"), current: readFile(path))
    }

    /// The events held in the two files' bytes (`PATH.1`'s and `PATH`'s) after `cursor`. Held
    /// cursors must go on from `cursor` one by one; anything else is a resync.
    public static func resume(after cursor: Int64, older olderBytes: [UInt8], current currentBytes: [UInt8]) -> Resumption {
        let older = completeLines(of: olderBytes)
        let current = completeLines(of: currentBytes)
        var held: [(cursor: Int64, line: String)] = []
        for line in older.lines + current.lines {
            if let numbered = Self.cursor(of: line) { held.append((numbered, line)) }
        }
        let after = held.filter { $0.cursor > cursor }
        var reason: String?
        if let last = held.last?.cursor, cursor > last {
            reason = "the log's events end at \(last), before \(cursor): it was started afresh"
        } else if held.isEmpty, cursor > 0 {
            reason = "the log holds no events: it was started afresh"
        } else if let first = after.first?.cursor, first != cursor + 1 {
            reason = "the events after \(cursor) are no longer in the log; the oldest held after it is \(first)"
        } else if let gap = zip(after, after.dropFirst()).first(where: { $1.cursor != $0.cursor + 1 }) {
            reason = "the log lacks the events between \(gap.0.cursor) and \(gap.1.cursor) (lost in a crash, or out of order)"
        }
        return Resumption(resync: reason.map { SyncEvent(reason: .resync, keys: [], message: $0) },
                          lines: after.map(\.line), offset: current.length)
    }

    /// The cursor of the log's last numbered event; nil when it has none (or no file).
    static func lastCursor(in path: String) -> Int64? {
        // Most lines are short: the tail holds the last one, else the whole file is read.
        for bytes in [readTail(path), readFile(path)] {
            for line in completeLines(of: bytes).lines.reversed() {
                if let cursor = cursor(of: line) { return cursor }
            }
        }
        return nil
    }

    /// A line's cursor, read alone: a line from a newer kvsfs (a reason this one does not
    /// know) still counts.
    public static func cursor(of line: String) -> Int64? {
        do {
            return try JSONDecoder().decode(Numbered.self, from: Data(line.utf8)).cursor
        } catch {
            return nil  // not an event's line (cut short, or written by something else)
        }
    }

    private struct Numbered: Decodable { var cursor: Int64? }

    /// The lines that end in a newline, and how many bytes they take: a line still being
    /// written is left for later.
    private static func completeLines(of bytes: [UInt8]) -> (lines: [String], length: Int) {
        guard let end = bytes.lastIndex(of: UInt8(ascii: "\n")) else { return ([], 0) }
        let lines = bytes[...end].split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        return (lines, end + 1)
    }

    /// The whole file, or nothing when it cannot be read (a reader of a log that is not there
    /// has nothing to resume from) or is not a regular file.
    public static func readFile(_ path: String) -> [UInt8] {
        guard isRegularFile(path) else { return [] }
        return FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? []
    }

    /// The last 64 KiB of the file, from the first whole line in it.
    private static func readTail(_ path: String) -> [UInt8] {
        guard isRegularFile(path), let handle = FileHandle(forReadingAtPath: path) else { return [] }
        defer { handle.closeFile() }
        let size = handle.seekToEndOfFile()
        let start = size > 65_536 ? size - 65_536 : 0
        handle.seek(toFileOffset: start)
        var bytes = [UInt8](handle.readDataToEndOfFile())
        if start > 0, let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) { bytes.removeFirst(newline + 1) }
        return bytes
    }

    /// A device (say /dev/null as a log) never ends: only a regular file is read.
    private static func isRegularFile(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }
}
