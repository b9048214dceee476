import Foundation

/// The limits of one store. Defaults are those of the modelled store.
///
/// A value's size is the length in bytes of its canonical XML property list (what `cat`
/// shows on a mount in the default format). Key names do not count against `totalBytes`.
public struct QuotaLimits: Sendable, Equatable, Codable {
    public var totalBytes: Int
    public var valueBytes: Int
    public var keys: Int
    public var keyNameBytes: Int

    public init(totalBytes: Int = 1_048_576, valueBytes: Int = 1_048_576, keys: Int = 1024, keyNameBytes: Int = 64) {
        self.totalBytes = totalBytes
        self.valueBytes = valueBytes
        self.keys = keys
        self.keyNameBytes = keyNameBytes
    }

    public static let modelled = QuotaLimits()
}

/// What a store uses of its limits.
public struct QuotaUsage: Sendable, Equatable {
    public var bytes: Int
    public var keys: Int
    public init(bytes: Int, keys: Int) {
        self.bytes = bytes
        self.keys = keys
    }

    /// The usage once a key holding a value of `old` bytes (nil: it had none) holds one of `new`
    /// bytes (nil: the key is removed). The one place a change's effect on the usage is
    /// derived. Sizes are at most a value's limit (or a change's decoding bound): no sum here
    /// can overflow.
    public func replacing(bytes old: Int?, with new: Int?) -> QuotaUsage {
        QuotaUsage(bytes: bytes + (new ?? 0) - (old ?? 0), keys: keys + (new == nil ? 0 : 1) - (old == nil ? 0 : 1))
    }

    func replacing(_ old: KeyValueStore.Entry?, with new: KeyValueStore.Entry?) -> QuotaUsage {
        replacing(bytes: old?.size, with: new?.size)
    }
}

/// Decides whether a change fits the limits, given what the store already uses. The one owner
/// of what a value counts (`size(ofXML:)`) and of how a change moves the usage
/// (`QuotaUsage.replacing`): the store, the mount's open files and every remote ask it.
public struct QuotaLedger: Sendable {
    public let limits: QuotaLimits

    public init(limits: QuotaLimits) {
        self.limits = limits
    }

    /// What a value counts against the quotas: the length of its canonical XML property list
    /// (key names do not count). Its twins in SQL count the stored value's bytes the same way,
    /// where the remotes keep their usage: `length(value)` in KVCloud's `SQLiteCloudStorage`
    /// and `SQLiteCloudRows`, `octet_length(value)` in KVPostgres's `PostgresMigrations` and
    /// `PostgresGroupCommit`.
    public static func size(ofXML xml: some Collection<UInt8>) -> Int { xml.count }

    /// Checks a key's change from a value of `old` bytes (nil: none) to one of `new` bytes
    /// (nil: removed) against the per-value limit and what it leaves (`checkResult`), and
    /// returns the usage it leaves.
    @discardableResult
    public func checkReplacing(bytes old: Int?, with new: Int?, usage: QuotaUsage) throws(StoreError) -> QuotaUsage {
        if let new { try checkValueSize(new) }
        let after = usage.replacing(bytes: old, with: new)
        try checkResult(before: usage, after: after, added: new ?? 0)
        return after
    }

    /// Refuses a name outside the key rule (`KeyName`): empty, not in NFC, or too long.
    public func checkKeyName(_ key: String) throws(StoreError) {
        if key.isEmpty { throw .emptyKey }
        if !KeyName.isCanonical(key) { throw .invalidKey("the name \(key.debugDescription) is not in Unicode normalization form C") }
        let bytes = key.utf8.count
        if bytes > limits.keyNameBytes { throw .keyTooLong(bytes: bytes, limit: limits.keyNameBytes) }
    }

    /// `value` as the store keeps it under `key`, checked: the key's name, and the size of the
    /// value's canonical XML against the per-value limit.
    func checkedEntry(_ key: String, _ value: PropertyListValue, modifiedAt: Date) throws(StoreError) -> KeyValueStore.Entry {
        try checkKeyName(key)
        let xml = try PropertyListCodec.encodeXML(value)
        try checkValueSize(xml.count)
        return KeyValueStore.Entry(key: key, xml: xml, type: value.type, modifiedAt: modifiedAt)
    }

    /// Checks one value's size against the per-value limit.
    public func checkValueSize(_ size: Int) throws(StoreError) {
        if size > limits.valueBytes { throw .valueTooLarge(size: size, limit: limits.valueBytes) }
    }

    /// Checks what a change leaves: a key count or byte total that grows past its limit is
    /// refused (one that shrinks is not, even over a lowered limit). `added` is the size of the
    /// values the change writes.
    public func checkResult(before: QuotaUsage, after: QuotaUsage, added: Int) throws(StoreError) {
        if after.keys > before.keys, after.keys > limits.keys { throw .tooManyKeys(limit: limits.keys) }
        if after.bytes > before.bytes, after.bytes > limits.totalBytes {
            // The room there was for the values written, with what they replace taken out.
            let available = room(leftBy: QuotaUsage(bytes: after.bytes - added, keys: after.keys)).bytes
            throw .storeFull(needed: added, available: available, limit: limits.totalBytes)
        }
    }

    /// What `usage` leaves of the limits: the bytes and keys a store may still grow by (none,
    /// not fewer than none, when a lowered limit is passed).
    public func room(leftBy usage: QuotaUsage) -> QuotaUsage {
        QuotaUsage(bytes: max(0, limits.totalBytes - usage.bytes), keys: max(0, limits.keys - usage.keys))
    }

    /// Checks that a new key can be added at all.
    public func checkNewKey(usage: QuotaUsage) throws(StoreError) {
        if usage.keys >= limits.keys { throw .tooManyKeys(limit: limits.keys) }
    }
}
