import Foundation
import GRDB
import GRDBSQLite

/// Room on the file system holding the store: a write that finds none is `StoreError.diskFull`,
/// never a database failure, whether the journal's `pwrite` or SQLite met the full disk.
///
/// Nothing here latches: each write asks the file system anew, so the store takes changes
/// again as soon as space is freed, without a remount.
public enum DiskRoom {
    /// The refusal a failed write of the file at `path` with `code` (errno) means, when it is
    /// one for lack of room.
    static func refusal(errno code: Int32, path: String) -> StoreError? {
        let directory = (path as NSString).deletingLastPathComponent
        switch code {
        case ENOSPC: return .diskFull(directory: directory, .space)
        case EDQUOT: return .diskFull(directory: directory, .userQuota)
        default: return nil
        }
    }

    /// A failure of SQLite on the database at `path`, in the store's words. SQLite says
    /// SQLITE_FULL when a write found no room (ENOSPC), and SQLITE_IOERR with the system's
    /// errno for the others (EDQUOT among them): `systemErrno` (`sqlite3_system_errno`, read
    /// before anything else ran on the connection) tells them apart.
    static func storeError(_ error: any Error, systemErrno: Int32 = 0, path: String) -> StoreError {
        if let error = error as? StoreError { return error }
        if let error = error as? DatabaseError {
            if error.resultCode == .SQLITE_FULL { return refusal(errno: systemErrno == EDQUOT ? EDQUOT : ENOSPC, path: path)! }
            if error.resultCode == .SQLITE_IOERR, let refusal = refusal(errno: systemErrno, path: path) { return refusal }
        }
        return .database(String(describing: error))
    }

    /// The errno of the last system call SQLite saw fail on `db` (0 if none).
    static func systemErrno(_ db: Database) -> Int32 {
        sqlite3_system_errno(db.sqliteConnection)
    }

    /// The free bytes a file system said it had, and when.
    struct Seen {
        var free: Int
        var at: ContinuousClock.Instant
    }

    /// While a disk has this much more room than a write needs, what it said stands for
    /// `trust`: a data directory on NFS answers statvfs with a round trip, and `checkRoom`
    /// runs under the mount's lock. Nearer the edge, every write asks.
    static let plenty = 64 << 20
    static let trust: Duration = .seconds(1)

    /// Bytes the file system holding `path` can still give this process: the blocks kept for
    /// root count for root, as the kernel lets root use them. Nil when it will not say.
    public static func freeBytes(at path: String) -> Int? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        let blocks = UInt64(geteuid() == 0 ? info.f_bfree : info.f_bavail)
        return Int(clamping: blocks.multipliedReportingOverflow(by: UInt64(info.f_frsize)).partialValue)
    }
}

extension KeyValueStore {
    /// Refuses up front (`diskFull`) a value of `bytes` when the disk holding the store has less
    /// room than its journal record would take (`ChangeJournal.recordSlack`): a writer then
    /// hears ENOSPC at write(), as it hears a quota refusal, rather than at close(), which
    /// shells do not check. A guess, not a promise: the commit still decides, and only the
    /// commit can tell a spent disk quota (EDQUOT).
    public func checkRoom(for bytes: Int) throws(StoreError) {
        let needed = bytes + ChangeJournal.recordSlack
        let now = ContinuousClock.now
        if let seen = roomSeen.withLock({ $0 }), now - seen.at < DiskRoom.trust, seen.free >= needed + DiskRoom.plenty { return }
        let directory = (database.path as NSString).deletingLastPathComponent
        guard let free = DiskRoom.freeBytes(at: directory) else { return }
        roomSeen.withLock { $0 = DiskRoom.Seen(free: free, at: now) }
        if free < needed { throw .diskFull(directory: directory, .space) }
    }
}
