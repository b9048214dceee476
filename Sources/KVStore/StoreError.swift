/// Why the store refused an operation. Every refusal leaves the store as it was.
public enum StoreError: Error, Equatable, Sendable {
    /// The bytes are not a property list the store accepts.
    case invalidPropertyList(String)
    /// One value would exceed the per-value limit.
    case valueTooLarge(size: Int, limit: Int)
    /// All values together would exceed the store's byte limit.
    case storeFull(needed: Int, available: Int, limit: Int)
    /// One key too many.
    case tooManyKeys(limit: Int)
    /// A key name longer than the limit, in bytes of UTF-8.
    case keyTooLong(bytes: Int, limit: Int)
    /// The empty string is not a key.
    case emptyKey
    /// A name outside the key rule (`KeyName`).
    case invalidKey(String)
    /// A change stamp outside the stamp rule (`StampRule`).
    case invalidStamp(String)
    /// A device name outside its rule (`DeviceName`).
    case invalidDeviceName(String)
    case noSuchKey(String)
    /// Another process has this store open.
    case storeInUse(String)
    case invalidStoreName(String)
    /// SQLite failed; the message is SQLite's.
    case database(String)
    /// The file system holding the store's data directory (its database and journal) had no
    /// room for the change (`shortage` says which room): nothing was committed, and the store
    /// takes changes again once there is room (`DiskRoom`).
    case diskFull(directory: String, DiskShortage)
    /// Local writes are refused: the remote only lets this device read the store.
    case readOnly(String)
    /// A key's conflict is no longer the one a request named (a later change settled or
    /// replaced it).
    case conflictChanged(String)
    /// A store schema that cannot be taken: malformed, or past a bound (`SchemaLimits`).
    case invalidSchema(String)
    /// A value that breaks its key's rule in the store's schema.
    case schemaViolation(SchemaViolation)
    /// A change's condition outside its form (`ChangeCondition.check`).
    case invalidCondition(String)
    /// A conditional change of a key that has a local change the remote has not taken yet:
    /// the condition would be judged against a version this mount has already replaced.
    case unpushedChange(String)
}

extension StoreError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .invalidPropertyList(let reason): "not a property list: \(reason)"
        case .valueTooLarge(let size, let limit): "value of \(size) bytes exceeds the per-value limit of \(limit) bytes"
        case .storeFull(let needed, let available, let limit): "value needs \(needed) bytes but only \(available) of the store's \(limit) bytes are free"
        case .tooManyKeys(let limit): "the store already holds its limit of \(limit) keys"
        case .keyTooLong(let bytes, let limit): "key name of \(bytes) bytes exceeds the limit of \(limit) bytes"
        case .emptyKey: "the empty string is not a key"
        case .invalidKey(let reason): "invalid key: \(reason)"
        case .invalidStamp(let reason): "invalid change stamp: \(reason)"
        case .invalidDeviceName(let reason): "invalid device name: \(reason)"
        case .noSuchKey(let key): "no key \(key)"
        case .storeInUse(let path): "the store \(path) is already mounted by another kvsfs process"
        case .invalidStoreName(let name): "invalid store name \(name): use letters, digits, '.', '_' and '-'"
        case .database(let message): "database error: \(message)"
        case .diskFull(let directory, .space): "the disk holding \(directory) is full"
        case .diskFull(let directory, .userQuota): "the disk quota on the file system of \(directory) is spent"
        case .readOnly(let reason): "the store is read-only here: \(reason)"
        case .conflictChanged(let key): "the conflict of \(key.debugDescription) is not the one named: it changed since it was read"
        case .invalidSchema(let reason): "invalid schema: \(reason)"
        case .schemaViolation(let violation): violation.description
        case .invalidCondition(let reason): "invalid condition: \(reason)"
        case .unpushedChange(let key): "\(key.debugDescription) has a change on this mount not yet pushed: sync first (kvsfs sync)"
        }
    }
}

/// Which room a write found none of on the disk holding the store.
public enum DiskShortage: Sendable, Equatable {
    /// The file system is full (ENOSPC).
    case space
    /// The user's disk quota on it is spent (EDQUOT).
    case userQuota
}
