import Foundation
import Synchronization

/// The mount's event stream: one JSON line per event appended to a file, which
/// `kvsfs events` follows. Each line is one `write` to a file opened with O_APPEND, so readers
/// never see half a line from a writer.
///
/// Every event carries a cursor, one more than the event before it: the log's last event's,
/// read back when a mount starts, so that numbering goes on across restarts. A log over its
/// size is moved to `PATH.1` (the one before is dropped) when a mount starts, and numbering
/// goes on in the new file. A reader resumes after its cursor with `EventHistory`.
public final class EventLog: Sendable {
    public let path: String
    private let descriptor: Int32
    /// The cursor of the next event, under which it is written: lines land in cursor order.
    private let next: Mutex<Int64>

    /// Opens the log at `path`; a log over `maximumBytes` is moved to `path.1` first.
    public init(path: String, maximumBytes: Int = 4 << 20) throws {
        let last = EventHistory.lastCursor(in: path) ?? EventHistory.lastCursor(in: path + ".1") ?? 0
        var info = stat()
        if stat(path, &info) == 0, Int(info.st_size) > maximumBytes, rename(path, path + ".1") != 0 {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path + ".1"])
        }
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
        self.path = path
        next = Mutex(last + 1)
        // A line cut short (a disk that filled) is ended, so that the next event is a line of its own.
        if let lastByte = Self.lastByte(of: path), lastByte != UInt8(ascii: "\n") {
            var newline = UInt8(ascii: "\n")
            guard write(descriptor, &newline, 1) == 1 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
        }
    }

    deinit { close(descriptor) }

    /// The file's last byte; nil when it is empty or cannot be read.
    private static func lastByte(of path: String) -> UInt8? {
        let reader = open(path, O_RDONLY | O_CLOEXEC)
        guard reader >= 0 else { return nil }
        defer { close(reader) }
        var info = stat()
        var byte: UInt8 = 0
        guard fstat(reader, &info) == 0, info.st_size > 0, pread(reader, &byte, 1, off_t(info.st_size - 1)) == 1 else { return nil }
        return byte
    }

    /// Writes `event` with the next cursor; throws when the line could not be written whole
    /// (the cursor is then not used up).
    public func append(_ event: SyncEvent) throws {
        try next.withLock { next in
            var numbered = event
            numbered.cursor = next
            let line = Array((try numbered.jsonLine() + "\n").utf8)
            let written = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            guard written == line.count else {
                throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path,
                                                               NSLocalizedDescriptionKey: String(cString: strerror(errno))])
            }
            next += 1
        }
    }
}

/// What a log holds for a reader that stopped at a cursor: the events after it, and whether
/// the log still holds the point right after it.
public enum EventHistory {
    /// What `kvsfs events --since CURSOR` prints before it follows the log.
    public struct Resumption: Sendable {
        /// A `resync` event when the events right after the cursor are no longer held (the
        /// log moved on past `PATH.1`, or was started afresh); nil when every one is.
        public var resync: SyncEvent?
        /// The held lines after the cursor, oldest first, as written.
        public var lines: [String]
        /// How many bytes of the current log these cover: the reader follows from there.
        public var offset: Int
    }

    /// The events held in `path.1` and `path` after `cursor`.
    public static func resume(after cursor: Int64, at path: String) -> Resumption {
        let older = completeLines(of: readFile(path + ".1"))
        let currentBytes = readFile(path)
        let current = completeLines(of: currentBytes)
        var held: [(cursor: Int64, line: String)] = []
        for line in older.lines + current.lines {
            if let numbered = SyncEvent(line: line)?.cursor { held.append((numbered, line)) }
        }
        let after = held.filter { $0.cursor > cursor }
        var resync: SyncEvent?
        if let first = held.first?.cursor, let last = held.last?.cursor {
            if cursor > last {
                resync = SyncEvent(reason: .resync, keys: [],
                                   message: "the log's events end at \(last), before \(cursor): it was started afresh")
            } else if first > cursor + 1 {
                resync = SyncEvent(reason: .resync, keys: [],
                                   message: "the events after \(cursor) are no longer in the log; the oldest held is \(first)")
            }
        } else if cursor > 0 {
            resync = SyncEvent(reason: .resync, keys: [], message: "the log holds no events: it was started afresh")
        }
        return Resumption(resync: resync, lines: after.map(\.line), offset: current.length)
    }

    /// The cursor of the log's last numbered event; nil when it has none (or no file).
    static func lastCursor(in path: String) -> Int64? {
        for line in completeLines(of: readTail(path)).lines.reversed() {
            if let cursor = SyncEvent(line: line)?.cursor { return cursor }
        }
        return nil
    }

    /// The lines that end in a newline, and how many bytes they take: a line still being
    /// written is left for later.
    private static func completeLines(of bytes: [UInt8]) -> (lines: [String], length: Int) {
        guard let end = bytes.lastIndex(of: UInt8(ascii: "\n")) else { return ([], 0) }
        let lines = bytes[...end].split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }
        return (lines, end + 1)
    }

    /// The whole file, or nothing when it cannot be read (a reader of a log that is not there
    /// has nothing to resume from) or is not a regular file.
    private static func readFile(_ path: String) -> [UInt8] {
        guard isRegularFile(path) else { return [] }
        return FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? []
    }

    /// The last 64 KiB of the file, from the first whole line in it.
    private static func readTail(_ path: String) -> [UInt8] {
        guard isRegularFile(path), let handle = FileHandle(forReadingAtPath: path) else { return [] }
        defer { try? handle.close() }
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
