import Foundation

/// The changes that lost to a key's change after the newest of them, as a row keeps them
/// beside the newest's own columns (the remote's `alsoLost`, PostgreSQL's `also_lost`, the
/// local `conflict` table's `alsoLost`): a JSON array of `KeptChange`, newest first; NULL when
/// only one change lost. The newest keeps its columns so that a kvsfs that kept one change per
/// key still reads and writes the row.
public enum KeptChangeList {
    /// The most changes that lost a key keeps at once: one per device (`ConflictRule.losers`).
    public static let maximumCount = 8

    /// The column's bytes for `lost` (newest first): nil when it holds one change or none.
    public static func encode(_ lost: [KeptChange]) throws -> Data? {
        guard lost.count > 1 else { return nil }
        return try JSONEncoder().encode(Array(lost.dropFirst()))
    }

    /// The bytes a row stores for `lost` (newest first): the newest's value in its own column,
    /// and the others' list as `encode` writes it. What a remote counts against a store's
    /// quota for its conflicts, as its triggers count the columns.
    public static func storedBytes(_ lost: [KeptChange]) -> Int {
        let newest = lost.first?.size ?? 0
        do {
            return newest + (try encode(lost)?.count ?? 0)
        } catch {
            // Never thrown for these types; were it, the list counts as its values in base64
            // with room for their stamps, which is more than it would take.
            return newest + lost.dropFirst().reduce(0) { $0 + ($1.size / 3 + 1) * 4 + 256 }
        }
    }

    /// `newest` and the changes the column `earlier` holds, newest first. Read with the stamp
    /// rule and the value rule's pairing of value and type; a column outside them (another
    /// program's) is an error, never a trap.
    public static func decode(newest: KeptChange?, earlier: Data?) throws(UnreadableConflict) -> [KeptChange] {
        guard let newest else {
            guard earlier == nil else { throw UnreadableConflict("it keeps earlier changes that lost without the newest") }
            return []
        }
        guard let earlier else { return [newest] }
        let list: [KeptChange]
        do {
            list = try JSONDecoder().decode([KeptChange].self, from: earlier)
        } catch {
            throw UnreadableConflict("its earlier changes that lost are not a list of changes")
        }
        return try checked([newest] + list)
    }

    /// `lost` (newest first) if it meets the list's rule: at most `maximumCount`, each with a
    /// value and a type or neither, stamps within the stamp rule, newest first. A storage that
    /// keeps each change that lost in a row of its own (PostgreSQL's `kvsfs_lost`) checks what
    /// it read by it too.
    public static func checked(_ lost: [KeptChange]) throws(UnreadableConflict) -> [KeptChange] {
        guard lost.count <= maximumCount else {
            throw UnreadableConflict("it keeps \(lost.count) changes that lost, over the limit of \(maximumCount)")
        }
        for (index, change) in lost.enumerated() {
            guard (change.value == nil) == (change.type == nil) else {
                throw UnreadableConflict("a change that lost has a type without a value, or a value without a type")
            }
            do {
                try StampRule().checkFields(change.stamp)
            } catch {
                throw UnreadableConflict("a change that lost has a stamp outside the rule: \(error)")
            }
            if index > 0, !(change.stamp < lost[index - 1].stamp) {
                throw UnreadableConflict("its changes that lost are not newest first")
            }
        }
        return lost
    }
}

/// A stored conflict that cannot be read: why.
public struct UnreadableConflict: Error, CustomStringConvertible, Equatable, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}
