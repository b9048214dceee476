import Dispatch
import GRDB
import Synchronization

/// Moving the change journal into the database off the write path.
///
/// A commit only appends to the journal. Once the journal holds a batch, a background thread
/// writes its rows to the database in one transaction and then checkpoints the write-ahead
/// log, which syncs to disk; the lock is taken only to read the rows and, at the end, to drop
/// them from the journal. A writer never waits for SQLite's batch or its checkpoint, unless
/// the background falls behind by several batches: then the committer moves the journal
/// itself (`ChangeJournal.isBehind`), which keeps the journal, and each open's replay, bounded.
///
/// Writes made under the lock (`write`) still take the journal first, rows the background may
/// hold too: `databaseSequence`, read and set only inside the database's writes, which run one
/// at a time, tells the background which rows are in the database already, and it skips them.
extension KeyValueStore {
    /// The database writes made under the lock between checkpoints: each asks for one once
    /// this many have grown the write-ahead log.
    static let writesPerCheckpoint = 64

    /// One thread for every store's moves: they are short, and none waits for another.
    private static let mover = DispatchQueue(label: "kvsfs.store.journal-move", qos: .utility)

    /// Returns once every move asked for so far has ended, and released its store.
    package static func waitForJournalMoves() {
        mover.sync {}
    }

    /// After a commit: the journal, past a batch, moves to the database in the background, or
    /// here when the background has fallen behind.
    func journalGrew(_ state: inout State) {
        guard state.journal.needsFlush else { return }
        guard state.journal.isBehind else { return askJournalMove(&state) }
        // Committed already, in the journal: a move that fails here is tried again with the
        // next commit, and with the background's.
        do {
            try moveJournalToDatabase(&state)
        } catch {
            askJournalMove(&state)
        }
    }

    /// Asks for a background move and checkpoint, unless one is asked already.
    func askJournalMove(_ state: inout State) {
        guard !state.journalMoveAsked else { return }
        state.journalMoveAsked = true
        Self.mover.async { [weak self] in self?.moveJournalInBackground() }
    }

    /// Writes the journal's rows the database does not hold yet, checkpoints, then drops the
    /// rows from the journal. A failure leaves every row in the journal, which keeps them
    /// across a crash: the next commit past a batch asks again, and a writer under the lock
    /// takes them along.
    func moveJournalInBackground() {
        let rows = state.withLock { $0.journal.pending }
        var moved: MovedRows?
        do {
            moved = try moveJournal(rows) { _ in }
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
        } catch {
            // Either the rows stay journaled (no move), or only the checkpoint failed, which
            // the next move runs again.
        }
        state.withLock { state in
            state.journalMoveAsked = false
            guard let moved else { return }
            state.writesSinceCheckpoint = 0
            do {
                try journalMoved(moved, in: &state)
            } catch {
                // The quarantine cannot be written: the rows stay journaled (`journalMoved`).
            }
            if state.journal.needsFlush { askJournalMove(&state) }
        }
    }

    /// Journaled rows a transaction outside the lock wrote, and those the database refused.
    struct MovedRows {
        var through: Int64?
        var refused: [ChangeJournal.Row]
    }

    /// In one transaction: the rows of `journaled` (read under the lock) the database does not
    /// hold yet, then `updates`. Rows go to the database in the journal's order, so a write
    /// never overtakes a journaled one, and each row is offered to the database by one
    /// transaction only, so each row it refuses is quarantined once. BEGIN and COMMIT are
    /// cached statements: GRDB's `write` prepares them anew each time.
    func moveJournal(_ journaled: [ChangeJournal.Row], _ updates: (Database) throws -> Void) throws(StoreError) -> MovedRows {
        var moved = MovedRows(through: journaled.last?.sequence, refused: [])
        do {
            try database.writeWithoutTransaction { db in
                let unmoved = journaled.filter { $0.sequence > databaseSequence.load(ordering: .relaxed) }
                try db.cachedStatement(sql: "BEGIN IMMEDIATE").execute()
                do {
                    moved.refused = try Self.record(journaled: unmoved, db)
                    try updates(db)
                    try db.cachedStatement(sql: "COMMIT").execute()
                } catch {
                    if !db.isInsideTransaction { throw error }
                    try? db.execute(sql: "ROLLBACK")
                    throw error
                }
                if let last = unmoved.last { databaseSequence.store(last.sequence, ordering: .relaxed) }
            }
        } catch {
            throw .database(String(describing: error))
        }
        return moved
    }

    /// Under the lock, after `moveJournal`: the rows it refused are quarantined, then the rows
    /// it moved leave the journal. If the quarantine cannot be written, the journal keeps them,
    /// and an open after a crash offers them to the database again.
    func journalMoved(_ moved: MovedRows, in state: inout State) throws(StoreError) {
        guard let through = moved.through else { return }
        if !moved.refused.isEmpty { try state.quarantine.append(moved.refused) }
        state.journal.drop(through: through)
    }
}
