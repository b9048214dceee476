import Foundation

/// Where a store lives: one SQLite database per store in a data directory.
public struct StoreLocation: Sendable, Equatable {
    public let dataDirectory: URL
    public let storeID: String

    public init(dataDirectory: URL, storeID: String) throws(StoreError) {
        guard Self.isValidStoreID(storeID) else { throw .invalidStoreName(storeID) }
        self.dataDirectory = dataDirectory
        self.storeID = storeID
    }

    public var databasePath: String { dataDirectory.appendingPathComponent("\(storeID).sqlite").path }
    public var lockPath: String { dataDirectory.appendingPathComponent("\(storeID).lock").path }

    /// `$XDG_DATA_HOME/kvsfs`, else `~/.local/share/kvsfs`.
    public static func defaultDataDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        if let xdg = environment["XDG_DATA_HOME"], !xdg.isEmpty {
            return URL(fileURLWithPath: xdg).appendingPathComponent("kvsfs")
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return URL(fileURLWithPath: home).appendingPathComponent(".local/share/kvsfs")
    }

    public static func isValidStoreID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 128 && !id.hasPrefix(".")
            && id.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) && $0.isASCII || "._-".unicodeScalars.contains($0) }
    }
}

/// An exclusive lock on a store, held while it is mounted; the kernel drops it if the process dies.
public final class StoreLock: Sendable {
    private let descriptor: Int32

    public init(location: StoreLocation) throws(StoreError) {
        let fd = open(location.lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw .database("cannot open \(location.lockPath): \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw .storeInUse(location.databasePath)
        }
        descriptor = fd
    }

    /// Writes `note` as the lock file's whole content: who holds the lock, for the next
    /// process that finds it held (`StoreLock.note(at:)`).
    public func write(note: String) throws(StoreError) {
        let bytes = Array(note.utf8)
        guard ftruncate(descriptor, 0) == 0, pwrite(descriptor, bytes, bytes.count, 0) == bytes.count else {
            throw .database("cannot write the store's lock file: \(String(cString: strerror(errno)))")
        }
    }

    /// What the holder of the lock at `location` wrote (at most 256 bytes), or nil.
    public static func note(at location: StoreLocation) -> String? {
        let fd = open(location.lockPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 256)
        let count = read(fd, &bytes, bytes.count)
        guard count > 0 else { return nil }
        return String(decoding: bytes[..<count], as: UTF8.self)
    }

    /// The inode of the lock file at `location`, by which /proc/locks names it.
    public static func inode(at location: StoreLocation) -> UInt64? {
        var info = stat()
        guard stat(location.lockPath, &info) == 0 else { return nil }
        return UInt64(info.st_ino)
    }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}
