import Foundation
import KVStore
import Testing

/// A stamp's time reads the same in every view: from its integer milliseconds, never through a
/// floating-point date that one formatter rounds and another cuts.
@Suite("A stamp's time in words")
struct StampTimeTextTests {
    @Test("ISO 8601 in UTC with the stamp's own millisecond, for every millisecond of a second")
    func everyMillisecond() {
        let base: Int64 = 1_732_269_600_000  // 2024-11-22T10:00:00Z
        for offset in Int64(0)..<1000 {
            let text = ChangeStamp.timeText(milliseconds: base + offset)
            #expect(text == "2024-11-22T10:00:00." + String(format: "%03d", Int(offset)) + "Z", "\(offset)")
        }
    }

    @Test("a stamp's text is its time's")
    func ofStamp() {
        #expect(ChangeStamp.timeText(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(ChangeStamp.timeText(milliseconds: 1_732_269_600_883) == "2024-11-22T10:00:00.883Z")
    }
}
