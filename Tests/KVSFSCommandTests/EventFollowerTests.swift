import Foundation
import KVSync
import KVTestSupport
import Testing
@testable import kvsfs

/// `kvsfs events --since`: what a reader is handed first, when a mount moves the log aside
/// while the reader starts.
@Suite("Following the event log")
struct EventFollowerTests {
    private func lines(_ cursors: ClosedRange<Int>) -> String {
        cursors.map { #"{"cursor":\#($0),"keys":["k"],"reason":"server-change","time":"2026-01-01T00:00:00.000Z"}"# + "\n" }.joined()
    }

    @Test("a log moved to PATH.1 after the reader opened it is read once: the reader gets the old file's events, then follows the new file")
    func rotationAtStart() throws {
        try withTemporaryDirectory { dir in
            let path = dir.path + "/store.events.jsonl"
            try lines(1...3).write(toFile: path, atomically: true, encoding: .utf8)
            var follower = try EventFollower(path: path)
            // A mount starts between the reader's open and its read: the log moves aside.
            try FileManager.default.moveItem(atPath: path, toPath: path + ".1")
            try lines(4...5).write(toFile: path, atomically: true, encoding: .utf8)
            let first = try follower.resume(after: 1)
            #expect(first.compactMap { EventHistory.cursor(of: $0) } == [2, 3], "\(first)")
        }
    }

    @Test("without a rotation, both files are read and the reader is left at the end of what it was given")
    func plainResume() throws {
        try withTemporaryDirectory { dir in
            let path = dir.path + "/store.events.jsonl"
            try lines(1...3).write(toFile: path + ".1", atomically: true, encoding: .utf8)
            try lines(4...6).write(toFile: path, atomically: true, encoding: .utf8)
            var follower = try EventFollower(path: path)
            let first = try follower.resume(after: 2)
            #expect(first.compactMap { EventHistory.cursor(of: $0) } == [3, 4, 5, 6])
        }
    }
}
