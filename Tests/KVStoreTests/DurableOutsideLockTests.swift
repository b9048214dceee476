import Foundation
import GRDB
@testable import KVStore
import KVTestSupport
import Synchronization
import Testing

@Suite("makeDurable and the store's lock")
struct DurableOutsideLockTests {
    /// What the checkpoints saw: for each, the journal's length if the store's lock was free
    /// (nil if it was held, as a reader of the store would find it).
    private final class Checkpoints: Sendable {
        let journaled = Mutex<[Int?]>([])
    }

    @Test("makeDurable checkpoints without holding the store's lock, once the journal's commits are in the database")
    func checkpointOutsideStoreLock() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("committed before"), forKey: "k")
            let checkpoints = Checkpoints()
            try store.database.writeWithoutTransaction { db in
                db.trace { event in
                    guard case .statement(let statement) = event, statement.sql.contains("wal_checkpoint") else { return }
                    let journaled = journalLength(of: store)
                    checkpoints.journaled.withLock { $0.append(journaled) }
                }
            }
            try store.makeDurable()
            #expect(checkpoints.journaled.withLock { $0 } == [0], "the checkpoint ran with the store's lock free and the journal already moved")
        }
    }
}

/// The store's journal length, read on a thread of its own if the store's lock is free (a Mutex
/// cannot be tried from the thread that holds it); nil if another thread holds it.
private func journalLength(of store: KeyValueStore) -> Int? {
    final class Outcome: Sendable { let length = Mutex<Int?>(nil) }
    let outcome = Outcome()
    let done = DispatchSemaphore(value: 0)
    Thread {
        let length = store.state.withLockIfAvailable { $0.journal.pending.count }
        outcome.length.withLock { $0 = length }
        done.signal()
    }.start()
    done.wait()
    return outcome.length.withLock { $0 }
}
