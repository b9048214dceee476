import Foundation
import KVStore
import Testing

/// The journal fuzz target's seeds (`Tests/Corpus/journal`) are journals as the store writes
/// them: if the record format changes, they must be written again, or the fuzzer starts from
/// inputs that stop at the first record.
@Suite("The journal seed corpus")
struct JournalCorpusTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Corpus/journal")

    @Test("every seed reads to its end, except that a torn tail is dropped and what comes before it is kept")
    func seedsRead() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).filter { $0 != "regressions" }
        #expect(names.count >= 4)
        for name in names {
            let bytes = [UInt8](try Data(contentsOf: Self.directory.appendingPathComponent(name)))
            let (rows, end) = ChangeJournal.decodeRecords(bytes)
            if name.hasPrefix("torn-") {
                #expect(end > 0 && end < bytes.count && !rows.isEmpty, "\(name)")
            } else {
                #expect(end == bytes.count, "\(name)")
                #expect(ChangeJournal.decodeRecords(ChangeJournal.encodeRecord(rows)).rows == rows, "\(name)")
            }
        }
    }
}
