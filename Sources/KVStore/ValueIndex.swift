/// The store's values in memory, and what they use of the quotas.
///
/// Invariant: `usage` is what `entries` count by `QuotaLedger`'s rule (their sizes' sum, and
/// their number). Only `set` changes either, and it moves the usage by `QuotaUsage.replacing`,
/// so no caller adds bytes up on its own.
struct ValueIndex {
    private(set) var entries: [String: KeyValueStore.Entry]
    private(set) var usage: QuotaUsage

    init(_ entries: [String: KeyValueStore.Entry]) {
        self.entries = entries
        usage = entries.values.reduce(QuotaUsage(bytes: 0, keys: 0)) { $0.replacing(nil, with: $1) }
    }

    subscript(key: String) -> KeyValueStore.Entry? { entries[key] }

    /// Sets `key`'s value (nil: the key is removed), and the usage with it.
    mutating func set(_ entry: KeyValueStore.Entry?, forKey key: String) {
        usage = usage.replacing(entries[key], with: entry)
        entries[key] = entry
    }
}
