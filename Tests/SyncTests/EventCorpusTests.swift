import Foundation
import KVSync
import Testing

/// The event-log fuzz target's seeds (`Tests/Corpus/events`) are logs as `EventLog` writes them,
/// behind the target's header (a byte that splits `PATH.1` from `PATH`, and the reader's cursor):
/// if the line format changes they must be written again, or the fuzzer starts from lines no
/// reader takes for events.
@Suite("The event log seed corpus")
struct EventCorpusTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Corpus/events")

    @Test("every seed holds lines that read as events and write back as themselves")
    func seedsRead() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).filter { $0 != "regressions" }
        #expect(names.count >= 4)
        for name in names {
            let bytes = [UInt8](try Data(contentsOf: Self.directory.appendingPathComponent(name)))
            try #require(bytes.count > 9, "\(name)")
            let events = bytes[9...].split(separator: UInt8(ascii: "\n")).compactMap { SyncEvent(line: String(decoding: $0, as: UTF8.self)) }
            #expect(!events.isEmpty, "\(name)")
            for event in events { #expect(SyncEvent(line: try event.jsonLine()) == event, "\(name)") }
        }
    }

    @Test("every input that once crashed the target reads without a crash, its malformed times refused")
    func regressionsRead() throws {
        let directory = Self.directory.appendingPathComponent("regressions")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(!names.isEmpty)
        for name in names {
            let bytes = [UInt8](try Data(contentsOf: directory.appendingPathComponent(name)))
            for line in bytes.split(separator: UInt8(ascii: "\n")) {
                let text = String(decoding: line, as: UTF8.self)
                if let event = SyncEvent(line: text) { #expect(SyncEvent(line: try event.jsonLine()) == event, "\(name)") }
            }
        }
        // A fraction of 50 digits (ICU traps on it) and other shapes the log never writes.
        for time in ["2026-11-23T09:00:00." + String(repeating: "8", count: 50) + "Z", "2026-11-CST09:00:00.001Z",
                     "2026-11-23T09:00:00.Z", "2026-11-23 09:00:00Z"] {
            #expect(SyncEvent(line: #"{"cursor":1,"keys":[],"reason":"server-change","time":"\#(time)"}"#) == nil, "\(time)")
        }
        #expect(SyncEvent(line: #"{"cursor":1,"keys":[],"reason":"server-change","time":"2026-11-23T09:00:00.123456789Z"}"#) != nil)
    }
}
