import Foundation
import GRDB
@testable import KVStore
import KVTestSupport
import Testing

/// A write that finds no room is `diskFull` with the data directory, whichever way SQLite or
/// the journal says it; EDQUOT (a spent disk quota) is told apart from ENOSPC. The real full
/// disk is in `FullDiskTests`; a disk quota cannot be set up there, so it is checked here.
@Suite("Disk room")
struct DiskRoomTests {
    let database = "/data/default.sqlite"

    @Test("SQLITE_FULL is a full disk; with EDQUOT behind it, a spent disk quota")
    func sqliteFull() {
        let full = DatabaseError(resultCode: .SQLITE_FULL)
        #expect(DiskRoom.storeError(full, path: database) == .diskFull(directory: "/data", .space))
        #expect(DiskRoom.storeError(full, systemErrno: EDQUOT, path: database) == .diskFull(directory: "/data", .userQuota))
    }

    @Test("an I/O error is a full disk only when its errno says so")
    func ioError() {
        let write = DatabaseError(resultCode: .SQLITE_IOERR_WRITE)
        #expect(DiskRoom.storeError(write, systemErrno: EDQUOT, path: database) == .diskFull(directory: "/data", .userQuota))
        #expect(DiskRoom.storeError(write, systemErrno: ENOSPC, path: database) == .diskFull(directory: "/data", .space))
        guard case .database = DiskRoom.storeError(write, systemErrno: EIO, path: database) else {
            Issue.record("an I/O error that is not for lack of room stays a database failure")
            return
        }
    }

    @Test("the journal's errno: ENOSPC and EDQUOT are refusals, others are not")
    func journalErrno() {
        #expect(DiskRoom.refusal(errno: ENOSPC, path: database + ".changes") == .diskFull(directory: "/data", .space))
        #expect(DiskRoom.refusal(errno: EDQUOT, path: database + ".changes") == .diskFull(directory: "/data", .userQuota))
        #expect(DiskRoom.refusal(errno: EIO, path: database + ".changes") == nil)
    }

    @Test("the words name the directory, never SQLite")
    func words() {
        #expect(StoreError.diskFull(directory: "/data", .space).description == "the disk holding /data is full")
        #expect(StoreError.diskFull(directory: "/data", .userQuota).description == "the disk quota on the file system of /data is spent")
    }

    @Test("a value the disk has no room for is refused before its commit, even right after a check that found plenty")
    func roomBeforeCommit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.checkRoom(for: 100)
            let free = try #require(DiskRoom.freeBytes(at: dir.path))
            #expect(throws: StoreError.diskFull(directory: dir.path, .space)) { try store.checkRoom(for: free) }
        }
    }
}
