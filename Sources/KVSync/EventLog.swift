import Foundation
import KVStore
import Synchronization

/// The mount's event stream: one JSON line per event appended to a file, which
/// `kvsfs events` follows. Each line is one `write` to a file opened with O_APPEND, so lines
/// from the writer never interleave; a reader may catch one half written, and leaves it for
/// later.
///
/// Every event carries a cursor, one more than the event before it, across restarts: the
/// greater of the log's last cursor and the one the log keeps beside its store
/// (`StoreSetting.eventLogCursor`, written after each line), so that a log deleted or cut
/// short by a crash never numbers again from less. A
/// log over its size moves to `PATH.1` (the one before is dropped) and a new one goes on with
/// the numbering. A reader resumes after its cursor with `EventHistory`.
public final class EventLog: Sendable {
    public let path: String
    private let maximumBytes: Int
    private struct State {
        var descriptor: Int32
        /// The cursor of the next event.
        var next: Int64
        /// The bytes in the current file.
        var size: Int
        /// A write was cut short: the next line starts with a newline, so that it is whole.
        var endsMidLine: Bool
    }
    private let state: Mutex<State>
    /// Where the last cursor is kept besides the log; nil for a log of no store.
    private let store: KeyValueStore?

    /// Opens the log at `path`, numbering on from what it and `store` kept; a log over
    /// `maximumBytes` is moved to `path.1` first.
    public init(path: String, maximumBytes: Int = 4 << 20, keptBeside store: KeyValueStore? = nil) throws(EventLogError) {
        self.path = path
        self.maximumBytes = maximumBytes
        self.store = store
        let kept: Int64?
        do {
            kept = try store?.setting(.eventLogCursor)
        } catch {
            throw .unwritable(path, "its last cursor, kept beside the store, cannot be read: \(error)")
        }
        let last = max(kept ?? 0, EventHistory.lastCursor(in: path) ?? EventHistory.lastCursor(in: path + ".1") ?? 0)
        var info = stat()
        if stat(path, &info) == 0, Int(info.st_size) > maximumBytes { try Self.rotate(path) }
        let (descriptor, size) = try Self.open(path)
        state = Mutex(State(descriptor: descriptor, next: last + 1, size: size,
                            endsMidLine: (Self.lastByte(of: path) ?? UInt8(ascii: "\n")) != UInt8(ascii: "\n")))
    }

    deinit { state.withLock { close($0.descriptor) } }

    /// The cursor of the last event logged, across restarts; 0 before the first.
    public var lastCursor: Int64 { state.withLock { $0.next - 1 } }

    /// Writes `event` with the next cursor, keeps the cursor beside the store, and returns it;
    /// throws when the line could not be written whole (the cursor is then not used up) or its
    /// cursor not kept. A log grown over its size moves to `PATH.1` first.
    @discardableResult
    public func append(_ event: SyncEvent) throws(EventLogError) -> Int64 {
        // Numbered, written and kept under one lock: the cursor kept beside the store never
        // goes back, whichever of two appends gets there first.
        try state.withLock { (state: inout State) throws(EventLogError) -> Int64 in
            let cursor = try write(event, in: &state)
            do {
                try store?.setSetting(.eventLogCursor, to: cursor)
            } catch {
                throw .cursorNotKept(cursor, String(describing: error))
            }
            return cursor
        }
    }

    private func write(_ event: SyncEvent, in state: inout State) throws(EventLogError) -> Int64 {
        do {
            if state.size > maximumBytes {
                try Self.rotate(path)
                close(state.descriptor)
                (state.descriptor, state.size) = try Self.open(path)
                state.endsMidLine = false
            }
            var numbered = event
            numbered.cursor = state.next
            let text: String
            do {
                text = try numbered.jsonLine()
            } catch {
                throw .unwritable(path, String(describing: error))
            }
            let line = Array(((state.endsMidLine ? "\n" : "") + text + "\n").utf8)
            let written = line.withUnsafeBytes { Glibc.write(state.descriptor, $0.baseAddress, $0.count) }
            let failure = errno
            if written > 0 { state.size += written }
            guard written == line.count else {
                state.endsMidLine = state.endsMidLine || written > 0
                throw .unwritable(path, written < 0 ? String(cString: strerror(failure)) : "only \(written) of \(line.count) bytes were written")
            }
            state.endsMidLine = false
            defer { state.next += 1 }
            return state.next
        }
    }

    private static func open(_ path: String) throws(EventLogError) -> (Int32, Int) {
        let descriptor = Glibc.open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .unwritable(path, String(cString: strerror(errno))) }
        var info = stat()
        return (descriptor, fstat(descriptor, &info) == 0 ? Int(info.st_size) : 0)
    }

    private static func rotate(_ path: String) throws(EventLogError) {
        guard rename(path, path + ".1") == 0 else { throw .unwritable(path + ".1", String(cString: strerror(errno))) }
    }

    /// The file's last byte; nil when it is empty or cannot be read.
    private static func lastByte(of path: String) -> UInt8? {
        let reader = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard reader >= 0 else { return nil }
        defer { close(reader) }
        var info = stat()
        var byte: UInt8 = 0
        guard fstat(reader, &info) == 0, info.st_size > 0, pread(reader, &byte, 1, off_t(info.st_size - 1)) == 1 else { return nil }
        return byte
    }
}

/// Why the event log could not be written.
public enum EventLogError: Error, Equatable, CustomStringConvertible {
    case unwritable(String, String)
    /// The line is written, but its cursor could not be kept beside the store.
    case cursorNotKept(Int64, String)

    public var description: String {
        switch self {
        case .unwritable(let path, let reason): "cannot write the event log \(path): \(reason)"
        case .cursorNotKept(let cursor, let reason): "event \(cursor) is logged, but its cursor could not be kept beside the store: \(reason)"
        }
    }
}
