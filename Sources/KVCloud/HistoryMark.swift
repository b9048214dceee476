import Foundation
import KVStore

/// A point in a store's history as a reader knows it: a change the store accepted (one the
/// reader fetched, or one it pushed itself), with its key, its stamp and the cursor it was
/// accepted at. A cursor alone cannot tell a store's history from another one that reached
/// the same cursor (restored from a backup, then written to by others): the reader sends its
/// mark with each request, and a store whose row for the mark's key does not fit the mark
/// answers `CloudError.historyDiffers`, so that the reader resynchronises instead of skipping
/// what the other history put before its cursor.
///
/// In one history a key's row only ever moves forward: it holds the marked change at the
/// marked cursor or later (given again with a conflict, `ConflictRule`), or a later change (a
/// greater stamp) at a later cursor. Anything else (no row, an older stamp, the same change at
/// an earlier cursor because it was pushed again) is another history. The histories that pass
/// are a store rewound and since written past the mark's cursor, under that very key, with a
/// greater stamp or the marked change pushed again; the reader's next mark finds them out.
public struct HistoryMark: Sendable, Equatable, Codable, CustomStringConvertible {
    public var key: String
    public var cursor: Int64
    public var stamp: ChangeStamp

    public init(key: String, cursor: Int64, stamp: ChangeStamp) {
        self.key = key
        self.cursor = cursor
        self.stamp = stamp
    }

    /// Checks the mark against a store whose newest change is at `newest` and whose row for
    /// the mark's key is `held` (as a mark: nil when it has none).
    public func check(newest: Int64, held: HistoryMark?) throws(CloudError) {
        if cursor > newest { throw .cursorAhead(asked: cursor, store: newest) }
        let fits = switch held {
        case nil: false
        // The same change further on: given again with a conflict (`ConflictRule`).
        case let held? where held.stamp == stamp: held.cursor >= cursor
        case let held?: held.stamp > stamp && held.cursor > cursor
        }
        if !fits { throw .historyDiffers(seen: description, held: held?.description ?? "no change of \(key.debugDescription)") }
    }

    /// Of two marks, the later one: the more of a reader's history it vouches for.
    public static func later(_ one: HistoryMark?, _ other: HistoryMark?) -> HistoryMark? {
        guard let one, let other else { return one ?? other }
        return other.cursor > one.cursor ? other : one
    }

    public var description: String { "\(key.debugDescription) \(stamp) at cursor \(cursor)" }

    /// The mark's position as text: `CURSOR.TIME.COUNTER.DEVICE` (its key travels apart).
    public var position: String { "\(cursor).\(stamp.time).\(stamp.counter).\(stamp.device)" }

    /// A mark from its key and its `position` text. Nil unless every part meets the rules:
    /// the key is at most `maximumKeyBytes` (it is looked up as sent), the stamp meets the
    /// stamp rule's fields.
    public init?(key: String, position: String) {
        let parts = position.split(separator: ".", maxSplits: 3, omittingEmptySubsequences: false)
        guard key.utf8.count <= Self.maximumKeyBytes, parts.count == 4,
              let cursor = Int64(parts[0]), cursor > 0, let time = Int64(parts[1]),
              let counter = Int32(parts[2]), counter >= 0 else { return nil }
        let stamp = ChangeStamp(time: time, counter: counter, device: String(parts[3]))
        do {
            try StampRule().checkFields(stamp)
        } catch {
            return nil
        }
        self.init(key: key, cursor: cursor, stamp: stamp)
    }

    /// Whether the mark meets the rule its text form is read by (a mark a remote sent is kept
    /// only then: it is sent back to it with every request).
    public var meetsRule: Bool {
        HistoryMark(key: key, position: position) == self
    }

    /// The key rule's bound (`KeyName.maximumBytes`): no remote holds a longer key.
    public static let maximumKeyBytes = KeyName.maximumBytes
}
