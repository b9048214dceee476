import Foundation

/// A key's latest change as `kvsfs watch` shows it: where it stands in the order this store
/// took changes in, who made it, and what the key holds after it.
public struct FedChange: Sendable, Equatable, Codable {
    public let key: String
    /// Its place in the store's order of changes (local or fetched): a watch resumes after it.
    public let cursor: Int64
    /// The device that made the change (its id, as stamps carry it).
    public let device: String
    /// Whether this device made it.
    public let local: Bool
    /// The value after the change, as the store keeps it (canonical XML); nil for a removal.
    public let xml: [UInt8]?
}

/// One page of the feed: the changes after a cursor, oldest first, and where the next page
/// begins.
public struct ChangeFeedPage: Sendable, Equatable, Codable {
    public let changes: [FedChange]
    /// The cursor to ask after next: the last change given, or the store's newest when none
    /// was (so that a watch started now begins at the present).
    public let cursor: Int64
    /// Whether changes after `cursor` were left for the next page.
    public let more: Bool
}

extension KeyValueStore {
    /// The cursor of the newest change the store took.
    public var newestCursor: Int64 { state.withLock { $0.lastSequence } }

    /// The most changes one page gives.
    public static let feedPageLimit = 1000

    /// Each key's latest change made after `cursor` (of all keys, or of `keys`), oldest first,
    /// at most `limit`. A key changed several times since `cursor` shows once, with its
    /// latest change: the store keeps no other.
    public func changes(after cursor: Int64, keys: Set<String>? = nil, limit: Int = feedPageLimit) -> ChangeFeedPage {
        state.withLock { state in
            let newest = state.lastSequence
            var found = state.sync.changes.filter { key, change in
                change.sequence > cursor && (keys?.contains(key) ?? true)
            }.map { (key: $0.key, sequence: $0.value.sequence, device: $0.value.stamp.device) }
            found.sort { $0.sequence < $1.sequence }
            let more = found.count > limit
            let page = found.prefix(limit).map { change in
                FedChange(key: change.key, cursor: change.sequence, device: change.device, local: change.device == deviceID,
                          xml: state.values[change.key]?.xml)
            }
            return ChangeFeedPage(changes: page, cursor: more ? page.last!.cursor : max(cursor, newest), more: more)
        }
    }
}
