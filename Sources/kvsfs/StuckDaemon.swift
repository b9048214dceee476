import Foundation
import FuseKit
import Glibc
import KVStore
import Logging

/// A daemon of this store that was killed while one of its threads waited on its own mount.
/// The kernel waits for an answer only that daemon could give, so it never ends: it holds the
/// store's lock, and its mount hangs. This kvsfs never waits on its own mount (the applier
/// writes through a process of its own, `ApplierProcess`), but an older one did. Aborting the
/// mount's FUSE connection through fusectl answers every request it waits on with an error,
/// and the daemon ends.
///
/// Invariant: only a holder on its way out (killed, its main thread ended) is aborted, and only
/// through the connection it noted in the lock file (`note`); a live daemon is never touched.
enum StuckDaemon {
    /// Where the fusectl file system lists connections, one directory each, with `abort`.
    static let connections = "/sys/fs/fuse/connections"
    /// How long a holder may take to end once its connection is aborted.
    static let endGrace: Duration = .seconds(10)

    /// Notes, in the lock file, this process and the FUSE connection of its mount on
    /// `mountpoint`, for a later `kvsfs mount` that finds the lock still held.
    static func note(_ lock: StoreLock, mountpoint: String) throws {
        guard let connection = connection(of: mountpoint) else { return }
        try lock.write(note: "\(getpid()) \(connection)\n")
    }

    /// Takes the store's lock. When a process on its way out holds it, aborts the connection
    /// that process noted, says so, and takes the lock once the process has let go of it.
    static func lock(_ location: StoreLocation, logger: Logger) throws -> StoreLock {
        do {
            return try StoreLock(location: location)
        } catch {
            guard let holder = holder(of: location) else { throw inUse(location, by: nil) }
            guard isEnding(holder) else { throw inUse(location, by: holder) }
            guard let noted = StoreLock.note(at: location)?.split(whereSeparator: \.isWhitespace), noted.count == 2,
                  Int32(noted[0]) == holder, let connection = UInt32(noted[1]) else {
                throw CommandFailure("kvsfs process \(holder), which had store '\(location.storeID)' mounted, was killed and has not ended, and its lock file does not say which mount it waits on; end it by writing 1 to the abort file of its connection in \(connections)")
            }
            try abort(connection)
            logger.warning("kvsfs process \(holder), which had store '\(location.storeID)' mounted, was killed while it waited on its own mount; aborted its FUSE connection \(connection) so that it ends")
            let deadline = ContinuousClock.now + endGrace
            while ContinuousClock.now < deadline {
                let attempt = Result { () throws(StoreError) in try StoreLock(location: location) }
                switch attempt {
                case .success(let lock): return lock
                case .failure(.storeInUse): Thread.sleep(forTimeInterval: 0.1)
                case .failure(let error): throw error
                }
            }
            throw CommandFailure("kvsfs process \(holder) still holds store '\(location.storeID)' \(Int(endGrace.components.seconds)) s after its FUSE connection \(connection) was aborted")
        }
    }

    private static func inUse(_ location: StoreLocation, by holder: Int32?) -> CommandFailure {
        let who = holder.map { "kvsfs process \($0)" } ?? "another kvsfs process"
        return CommandFailure("store '\(location.storeID)' in \(location.dataDirectory.path) is already mounted by \(who)")
    }

    /// Writes to the connection's `abort`, mounting fusectl first if it is not.
    private static func abort(_ connection: UInt32) throws {
        if !FileManager.default.fileExists(atPath: "\(connections)/\(connection)") {
            if mount("fusectl", connections, "fusectl", 0, nil) != 0, errno != EBUSY {
                throw CommandFailure("cannot mount the fusectl file system on \(connections) (\(String(cString: strerror(errno)))) to abort FUSE connection \(connection): as root, run 'mount -t fusectl none \(connections)' and try again")
            }
        }
        let path = "\(connections)/\(connection)/abort"
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CommandFailure("cannot abort FUSE connection \(connection) through \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        guard write(descriptor, "1", 1) == 1 else {
            throw CommandFailure("cannot abort FUSE connection \(connection) through \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The process holding the lock file's flock, from /proc/locks.
    private static func holder(of location: StoreLocation) -> Int32? {
        guard let inode = StoreLock.inode(at: location),
              let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return nil }
        for line in table.split(separator: "\n") {
            // "1: FLOCK  ADVISORY  WRITE 4537 fe:01:1234 0 EOF"; a waiter's line has "->" after its number.
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK",
                  fields[5].split(separator: ":").last.flatMap({ UInt64($0) }) == inode else { continue }
            return Int32(fields[4])
        }
        return nil
    }

    /// Whether `pid` is on its way out: its main thread has ended (a zombie leader) or it is
    /// exiting (PF_EXITING in /proc/PID/stat's flags).
    private static func isEnding(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return false }
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        // state ppid pgrp session tty_nr tpgid flags
        guard fields.count > 6, let flags = UInt32(fields[6]) else { return false }
        return fields[0] == "Z" || fields[0] == "X" || flags & 0x4 != 0
    }

    /// The FUSE connection of the kvsfs mount that shows on `mountpoint`.
    static func connection(of mountpoint: String) -> UInt32? {
        guard let mount = MountTable.top(at: mountpoint), mount.type == "fuse.kvsfs" else { return nil }
        return mount.connection
    }
}
