import Foundation
import KVSync
import KVTestSupport
import Testing

/// The mount's event log as `kvsfs events --since` reads it: numbered lines, numbering that
/// goes on across restarts and rotations, and a `resync` when a reader's point is gone.
@Suite("The event log and resuming readers")
struct EventLogTests {
    private func event(_ key: String) -> SyncEvent {
        SyncEvent(reason: .serverChange, keys: [key])
    }

    private func cursors(_ lines: [String]) -> [Int64] {
        lines.compactMap { SyncEvent(line: $0)?.cursor }
    }

    @Test("events are numbered one after another, across a restart of the log")
    func numbering() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            let log = try EventLog(path: path)
            for key in ["a", "b", "c"] { try log.append(event(key)) }
            try EventLog(path: path).append(event("d"))
            let resumed = EventHistory.resume(after: 0, at: path)
            #expect(resumed.resync == nil)
            #expect(cursors(resumed.lines) == [1, 2, 3, 4])
            #expect(resumed.lines.compactMap { SyncEvent(line: $0)?.keys.first } == ["a", "b", "c", "d"])
            #expect(cursors(EventHistory.resume(after: 2, at: path).lines) == [3, 4])
            #expect(EventHistory.resume(after: 4, at: path).lines.isEmpty)
            #expect(EventHistory.resume(after: 4, at: path).resync == nil, "a reader that has every event is told nothing")
        }
    }

    @Test("a log over its size moves to PATH.1 and numbering goes on; a reader resumes across both files")
    func rotation() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            let first = try EventLog(path: path, maximumBytes: 300)
            for index in 0..<5 { try first.append(event("k\(index)")) }
            let second = try EventLog(path: path, maximumBytes: 300)  // over 300 bytes: moved aside
            try second.append(event("after"))
            #expect(FileManager.default.fileExists(atPath: path + ".1"))
            let resumed = EventHistory.resume(after: 3, at: path)
            #expect(resumed.resync == nil)
            #expect(cursors(resumed.lines) == [4, 5, 6])
        }
    }

    @Test("a reader whose next events are gone, or who is past the log's end, is told to resync first")
    func resync() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            for round in 0..<3 {  // three logs: the first is dropped by the second rotation
                let log = try EventLog(path: path, maximumBytes: 300)
                for index in 0..<5 { try log.append(event("r\(round)-\(index)")) }
            }
            let gone = EventHistory.resume(after: 2, at: path)
            let oldest = try #require(cursors(gone.lines).first)
            #expect(oldest > 3)
            #expect(gone.resync?.reason == .resync)
            #expect(gone.resync?.message?.contains("oldest held after it is \(oldest)") == true, "\(String(describing: gone.resync))")
            #expect(cursors(gone.lines) == Array(oldest...15))

            let ahead = EventHistory.resume(after: 99, at: path)
            #expect(ahead.resync?.message?.contains("end at 15") == true)
            #expect(ahead.lines.isEmpty)

            let empty = dir.path + "/empty.events.jsonl"
            _ = try EventLog(path: empty)
            #expect(EventHistory.resume(after: 0, at: empty).resync == nil, "a new reader of a new log")
            #expect(EventHistory.resume(after: 5, at: empty).resync?.reason == .resync)
        }
    }

    @Test("a line cut short, or that is not an event, is passed over; unnumbered lines of an older log are not resumed")
    func foreignLines() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            try """
                {"keys":["old"],"reason":"server-change","time":"2026-01-01T00:00:00.000Z"}
                not json
                {"cursor":7,"keys":["k"],"reason":"server-change","time":"2026-01-01T00:00:01.000Z"}
                {"cursor":8,"keys":["cut
                """.write(toFile: path, atomically: true, encoding: .utf8)
            let resumed = EventHistory.resume(after: 6, at: path)
            #expect(resumed.resync == nil)
            #expect(cursors(resumed.lines) == [7])
            try EventLog(path: path).append(event("next"))
            #expect(cursors(EventHistory.resume(after: 7, at: path).lines) == [8], "numbering goes on from the last whole line")
        }
    }

    @Test("numbering never goes back: not below the cursor kept beside the store, nor past a line over 64 KiB")
    func numberingGoesOn() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            let store = try makeStore(in: dir)
            try store.setSetting(.eventLogCursor, to: 10)
            #expect(try EventLog(path: path, keptBeside: store).append(event("a")) == 11, "a log deleted: the kept cursor rules")
            #expect(try store.setting(.eventLogCursor) == 11, "the log keeps its cursor beside the store")
            let many = SyncEvent(reason: .initialSync, keys: (0..<2000).map { "a-rather-long-key-name-\($0)" })
            #expect(try EventLog(path: path).append(many) == 12)
            #expect(try EventLog(path: path).append(event("b")) == 13, "the last line is over 64 KiB")
        }
    }

    @Test("a log that grows over its size while written moves aside, and numbering goes on in the new one")
    func rotationWhileWritten() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            let log = try EventLog(path: path, maximumBytes: 300)
            for index in 0..<12 { try log.append(event("k\(index)")) }
            #expect(FileManager.default.fileExists(atPath: path + ".1"))
            let held = cursors(EventHistory.resume(after: 0, at: path).lines)
            #expect(held.last == 12 && held == Array(held.first!...12), "\(held)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)).count < 600)
        }
    }

    @Test("a gap in the held cursors (lines lost in a crash) is a resync, though the first one follows on")
    func gap() throws {
        try withTemporaryDirectory { (dir) throws in
            let path = dir.path + "/store.events.jsonl"
            try """
                {"cursor":1,"keys":["a"],"reason":"server-change","time":"2026-01-01T00:00:01.000Z"}
                {"cursor":2,"keys":["b"],"reason":"server-change","time":"2026-01-01T00:00:02.000Z"}
                {"cursor":4,"keys":["d"],"reason":"server-change","time":"2026-01-01T00:00:04.000Z"}

                """.write(toFile: path, atomically: true, encoding: .utf8)
            let resumed = EventHistory.resume(after: 0, at: path)
            #expect(resumed.resync?.message?.contains("between 2 and 4") == true, "\(String(describing: resumed.resync))")
            #expect(cursors(resumed.lines) == [1, 2, 4])
            #expect(EventHistory.resume(after: 4, at: path).resync == nil, "a reader past the gap has all there is")
        }
    }

    @Test("a line that cannot be written whole is an error, and uses up no cursor")
    func writeFailure() throws {
        let log = try EventLog(path: "/dev/full")
        #expect(throws: (any Error).self) { try log.append(event("k")) }
    }
}
