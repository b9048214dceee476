import Foundation

/// When a change was made, by a hybrid logical clock: physical milliseconds, then a counter
/// for changes within the same millisecond (or behind a faster clock seen elsewhere), then
/// the device that made it. The total order of stamps is the merge rule: per key, the change
/// with the greatest stamp wins, on every replica, whatever order changes arrive in.
public struct ChangeStamp: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970.
    public var time: Int64
    public var counter: Int32
    /// The stable id of the device (local store) that made the change.
    public var device: String

    public init(time: Int64, counter: Int32, device: String) {
        self.time = time
        self.counter = counter
        self.device = device
    }

    public static func < (a: ChangeStamp, b: ChangeStamp) -> Bool {
        (a.time, a.counter, a.device) < (b.time, b.counter, b.device)
    }

    public var description: String { "\(time).\(counter)@\(device)" }
}

/// A hybrid logical clock: stamps that follow physical time, never go backwards, and
/// always exceed every stamp the device has seen within the stamp rule's skew.
///
/// Never traps: at the counter's maximum the time moves on by a millisecond, and a stamp seen
/// from elsewhere further ahead of the physical clock than `StampRule.maximumSkew` is not
/// adopted (a remote that is wrong about the time cannot pin every later local stamp). A write
/// to a key whose latest stamp is ahead still gets a greater stamp: `stamp(after:)`.
public struct HybridLogicalClock: Sendable {
    public let device: String
    public private(set) var last: ChangeStamp

    public init(device: String, last: ChangeStamp? = nil) {
        self.device = device
        self.last = last ?? ChangeStamp(time: 0, counter: 0, device: device)
    }

    /// A stamp for a change made now, greater than every stamp made or adopted before.
    public mutating func stamp(physical: Int64) -> ChangeStamp {
        last = physical > last.time ? ChangeStamp(time: physical, counter: 0, device: device) : Self.successor(of: last, device: device)
        return last
    }

    /// A stamp for a change made now to a key whose latest change is `previous`: greater than
    /// both the clock's next stamp and `previous`, so a local write always replaces what it saw.
    public mutating func stamp(physical: Int64, after previous: ChangeStamp?) -> ChangeStamp {
        let next = stamp(physical: physical)
        guard let previous, previous >= next else { return next }
        return Self.successor(of: previous, device: device)
    }

    /// Takes in a stamp seen from elsewhere, so that later local stamps exceed it, unless it is
    /// further ahead of `physical` than `maximumSkew` milliseconds.
    public mutating func observe(_ stamp: ChangeStamp, physical: Int64, maximumSkew: Int64 = StampRule.maximumSkew) {
        guard stamp.time <= StampRule.latestAcceptable(physical: physical, skew: maximumSkew) else { return }
        if (stamp.time, stamp.counter) > (last.time, last.counter) {
            last = ChangeStamp(time: stamp.time, counter: stamp.counter, device: device)
        }
    }

    /// The least stamp of `device` greater in time and counter than `stamp`.
    private static func successor(of stamp: ChangeStamp, device: String) -> ChangeStamp {
        if stamp.counter < Int32.max { return ChangeStamp(time: stamp.time, counter: stamp.counter + 1, device: device) }
        return ChangeStamp(time: stamp.time < Int64.max ? stamp.time + 1 : stamp.time, counter: 0, device: device)
    }
}

/// One key's latest change as it travels between replicas: its value (canonical XML), or a
/// tombstone when the change deleted the key.
///
/// More fields travel with it. A push says what the change `replaces`: the change of the
/// key its writer held when it wrote, as the remote last gave it. The remote decides by it
/// whether the change is concurrent with what it holds (`ConflictRule`). A push also says which
/// changes that lost to the replaced one its mount showed when it was written (`settles`): the
/// change lets go of those alone. A fetched change says what `lost` to it: the key's open conflict, which the
/// remote keeps until a later write settles it.
///
/// On the wire `lost` is two fields: `lost`, the newest change that lost (one object, as a
/// kvsfs that kept one per key reads it), and `alsoLost`, the others, newest first (left out
/// when there are none).
public struct StampedChange: Hashable, Sendable, Codable {
    public var key: String
    /// The canonical XML property list; nil for a tombstone.
    public var value: Data?
    public var type: ValueType?
    public var stamp: ChangeStamp
    /// Sent with a push: what the writer held of the key when it wrote; nil when it did not say
    /// (a kvsfs before kept conflicts). Neither nil nor `.unknown` is ever taken for a conflict.
    public var replaces: Replaced?
    /// Sent with a push: the stamps of the changes that lost to the one this change replaces,
    /// as its mount showed that conflict when the change was written; empty when it showed none.
    public var settles: [ChangeStamp]
    /// Given with a fetched change: the changes that lost to this one concurrently, while no
    /// later write has settled them, newest first (`ConflictRule.losers`); empty when the key
    /// has no open conflict.
    public var lost: [KeptChange]
    /// Sent with a push: the name of the device that made the change (`DeviceName`), which
    /// the remote keeps beside its id for every view; nil when the writer gave none.
    public var deviceName: String?
    /// Sent with a push: what the key must be on the remote for the change to be stored
    /// (`ChangeCondition`); nil for a change decided by the merge rule. Never stored.
    public var condition: ChangeCondition?

    public init(key: String, value: Data?, type: ValueType?, stamp: ChangeStamp,
                replaces: Replaced? = nil, settles: [ChangeStamp] = [], lost: [KeptChange] = [], deviceName: String? = nil,
                condition: ChangeCondition? = nil) {
        self.key = key
        self.condition = condition
        self.deviceName = deviceName
        self.value = value
        self.type = type
        self.stamp = stamp
        self.replaces = replaces
        self.settles = settles
        self.lost = lost
    }

    private enum CodingKeys: String, CodingKey { case key, value, type, stamp, replaces, settles, lost, alsoLost, deviceName, condition }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        key = try container.decode(String.self, forKey: .key)
        value = try container.decodeIfPresent(Data.self, forKey: .value)
        type = try container.decodeIfPresent(ValueType.self, forKey: .type)
        stamp = try container.decode(ChangeStamp.self, forKey: .stamp)
        replaces = try container.decodeIfPresent(Replaced.self, forKey: .replaces)
        settles = try container.decodeIfPresent([ChangeStamp].self, forKey: .settles) ?? []
        deviceName = try container.decodeIfPresent(String.self, forKey: .deviceName)
        condition = try container.decodeIfPresent(ChangeCondition.self, forKey: .condition)
        lost = []
        if let newest = try container.decodeIfPresent(KeptChange.self, forKey: .lost) {
            lost = [newest] + (try container.decodeIfPresent([KeptChange].self, forKey: .alsoLost) ?? [])
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(key, forKey: .key)
        try container.encodeIfPresent(value, forKey: .value)
        try container.encodeIfPresent(type, forKey: .type)
        try container.encode(stamp, forKey: .stamp)
        try container.encodeIfPresent(replaces, forKey: .replaces)
        if !settles.isEmpty { try container.encode(settles, forKey: .settles) }
        try container.encodeIfPresent(lost.first, forKey: .lost)
        if lost.count > 1 { try container.encode(lost.dropFirst().map { $0 }, forKey: .alsoLost) }
        try container.encodeIfPresent(deviceName, forKey: .deviceName)
        try container.encodeIfPresent(condition, forKey: .condition)
    }

    /// The change itself, without what travels with it.
    public var kept: KeptChange { KeptChange(value: value, type: type, stamp: stamp) }

    public static func tombstone(_ key: String, stamp: ChangeStamp) -> StampedChange {
        StampedChange(key: key, value: nil, type: nil, stamp: stamp)
    }

    public var isTombstone: Bool { value == nil }
    /// What the value counts against the quota (0 for a tombstone).
    public var size: Int { counted ?? 0 }
    /// What the value counts against the quota (`QuotaLedger.size(ofXML:)`); nil for a
    /// tombstone, which leaves no value.
    public var counted: Int? { value.map(QuotaLedger.size(ofXML:)) }
}

/// Where a key's latest change stands with the remote.
public enum SyncState: String, Sendable, Codable, CaseIterable {
    /// The remote has it.
    case synced
    /// Committed locally, not yet accepted by the remote.
    case pending
    /// The remote refused the key's last local change (a quota); the remote's value came back.
    case refused
}

/// What a change replaced, as its writer knew the key: nothing (the writer held no change of
/// it), the change with this stamp, or not known (a change pending from before kvsfs kept
/// conflicts, which is never taken for one).
///
/// On the wire: `{"nothing":true}`, `{"unknown":true}`, or the stamp's fields.
public enum Replaced: Hashable, Sendable, Codable {
    case nothing
    case unknown
    case change(ChangeStamp)

    private enum CodingKeys: String, CodingKey { case nothing, unknown }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        if try container.decodeIfPresent(Bool.self, forKey: .nothing) == true {
            self = .nothing
        } else if try container.decodeIfPresent(Bool.self, forKey: .unknown) == true {
            self = .unknown
        } else {
            self = .change(try ChangeStamp(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .nothing:
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(true, forKey: .nothing)
        case .unknown:
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(true, forKey: .unknown)
        case .change(let stamp):
            try stamp.encode(to: encoder)
        }
    }
}

/// A change as it was made, without anything that travels with it: the side of a conflict
/// that lost, or the one that won.
public struct KeptChange: Hashable, Sendable, Codable {
    /// The canonical XML property list; nil for a removal.
    public var value: Data?
    public var type: ValueType?
    public var stamp: ChangeStamp

    public init(value: Data?, type: ValueType?, stamp: ChangeStamp) {
        self.value = value
        self.type = type
        self.stamp = stamp
    }

    public var isRemoval: Bool { value == nil }
    /// What the value counts against a quota (`QuotaLedger.size(ofXML:)`; 0 for a removal).
    public var size: Int { value.map(QuotaLedger.size(ofXML:)) ?? 0 }
}

/// How an external change is taken in.
public enum ExternalApplyMode: Sendable, Equatable {
    /// By the merge rule: only when it is newer than what the store has. A pending local change
    /// it replaces is still pushed (an unsent loss), for the remote to keep as a conflict.
    case merge
    /// Unconditionally, marking the key refused: the rollback of a change the remote refused.
    case rollback
    /// Unconditionally: the store now follows another account's values.
    case replace
}

extension ChangeStamp {
    /// The stamp's time as every view prints it (the xattrs, `kvsfs conflicts`, `kvsfs
    /// history`): ISO 8601 in UTC to the millisecond, made from the integer milliseconds
    /// themselves, so that no view rounds a time another way than the next.
    public var timeText: String { Self.timeText(milliseconds: time) }

    public static func timeText(milliseconds: Int64) -> String {
        var (seconds, millisecond) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        if millisecond < 0 {
            seconds -= 1
            millisecond += 1000
        }
        var clock = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&clock, &parts) != nil else { return "\(milliseconds) ms" }
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                      Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(millisecond))
    }
}
