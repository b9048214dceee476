import Foundation
import KVStore

/// One version of a key that a remote keeps: a change it accepted, named by the cursor it was
/// accepted at (unique in the store, and growing with each change).
public struct KeyVersion: Sendable, Equatable, Codable {
    /// The cursor the change was accepted at.
    public var version: Int64
    public var stamp: ChangeStamp
    /// When the remote accepted it, by the remote's clock (milliseconds since 1970): what a
    /// removal's retention counts from, whatever the time of the device that made it.
    public var acceptedAt: Int64
    /// The value's type; nil when the change removed the key.
    public var type: ValueType?
    /// The bytes the value counts against a quota (its canonical XML); 0 for a removal.
    public var size: Int
    /// The canonical XML property list, when asked for (`ChangeLog.version(_:of:in:)`); nil in
    /// a listing and for a removal.
    public var value: Data?
    /// The name the remote keeps of the device that made the change (`DeviceName`); nil when
    /// it keeps none.
    public var deviceName: String?

    public init(version: Int64, stamp: ChangeStamp, acceptedAt: Int64, type: ValueType?, size: Int, value: Data? = nil) {
        self.version = version
        self.stamp = stamp
        self.acceptedAt = acceptedAt
        self.type = type
        self.size = size
        self.value = value
    }

    /// The version of `change`, accepted at `cursor` at `acceptedAt`, with its value or without.
    public init(_ change: StampedChange, at cursor: Int64, acceptedAt: Int64, withValue: Bool) {
        self.init(version: cursor, stamp: change.stamp, acceptedAt: acceptedAt, type: change.type, size: change.size,
                  value: withValue ? change.value : nil)
    }

    public var isRemoval: Bool { type == nil }
}

extension [KeyVersion] {
    /// The versions, each with the name `names` gives its device (by id), if it has none yet.
    public func named(by names: [String: String]) -> [KeyVersion] {
        map { version in
            var named = version
            named.deviceName = version.deviceName ?? names[version.stamp.device]
            return named
        }
    }
}

/// What a remote keeps of each key's past, per store, outside the quotas:
///
/// - the last `versions` changes of each key (the latest included), older ones dropped as new
///   ones are accepted;
/// - once a key is removed, its history (the removal and the versions before it) for
///   `retentionDays` after the remote accepted the removal; then none is shown, and the rows
///   go at the store's next push (`sweepDue`) or the key's next change. A key written again
///   within that time keeps its history as any key does; written later, its history starts
///   with that write.
public struct HistoryPolicy: Sendable, Equatable, Codable, CustomStringConvertible {
    public var versions: Int
    public var retentionDays: Int

    public init(versions: Int = 16, retentionDays: Int = 30) {
        self.versions = versions
        self.retentionDays = retentionDays
    }

    public static let standard = HistoryPolicy()
    public static let versionRange = 1...1000
    public static let retentionDayRange = 0...3650

    /// Refuses a policy outside the ranges above, naming the setting.
    public func check() throws(CloudError) {
        try HistoryPolicyChange(versions: versions, retentionDays: retentionDays).check()
    }

    /// The most bytes of values a store's versions may hold: as many times its total quota as
    /// the policy keeps versions (16 MiB for the modelled store), whatever keys they belong to.
    public func byteBound(_ limits: QuotaLimits) -> Int {
        let (bound, overflow) = limits.totalBytes.multipliedReportingOverflow(by: versions)
        return overflow ? Int.max : bound
    }

    /// How many bytes of the oldest versions go when a store's versions hold `held` bytes:
    /// none within the bound; past it, enough to bring them to 15/16 of it, so that a store at
    /// its bound does not evict at every push. A key's newest version never goes.
    public func bytesToEvict(held: Int, limits: QuotaLimits) -> Int {
        let bound = byteBound(limits)
        guard held > bound else { return 0 }
        return held - (bound / 16) * 15
    }

    /// The oldest acceptance time, in milliseconds since 1970, of a removal whose history is
    /// still kept when the clock reads `now`. Never overflows.
    public func oldestKeptRemoval(now: Int64) -> Int64 {
        let (kept, overflow) = Int64(retentionDays).multipliedReportingOverflow(by: 86_400_000)
        let (oldest, under) = now.subtractingReportingOverflow(overflow ? Int64.max : kept)
        return under ? Int64.min : oldest
    }

    /// Whether a key whose latest version is `latest` still has a history to show at `now`.
    public func keeps(latest: KeyVersion, now: Int64) -> Bool {
        !latest.isRemoval || latest.acceptedAt >= oldestKeptRemoval(now: now)
    }

    /// How often a store's push drops the histories of keys removed past the retention time.
    public static let sweepInterval: Int64 = 3_600_000

    /// Whether a push at `now` drops them, the last time having been `lastSweep`: an hour on,
    /// or a clock that went back (or a stored time no clock gives).
    public static func sweepDue(lastSweep: Int64, now: Int64) -> Bool {
        let (since, overflow) = now.subtractingReportingOverflow(lastSweep)
        return overflow || since < 0 || since >= sweepInterval
    }

    public var description: String { "\(versions) versions per key, removed keys for \(retentionDays) days" }

    /// A key as a history request names it, in the form stores keep keys (NFC); refused when
    /// empty or longer than any store's key-length quota allows.
    public static func requestedKey(_ key: String) throws(CloudError) -> String {
        guard !key.isEmpty, key.utf8.count <= HistoryMark.maximumKeyBytes else {
            throw .refused("a key of \(key.utf8.count) bytes (1 to \(HistoryMark.maximumKeyBytes) allowed)")
        }
        return KeyName.canonical(key)
    }
}

/// Part of a store's history policy to set, the rest left as it is: what `--history-versions`,
/// `--history-days` and `kvsfs account history` ask for. Applied inside the storage's own
/// transaction, so that two changes of different parts never undo each other.
public struct HistoryPolicyChange: Sendable, Equatable {
    public var versions: Int?
    public var retentionDays: Int?

    public init(versions: Int? = nil, retentionDays: Int? = nil) {
        self.versions = versions
        self.retentionDays = retentionDays
    }

    public var isEmpty: Bool { versions == nil && retentionDays == nil }

    /// Refuses a part outside `HistoryPolicy`'s ranges, naming the setting.
    public func check() throws(CloudError) {
        if let violation { throw .refused(violation) }
    }

    /// Why a part is outside `HistoryPolicy`'s ranges, naming the setting; nil when none is.
    public var violation: String? {
        if let versions, !HistoryPolicy.versionRange.contains(versions) {
            return "a history of \(versions) versions per key (\(HistoryPolicy.versionRange.lowerBound) to \(HistoryPolicy.versionRange.upperBound) allowed)"
        }
        if let retentionDays, !HistoryPolicy.retentionDayRange.contains(retentionDays) {
            return "a retention of \(retentionDays) days (\(HistoryPolicy.retentionDayRange.lowerBound) to \(HistoryPolicy.retentionDayRange.upperBound) allowed)"
        }
        return nil
    }

    public func applied(to policy: HistoryPolicy) -> HistoryPolicy {
        HistoryPolicy(versions: versions ?? policy.versions, retentionDays: retentionDays ?? policy.retentionDays)
    }
}
