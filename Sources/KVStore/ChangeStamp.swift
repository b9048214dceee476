import Foundation
import Synchronization

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
/// always exceed every stamp the device has seen.
public struct HybridLogicalClock: Sendable {
    public let device: String
    public private(set) var last: ChangeStamp

    public init(device: String, last: ChangeStamp? = nil) {
        self.device = device
        self.last = last ?? ChangeStamp(time: 0, counter: 0, device: device)
    }

    /// A stamp for a change made now, greater than every stamp made or seen before.
    public mutating func stamp(physical: Int64) -> ChangeStamp {
        if physical > last.time {
            last = ChangeStamp(time: physical, counter: 0, device: device)
        } else {
            last = ChangeStamp(time: last.time, counter: last.counter + 1, device: device)
        }
        return last
    }

    /// Takes in a stamp seen from elsewhere, so that later local stamps exceed it.
    public mutating func observe(_ stamp: ChangeStamp) {
        if (stamp.time, stamp.counter) > (last.time, last.counter) {
            last = ChangeStamp(time: stamp.time, counter: stamp.counter, device: device)
        }
    }
}

/// One key's latest change as it travels between replicas: its value (canonical XML), or a
/// tombstone when the change deleted the key.
public struct StampedChange: Hashable, Sendable, Codable {
    public var key: String
    /// The canonical XML property list; nil for a tombstone.
    public var value: Data?
    public var type: ValueType?
    public var stamp: ChangeStamp

    public init(key: String, value: Data?, type: ValueType?, stamp: ChangeStamp) {
        self.key = key
        self.value = value
        self.type = type
        self.stamp = stamp
    }

    public static func tombstone(_ key: String, stamp: ChangeStamp) -> StampedChange {
        StampedChange(key: key, value: nil, type: nil, stamp: stamp)
    }

    public var isTombstone: Bool { value == nil }
    /// What the value counts against the quota (0 for a tombstone).
    public var size: Int { value?.count ?? 0 }
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

/// How an external change is taken in.
public enum ExternalApplyMode: Sendable, Equatable {
    /// By the merge rule: only when it is newer than what the store has.
    case merge
    /// Unconditionally, marking the key refused: the rollback of a change the remote refused.
    case rollback
    /// Unconditionally: the store now follows another account's values.
    case replace
}

/// The remote changes being applied through a mount right now, and the threads applying
/// them. The file system asks it whether a request comes from an applier thread, and which
/// change that thread is writing, so that the write is committed as that change (with its
/// stamp, not uploaded again) rather than as a new local change.
public final class ExternalChangeRegistry: Sendable {
    private struct State {
        var threads: Set<Int32> = []
        var inFlight: [String: (StampedChange, ExternalApplyMode)] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    public func registerApplier(thread: Int32) {
        state.withLock { _ = $0.threads.insert(thread) }
    }

    public func isApplier(thread: Int32) -> Bool {
        state.withLock { $0.threads.contains(thread) }
    }

    public func begin(_ change: StampedChange, mode: ExternalApplyMode) {
        state.withLock { $0.inFlight[change.key] = (change, mode) }
    }

    public func end(_ key: String) {
        state.withLock { _ = $0.inFlight.removeValue(forKey: key) }
    }

    /// The change being applied to `key`, if any.
    public func inFlight(_ key: String) -> (StampedChange, ExternalApplyMode)? {
        state.withLock { $0.inFlight[key] }
    }
}
