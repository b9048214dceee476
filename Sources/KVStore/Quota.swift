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
}

/// Decides whether a change fits the limits, given what the store already uses.
public struct QuotaLedger: Sendable {
    public let limits: QuotaLimits

    public init(limits: QuotaLimits) {
        self.limits = limits
    }

    public func checkKeyName(_ key: String) throws(StoreError) {
        if key.isEmpty { throw .emptyKey }
        let bytes = key.utf8.count
        if bytes > limits.keyNameBytes { throw .keyTooLong(bytes: bytes, limit: limits.keyNameBytes) }
    }

    /// Checks that `key` may hold a value of `size` bytes, replacing its current value
    /// (`currentSize`, nil for a new key).
    public func checkPut(size: Int, currentSize: Int?, usage: QuotaUsage) throws(StoreError) {
        if size > limits.valueBytes { throw .valueTooLarge(size: size, limit: limits.valueBytes) }
        if currentSize == nil, usage.keys >= limits.keys { throw .tooManyKeys(limit: limits.keys) }
        let available = limits.totalBytes - (usage.bytes - (currentSize ?? 0))
        if size > available { throw .storeFull(needed: size, available: max(available, 0), limit: limits.totalBytes) }
    }

    /// Checks that a new key can be added at all.
    public func checkNewKey(usage: QuotaUsage) throws(StoreError) {
        if usage.keys >= limits.keys { throw .tooManyKeys(limit: limits.keys) }
    }
}
