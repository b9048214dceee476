import Foundation
import KVCloud

/// Where a mount stands in its remote's history: the cursor it has taken in every change up
/// to, and the mark of the latest change it knows the remote accepted: the last it fetched,
/// or the last its own push stored, which may lie beyond the cursor when others pushed in
/// between. The mark goes with each fetch, so that a remote whose history is not this one
/// (restored from a backup that lacks the mount's own pushes, say) is found out: see
/// `HistoryMark`.
///
/// Kept in the store's `sync.cursor` setting: the cursor alone while there is no mark (as
/// before marks existed), else the position as JSON.
struct SyncPosition: Sendable, Equatable, Codable {
    var cursor: Int64
    var mark: HistoryMark?

    static let start = SyncPosition(cursor: 0, mark: nil)

    /// After taking in `batch`: its cursor, and the later of its mark and the one before (a
    /// mark outside the rule is not kept).
    func after(_ batch: ChangeBatch) -> SyncPosition {
        SyncPosition(cursor: batch.cursor, mark: HistoryMark.later(mark, batch.mark.flatMap { $0.meetsRule ? $0 : nil }))
    }

    /// After a push that stored changes up to `outcome.mark`; when nobody else pushed since
    /// this position's cursor, the push's changes need no fetch: the cursor moves past them.
    func after(_ outcome: PushOutcome) -> SyncPosition {
        var next = self
        next.mark = HistoryMark.later(mark, outcome.mark.flatMap { $0.meetsRule ? $0 : nil })
        if let before = outcome.cursorBefore, let after = outcome.cursorAfter, after > before, before == cursor {
            next.cursor = after
        }
        return next
    }

    var setting: String {
        get throws {
            guard mark != nil else { return String(cursor) }
            return String(decoding: try JSONEncoder().encode(self), as: UTF8.self)
        }
    }

    /// Nil for a setting that is not a position: the next fetch starts from the beginning
    /// (the merge rule keeps every local value that is newer).
    init?(setting: String) {
        if let cursor = Int64(setting), cursor >= 0 {
            self.init(cursor: cursor, mark: nil)
        } else if let position = try? JSONDecoder().decode(SyncPosition.self, from: Data(setting.utf8)), position.cursor >= 0 {
            self = position
        } else {
            return nil
        }
    }

    init(cursor: Int64, mark: HistoryMark?) {
        self.cursor = cursor
        self.mark = mark
    }
}
