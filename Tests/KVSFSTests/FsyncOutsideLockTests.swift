import Foundation
import GRDB
import Glibc
@testable import KVSFS
@testable import KVStore
import KVTestSupport
import Synchronization
import Testing

@Suite("fsync and the namespace lock")
struct FsyncOutsideLockTests {
    /// For each checkpoint: whether a request held the namespace while it ran.
    private final class Checkpoints: Sendable {
        let namespaceHeld = Mutex<[Bool]>([])
    }

    @Test("fsync commits the handle, then makes it durable with the namespace lock released: other requests go on during the checkpoint")
    func checkpointOutsideNamespaceLock() throws {
        let harness = try Harness()
        let (ino, handle) = try harness.open("saved", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        defer { harness.fs.release(inode: ino, handle: handle) }
        try harness.write(ino, handle, "\"fsynced\"\n")

        let checkpoints = Checkpoints()
        let fs = harness.fs
        try harness.store.database.writeWithoutTransaction { db in
            db.trace { event in
                guard case .statement(let statement) = event, statement.sql.contains("wal_checkpoint") else { return }
                checkpoints.namespaceHeld.withLock { $0.append(fs.state.isHeld) }
            }
        }
        try harness.fs.fsync(inode: ino, handle: handle, dataOnly: false)
        #expect(checkpoints.namespaceHeld.withLock { $0 } == [false], "one checkpoint, with no request holding the namespace")
        #expect(try harness.value("saved") == .string("fsynced"))
    }
}
