import Foundation
import KVStore

// What a change log answers to a push and to a fetch: the bodies of the same answers over HTTP.

/// What became of pushed changes.
public struct PushOutcome: Sendable, Equatable, Codable {
    /// Changes the remote now has (or had already, or has something newer for).
    public var accepted: [StampedChange]
    public var refused: [Refusal]
    /// Accepted tombstones the remote did not store, which the pusher forgets too
    /// (`KeyValueStore.forget`), so that every replica holds the same. Always empty from this
    /// version, which stores every deletion; a server before 0.1 stored none for a key it did
    /// not hold.
    public var notStored: [StampedChange]
    /// The store's cursor before and after this push: when `cursorBefore` is where the pusher
    /// had fetched up to, every change up to `cursorAfter` is its own, and need not be fetched.
    public var cursorBefore: Int64?
    public var cursorAfter: Int64?
    /// The last change this push stored, at `cursorAfter`: the pusher's history mark when it
    /// takes `cursorAfter` as its cursor. Nil when the push stored nothing.
    public var mark: HistoryMark?

    /// The names the accepted changes give their devices (`DeviceName`), by device id: what a
    /// remote keeps of names. A refused change tells none.
    public var deviceNames: [String: String] {
        var names: [String: String] = [:]
        for change in accepted {
            if let name = change.deviceName { names[change.stamp.device] = name }
        }
        return names
    }

    public init(accepted: [StampedChange] = [], refused: [Refusal] = [], notStored: [StampedChange] = [],
                cursorBefore: Int64? = nil, cursorAfter: Int64? = nil, mark: HistoryMark? = nil) {
        self.accepted = accepted
        self.refused = refused
        self.notStored = notStored
        self.cursorBefore = cursorBefore
        self.cursorAfter = cursorAfter
        self.mark = mark
    }
}

extension PushOutcome {
    private enum CodingKeys: String, CodingKey {
        case accepted, refused, notStored, cursorBefore, cursorAfter, mark
    }

    /// `notStored` may be missing: a server older than the field stores every tombstone; and
    /// `mark`: such a server checks no marks.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        accepted = try container.decode([StampedChange].self, forKey: .accepted)
        refused = try container.decode([Refusal].self, forKey: .refused)
        notStored = try container.decodeIfPresent([StampedChange].self, forKey: .notStored) ?? []
        cursorBefore = try container.decodeIfPresent(Int64.self, forKey: .cursorBefore)
        cursorAfter = try container.decodeIfPresent(Int64.self, forKey: .cursorAfter)
        mark = try container.decodeIfPresent(HistoryMark.self, forKey: .mark)
    }
}

/// A change the remote refused, with what it holds for the key instead.
public struct Refusal: Sendable, Equatable, Codable {
    public var change: StampedChange
    /// The remote's latest change for the key; nil when it never had the key, or when its row
    /// for the key cannot be read (`rowUnreadable`).
    public var current: StampedChange?
    /// Why, in words (the quota that would break).
    public var reason: String
    /// The remote holds a row for the key that it cannot read (written by another program), so
    /// it could not judge the change at all. Unlike a refusal by a rule, this says nothing of
    /// what the key should hold: the pusher keeps its change, to push again once the row is
    /// mended, rather than roll back to a `current` that is not the remote's value.
    public var rowUnreadable: Bool

    public init(change: StampedChange, current: StampedChange?, reason: String, rowUnreadable: Bool = false) {
        self.change = change
        self.current = current
        self.reason = reason
        self.rowUnreadable = rowUnreadable
    }

    private enum CodingKeys: String, CodingKey {
        case change, current, reason, rowUnreadable
    }

    /// `rowUnreadable` may be missing: a server older than the field refused such changes as
    /// any other.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        change = try container.decode(StampedChange.self, forKey: .change)
        current = try container.decodeIfPresent(StampedChange.self, forKey: .current)
        reason = try container.decode(String.self, forKey: .reason)
        rowUnreadable = try container.decodeIfPresent(Bool.self, forKey: .rowUnreadable) ?? false
    }
}

/// Changes accepted after a cursor.
public struct ChangeBatch: Sendable, Equatable, Codable {
    public var changes: [StampedChange]
    /// The cursor to ask from next time.
    public var cursor: Int64
    /// Whether these are all the changes after the cursor asked for.
    public var complete: Bool
    /// Stored rows in this range that could not be read as changes (a row written outside the
    /// rules by another program), each with why: the reader reports them and goes on past them.
    public var unreadable: [String]
    /// The last change in the batch, at its cursor: the reader's history mark from here on.
    /// Nil when the batch has none (or its last row could not be read).
    public var mark: HistoryMark?
    /// The names the remote keeps (`DeviceName`) of the devices that made these changes or
    /// the changes that lost to them, by device id; a device it keeps no name of is left out.
    public var devices: [String: String]
    /// The store's schema version when the batch was read (`RemoteSchema.version`): every
    /// round of sync sees, at no extra request, whether the schema moved.
    public var schemaVersion: Int64

    public init(changes: [StampedChange], cursor: Int64, complete: Bool, unreadable: [String] = [], mark: HistoryMark? = nil,
                devices: [String: String] = [:], schemaVersion: Int64 = 0) {
        self.changes = changes
        self.cursor = cursor
        self.complete = complete
        self.unreadable = unreadable
        self.mark = mark
        self.devices = devices
        self.schemaVersion = schemaVersion
    }

    /// Every device id the batch names: the changes' and those of the changes that lost to them.
    public var deviceIDs: Set<String> {
        Set(changes.flatMap { [$0.stamp.device] + $0.lost.map(\.stamp.device) })
    }

    /// The names given of devices the batch names: a name given of any other id is not taken.
    public var namedDevices: [String: String] {
        let named = deviceIDs
        return devices.filter { named.contains($0.key) }
    }

    private enum CodingKeys: String, CodingKey {
        case changes, cursor, complete, unreadable, mark, devices, schemaVersion
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(changes, forKey: .changes)
        try container.encode(cursor, forKey: .cursor)
        try container.encode(complete, forKey: .complete)
        try container.encode(unreadable, forKey: .unreadable)
        try container.encodeIfPresent(mark, forKey: .mark)
        if !devices.isEmpty { try container.encode(devices, forKey: .devices) }
        if schemaVersion != 0 { try container.encode(schemaVersion, forKey: .schemaVersion) }
    }

    /// `unreadable`, `mark` and `schemaVersion` may be missing: a server older than the field
    /// sends none (and keeps no schema).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        changes = try container.decode([StampedChange].self, forKey: .changes)
        cursor = try container.decode(Int64.self, forKey: .cursor)
        complete = try container.decode(Bool.self, forKey: .complete)
        unreadable = try container.decodeIfPresent([String].self, forKey: .unreadable) ?? []
        mark = try container.decodeIfPresent(HistoryMark.self, forKey: .mark)
        devices = try container.decodeIfPresent([String: String].self, forKey: .devices) ?? [:]
        schemaVersion = try container.decodeIfPresent(Int64.self, forKey: .schemaVersion) ?? 0
    }
}
