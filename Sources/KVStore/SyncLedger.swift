/// Where each key's latest change stands with the remote: its stamp, sync state and base (what
/// a push says it replaces), the keys pending a push, the keys' open conflicts, and the pending
/// changes a remote change replaced before they were pushed.
///
/// Invariant: `pendingKeys` is exactly the keys of `changes` in `.pending`, so that a push
/// finds its changes without looking at every key; `changes` is set only through `setChange`,
/// which keeps it so.
struct SyncLedger {
    /// Every key's latest change, deleted keys included.
    private(set) var changes: [String: KeyValueStore.ChangeMeta]
    private(set) var pendingKeys: Set<String>
    /// The keys' open conflicts, as the remote last gave them (`takeConflicts`).
    var conflicts: [String: KeyConflict] = [:]
    /// Pending changes a newer remote change replaced before they were pushed, each with
    /// what it replaced: pushed all the same (`changesToPush`), so that no local change
    /// is lost without the remote keeping it.
    var unsentLosses: [StampedChange] = []

    /// The pending keys are rebuilt from the sync states of `changes`: what the database holds
    /// with the journal replayed into it.
    init(changes: [String: KeyValueStore.ChangeMeta]) {
        self.changes = changes
        pendingKeys = Set(changes.lazy.filter { $0.value.syncState == .pending }.map(\.key))
    }

    /// Sets `key`'s latest change (nil: the store forgets the key) and its place in `pendingKeys`.
    mutating func setChange(_ key: String, _ change: KeyValueStore.ChangeMeta?) {
        changes[key] = change
        if change?.syncState == .pending { pendingKeys.insert(key) } else { pendingKeys.remove(key) }
    }

    /// Sets what `key`'s latest change replaced, if the key has one.
    mutating func setBase(_ base: Replaced, of key: String) {
        guard var change = changes[key] else { return }
        change.base = base
        change.settles = []
        setChange(key, change)
    }

    /// Sets where `key`'s latest change stands with the remote, if the key has one.
    mutating func setSyncState(_ syncState: SyncState, of key: String) {
        guard var change = changes[key] else { return }
        change.syncState = syncState
        setChange(key, change)
    }
}

extension KeyValueStore {
    struct ChangeMeta {
        var stamp: ChangeStamp
        var syncState: SyncState
        /// The change's place in the order this store took changes in (local or fetched): what
        /// `changes(after:)` pages by. A sync state moving on keeps it.
        var sequence: Int64
        /// What a pending change replaced, as the remote last gave the key: the change before
        /// the key's first pending write (`base(after:)`). What a push says the change `replaces`.
        var base: Replaced
        /// The changes that lost to the base that the mount showed when the key's first pending
        /// write was made (`settles(after:shown:)`): what a push says the change settles. Kept in
        /// memory only: after a restart a pending change settles none, and its conflict stays
        /// open, which lets nothing go unseen.
        var settles: [ChangeStamp] = []

        /// The base of a change that follows `previous`: a pending change keeps the base of the
        /// pending one it follows (the remote never saw that one); any other was the remote's.
        /// `baseUpdateSQL` is the same rule for the database, beside it so that the two change
        /// together.
        static func base(after previous: ChangeMeta?) -> Replaced {
            guard let previous else { return .nothing }
            return previous.syncState == .pending ? previous.base : .change(previous.stamp)
        }

        /// `base(after:)` as the `entry` table's upsert applies it (`StoreDatabase.record`): the
        /// row's old columns are `previous`. A journal replayed after a crash follows it row by
        /// row, with no read of the rows it replaces. A key new to the table keeps its base
        /// columns NULL: `.nothing`.
        static let baseUpdateSQL = """
            baseTime = CASE WHEN entry.syncState = 'pending' THEN entry.baseTime ELSE entry.modifiedAt END,
            baseCounter = CASE WHEN entry.syncState = 'pending' THEN entry.baseCounter ELSE entry.counter END,
            baseDevice = CASE WHEN entry.syncState = 'pending' THEN entry.baseDevice ELSE entry.device END
            """

        /// What a pending change that follows `previous` settles: what the pending one it follows
        /// settles, or the changes that lost to `previous` as the mount shows them (`shown`).
        static func settles(after previous: ChangeMeta?, shown: KeyConflict?) -> [ChangeStamp] {
            guard let previous else { return [] }
            if previous.syncState == .pending { return previous.settles }
            guard let shown, shown.won.stamp == previous.stamp else { return [] }
            return shown.lost.map(\.stamp)
        }
    }
}
