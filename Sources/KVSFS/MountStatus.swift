import FoundationEssentials
import KVStore

/// What a mount shows of itself (`kvsfs status`): where its store lives, what it uses of its
/// limits, and where sync stands. Each fact is an extended attribute of the root, and
/// `user.kvsfs.status` holds them all as one JSON object whose field names programs rely on:
/// rename none of them (kvsfs(1) lists them).
public struct MountStatus: Sendable, Equatable, Codable {
    /// How the last round with the remote ended; `none` on a mount without a remote.
    public enum Reachability: String, Sendable, Codable {
        case reachable, offline, connecting, none
    }

    /// What the store uses of one limit.
    public struct Usage: Sendable, Equatable, Codable {
        public var used: Int
        public var quota: Int

        public init(used: Int, quota: Int) {
            self.used = used
            self.quota = quota
        }
    }

    /// The store's name, its data directory and database file; nil when not known.
    @Nullable public var store: String?
    @Nullable public var dataDirectory: String?
    @Nullable public var database: String?
    /// The remote as the mount names it; nil without one.
    @Nullable public var remote: String?
    public var reachable: Reachability
    /// Why the last round failed: set exactly when `reachable` is `offline`.
    @Nullable public var offlineReason: String?
    /// When a round last succeeded; nil if none has (or there is no remote).
    @Nullable public var lastSync: Date?
    /// Keys whose latest change no remote has accepted yet, and local changes a remote change
    /// replaced before they were pushed (pushed all the same, to be kept as conflicts).
    public var pending: Int
    /// Keys with an open conflict (`kvsfs conflicts`).
    public var conflicts: Int
    /// The bytes of the values those conflicts keep in the mount's database, outside `bytes`.
    public var conflictBytes: Int
    public var bytes: Usage
    public var keys: Usage
    /// The per-value limit and the key-name limit, in bytes.
    public var valueLimit: Int
    public var keyNameLimit: Int
    /// The version of the store's schema the mount holds (0: none), and how many of its keys
    /// hold values that break it (set before it came: `kvsfs schema check` lists them).
    public var schemaVersion: Int64
    public var nonConforming: Int
    /// The event log and the cursor of its last event (0 before the first); nil without a remote.
    @Nullable public var eventLog: String?
    @Nullable public var eventCursor: Int64?
    /// The cursor of the remote's history up to which the mount has taken in every change (0
    /// before any): what `kvsfs import --if-unchanged-since` takes; nil without a remote, or
    /// before the mount has read where it stands.
    @Nullable public var remoteCursor: Int64?

    /// The longest offline reason shown, in Unicode scalars: every attribute must fit the
    /// kernel's 64 KiB for an extended attribute, paths and all.
    static let reasonLimit = 1000
    /// The most a status's JSON may take: the kernel's limit on an extended attribute's value.
    public static let maximumJSONBytes = 65536

    /// The status of a mount of `store`, found at `location`, with `sync` (nil: no remote).
    public init(store: KeyValueStore, location: StoreLocation?, sync: SyncStanding?) {
        let limits = store.limits
        let usage = store.usage
        self.store = location?.storeID
        dataDirectory = location?.dataDirectory.path
        database = location?.databasePath
        remote = sync?.remote
        offlineReason = nil
        switch sync?.reachability {
        case nil: reachable = .none
        case .connecting: reachable = .connecting
        case .reachable: reachable = .reachable
        case .offline(let reason):
            reachable = .offline
            offlineReason = String(String.UnicodeScalarView(reason.unicodeScalars.prefix(Self.reasonLimit)))
        }
        lastSync = sync?.lastSync
        pending = store.pendingCount + store.unsentLosses().count
        conflicts = store.conflictCount
        conflictBytes = store.conflictBytes
        bytes = Usage(used: usage.bytes, quota: limits.totalBytes)
        keys = Usage(used: usage.keys, quota: limits.keys)
        valueLimit = limits.valueBytes
        keyNameLimit = limits.keyNameBytes
        eventLog = sync?.eventLog
        eventCursor = sync?.eventCursor
        remoteCursor = sync?.remoteCursor
        schemaVersion = store.schema.version
        nonConforming = store.violationCount
    }

    /// The root's extended attributes that show this status (`user.kvsfs.remote` and
    /// `user.kvsfs.events` are sync's own: see `MountSynchronizer.rootAttributes`).
    public func attributes() throws -> [String: String] {
        var attributes = [
            "user.kvsfs.reachable": offlineReason.map { "offline: \($0)" } ?? reachable.rawValue,
            "user.kvsfs.last-sync": lastSync.map(Self.text(of:)) ?? "never",
            "user.kvsfs.pending": String(pending),
            "user.kvsfs.conflicts": String(conflicts),
            "user.kvsfs.bytes": "\(bytes.used)/\(bytes.quota)",
            "user.kvsfs.keys": "\(keys.used)/\(keys.quota)",
            "user.kvsfs.value-limit": String(valueLimit),
            "user.kvsfs.key-name-limit": String(keyNameLimit),
            "user.kvsfs.schema-version": String(schemaVersion),
            "user.kvsfs.nonconforming": String(nonConforming),
            "user.kvsfs.status": try json(),
        ]
        attributes["user.kvsfs.store"] = store
        attributes["user.kvsfs.data-directory"] = dataDirectory
        attributes["user.kvsfs.database"] = database
        attributes["user.kvsfs.event-cursor"] = eventCursor.map { String($0) }
        attributes["user.kvsfs.remote-cursor"] = remoteCursor.map { String($0) }
        return attributes
    }

    /// The status as one line of JSON: keys sorted, unknown facts as null, times ISO 8601 UTC
    /// (as `text(of:)` writes them).
    public func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    /// A status from the JSON of `user.kvsfs.status`, checked: at most `maximumJSONBytes`,
    /// every field there with its type (null where unknown), times ISO 8601, counts not negative,
    /// a reason exactly when offline.
    public init(json: [UInt8]) throws(StatusError) {
        guard json.count <= Self.maximumJSONBytes else { throw .unreadable("it is over \(Self.maximumJSONBytes) bytes") }
        do {
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            self = try decoder.decode(MountStatus.self, from: Data(json))
        } catch {
            throw .unreadable(Self.reason(error))
        }
        let counts = [pending, conflicts, conflictBytes, bytes.used, bytes.quota, keys.used, keys.quota, valueLimit, keyNameLimit, nonConforming]
        guard counts.allSatisfy({ $0 >= 0 }), (eventCursor ?? 0) >= 0, (remoteCursor ?? 0) >= 0, schemaVersion >= 0 else { throw .unreadable("a count is negative") }
        guard (reachable == .offline) == (offlineReason != nil) else { throw .unreadable("an offline reason goes with offline only") }
    }

    /// What was wrong with a status's JSON, in one line.
    private static func reason(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return String(describing: error) }
        switch error {
        case .keyNotFound(let key, _):
            return "the field \(key.stringValue) is missing"
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            let field = context.codingPath.map(\.stringValue).joined(separator: ".")
            return field.isEmpty ? "it is not a JSON object" : "the field \(field) is not what it should be"
        @unknown default:
            return "it is not a JSON object of the status's fields"
        }
    }

    /// A time as the status shows it: ISO 8601 in UTC, to the second.
    public static func text(of time: Date) -> String {
        time.formatted(Date.ISO8601FormatStyle())
    }
}

/// Why a status could not be read.
public enum StatusError: Error, Equatable, CustomStringConvertible {
    case unreadable(String)

    public var description: String {
        switch self {
        case .unreadable(let reason): "not a status this kvsfs reads: \(reason)"
        }
    }
}

/// A fact that may be unknown: written as null rather than left out, so that a status's JSON
/// always has every field; read back, the field must be there (null or a value).
@propertyWrapper
public struct Nullable<Value: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}
