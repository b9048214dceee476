import Foundation
import GRDB
import Synchronization

/// What sync needs of the store: each key's latest change and where it stands with the
/// remote, remote changes taken in by the merge rule, and the store made read-only.
extension KeyValueStore {
    /// Calls `observer` after every committed local change (never for external ones), outside
    /// the store's lock.
    public func observeLocalChanges(_ observer: @escaping @Sendable () -> Void) {
        let box = Observer(observer)
        changeObserver.withLock { $0 = box }
    }

    /// Refuses local changes from now on (nil: accepts them again), for a device the remote
    /// lets read only. External changes still apply.
    public func setReadOnly(_ reason: String?) {
        readOnlyReason.withLock { $0 = reason }
    }

    /// Why local changes are refused, if they are.
    public var readOnly: String? { readOnlyReason.withLock { $0 } }

    /// Where `key`'s latest change stands with the remote; nil for a key never written.
    public func syncState(forKey key: String) -> SyncState? {
        state.withLock { $0.sync.changes[key]?.syncState }
    }

    /// How many keys have changes the remote has not yet accepted.
    public var pendingCount: Int {
        state.withLock { $0.sync.pendingKeys.count }
    }

    /// The latest change of every key not yet accepted by the remote: one per key, so that a
    /// burst of writes to a key travels as its last state. Each says what it replaces. Costs
    /// the pending keys, not all keys.
    public func pendingChanges() -> [StampedChange] {
        state.withLock { state in Self.pendingChanges(state).sorted(by: Self.pushOrder) }
    }

    /// Oldest first; changes of one stamp (taken in from a remote, then made pending again) by
    /// key, so that the order never depends on how the index is laid out.
    static func pushOrder(_ a: StampedChange, _ b: StampedChange) -> Bool {
        (a.stamp, a.key) < (b.stamp, b.key)
    }

    /// Pending changes a newer remote change replaced before they were pushed (see `merge`),
    /// oldest first.
    public func unsentLosses() -> [StampedChange] {
        state.withLock { $0.sync.unsentLosses }
    }

    /// What a push sends: the pending changes and the unsent losses, oldest first.
    public func changesToPush() -> [StampedChange] {
        state.withLock { state in (Self.pendingChanges(state) + state.sync.unsentLosses).sorted(by: Self.pushOrder) }
    }

    private static func pendingChanges(_ state: State) -> [StampedChange] {
        state.sync.pendingKeys.compactMap { key in
            state.sync.changes[key].map { meta in
                var change = stampedChange(key, meta.stamp, state.values[key])
                change.replaces = meta.base
                change.settles = meta.settles
                return change
            }
        }
    }

    /// Every key's latest change, deleted keys included, by key.
    public func allChanges() -> [StampedChange] {
        state.withLock { state in
            state.sync.changes.map { key, meta in Self.stampedChange(key, meta.stamp, state.values[key]) }
                .sorted { $0.key < $1.key }
        }
    }

    /// Every key's latest change that the remote accepted (`SyncState.synced`), deleted keys
    /// included, by key.
    public func syncedChanges() -> [StampedChange] {
        state.withLock { state in
            state.sync.changes.compactMap { key, meta in
                meta.syncState == .synced ? Self.stampedChange(key, meta.stamp, state.values[key]) : nil
            }.sorted { $0.key < $1.key }
        }
    }

    /// The latest change of `key`, a tombstone if it was deleted; nil for a key never written.
    public func allChanges(forKey key: String) -> StampedChange? {
        state.withLock { state in state.sync.changes[key].map { Self.stampedChange(key, $0.stamp, state.values[key]) } }
    }

    /// Whether `change` would replace what the store has under the merge rule.
    public func accepts(_ change: StampedChange) -> Bool {
        state.withLock { state in state.sync.changes[change.key].map { change.stamp > $0.stamp } ?? true }
    }

    /// Marks changes the remote accepted as synced, unless the key changed again since.
    public func markPushed(_ changes: [StampedChange]) throws(StoreError) {
        try recordPush(accepted: changes)
    }

    /// Forgets tombstones of keys the remote holds no row of (one it accepted without storing:
    /// a server before 0.1 stored none for a key it did not hold; or one a replacement by the
    /// remote's values drops), unless the key changed again since: the store then holds no row
    /// for the key, as the remote.
    public func forget(_ tombstones: [StampedChange]) throws(StoreError) {
        try recordPush(notStored: tombstones)
    }

    /// Records what a push did, in one transaction: the changes the remote `accepted` become
    /// synced and the tombstones it accepted but did not store are forgotten (as `markPushed`
    /// and `forget` do), and `position`, when given, is saved with them as the sync position
    /// (`StoreSetting.syncPosition`) the push moved: all of it is stored, or none, and the
    /// index changes only once it is.
    public func recordPush(accepted: [StampedChange] = [], notStored: [StampedChange] = [], refused: [StampedChange] = [],
                           position: String? = nil) throws(StoreError) {
        let setting = position.map { (name: StoreSetting<String>.syncPosition.name, value: $0) }
        try state.withLock { (state: inout State) throws(StoreError) in
            let synced = accepted.filter { state.sync.changes[$0.key]?.stamp == $0.stamp && state.sync.changes[$0.key]?.syncState != .synced }.map(\.key)
            let forgotten = notStored.filter {
                $0.isTombstone && state.values[$0.key] == nil && state.sync.changes[$0.key]?.stamp == $0.stamp
            }.map(\.key)
            // An unsent loss the remote answered for (accepted: kept as a conflict or passed over;
            // refused: the remote said why) has been pushed.
            let answered = Set((accepted + refused).map(ChangeName.init))
            let pushedLosses = state.sync.unsentLosses.filter { answered.contains(ChangeName($0)) }
            guard !synced.isEmpty || !forgotten.isEmpty || !pushedLosses.isEmpty || setting != nil else { return }  // take no transaction for nothing
            try write(&state) { db in
                try Self.deleteUnsentLosses(pushedLosses, db)
                try Self.saveSyncState(.synced, for: synced, db)
                if !forgotten.isEmpty {
                    let delete = try db.cachedStatement(sql: "DELETE FROM entry WHERE key = ? AND value IS NULL")
                    for key in forgotten {
                        let row = DirectBinding(delete)
                        try row.bind(1, key)
                        try row.run(in: db)
                    }
                }
                if let setting { try Self.saveSetting(setting.name, setting.value, db) }
            }
            state.sync.unsentLosses.removeAll { answered.contains(ChangeName($0)) }
            for key in synced { state.sync.setSyncState(.synced, of: key) }
            for key in forgotten { state.sync.setChange(key, nil) }
            if let setting { state.settings[setting.name] = .some(setting.value) }
        }
    }

    /// Makes the latest change of each of `keys` pending again: the remote lost it and it must
    /// be pushed again.
    /// What every pending change replaced, these and those pending already, unsent losses
    /// included, is no longer known (the history that gave it is gone): no push of them is
    /// taken for a conflict.
    public func markPending(_ keys: [String]) throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            let keys = keys.filter { state.sync.changes[$0] != nil && state.sync.changes[$0]?.syncState != .pending }
            let pending = state.sync.pendingKeys.union(keys)
            guard !pending.isEmpty || !state.sync.unsentLosses.isEmpty else { return }
            var losses = state.sync.unsentLosses
            for index in losses.indices { losses[index].replaces = .unknown }
            try write(&state) { db in
                try Self.saveSyncState(.pending, for: keys, db)
                for key in pending { try Self.saveBase(nil, of: key, db) }
                try Self.saveUnsentLosses(losses, db)
            }
            for key in keys { state.sync.setSyncState(.pending, of: key) }
            for key in pending { state.sync.setBase(.unknown, of: key) }
            state.sync.unsentLosses = losses
        }
    }

    /// Drops every unsent loss: the store now follows the remote's values, on request.
    public func discardUnsentLosses() throws(StoreError) {
        try state.withLock { (state: inout State) throws(StoreError) in
            guard !state.sync.unsentLosses.isEmpty else { return }
            let losses = state.sync.unsentLosses
            try write(&state) { db in try Self.deleteUnsentLosses(losses, db) }
            state.sync.unsentLosses = []
        }
    }

    func markSynced(_ keys: [String], in state: inout State) throws(StoreError) {
        try setSyncState(.synced, for: keys, in: &state)
    }

    /// Sets where the latest change of each of `keys` stands with the remote, in the database
    /// (after the journal) and in the index.
    func setSyncState(_ syncState: SyncState, for keys: [String], in state: inout State) throws(StoreError) {
        guard !keys.isEmpty else { return }
        try write(&state) { db in try Self.saveSyncState(syncState, for: keys, db) }
        for key in keys { state.sync.setSyncState(syncState, of: key) }
    }

    static func saveSyncState(_ syncState: SyncState, for keys: [String], _ db: Database) throws {
        guard !keys.isEmpty else { return }
        let update = try db.cachedStatement(sql: "UPDATE entry SET syncState = ? WHERE key = ?")
        for key in keys {
            let row = DirectBinding(update)
            try row.bind(1, syncState.rawValue)
            try row.bind(2, key)
            try row.run(in: db)
        }
    }

    /// Takes in changes made elsewhere. With `.merge`, a change replaces the key's value only
    /// when its stamp is greater (an equal stamp is the remote confirming the local change),
    /// and a pending local change it replaces becomes an unsent loss, still to be pushed; the
    /// other modes replace unconditionally. External changes are not checked against the
    /// local limits: the remote enforces the store's quotas, and replicas must converge.
    /// Returns the keys whose visible value changed.
    @discardableResult
    public func applyExternal(_ changes: [StampedChange], mode: ExternalApplyMode = .merge) throws(StoreError) -> [String] {
        try state.withLock { (state: inout State) throws(StoreError) -> [String] in
            var rows = [(key: String, entry: Entry?, stamp: ChangeStamp, syncState: SyncState)]()
            var confirmed = [StampedChange]()
            var losses = [StampedChange]()
            var latest = [String: StampedChange]()
            for change in changes where latest[change.key].map({ change.stamp > $0.stamp }) ?? true {
                latest[change.key] = change
            }
            for change in latest.values.sorted(by: { $0.stamp < $1.stamp }) {
                let current = state.sync.changes[change.key]
                if mode == .merge, let current, change.stamp <= current.stamp {
                    if change.stamp == current.stamp, current.syncState == .pending { confirmed.append(change) }
                    continue
                }
                if mode == .merge, let current, current.syncState == .pending {
                    var loss = Self.stampedChange(change.key, current.stamp, state.values[change.key])
                    loss.replaces = current.base
                    losses.append(loss)
                }
                let entry = change.value.map {
                    Entry(key: change.key, xml: [UInt8]($0), type: change.type ?? .string, modifiedAt: change.stamp.date)
                }
                rows.append((change.key, entry, change.stamp, mode == .rollback ? .refused : .synced))
            }
            let changed = rows.filter { state.values[$0.key]?.xml != $0.entry?.xml }.map(\.key)
            // Kept before the rows that replace them are committed: a crash in between pushes
            // a loss still pending, twice at worst, which is harmless.
            if !losses.isEmpty {
                try write(&state) { db in try Self.saveUnsentLosses(losses, db) }
                state.sync.unsentLosses += losses
            }
            try commit(rows, in: &state)
            let physical = milliseconds(now())
            for row in rows { state.clock.observe(row.stamp, physical: physical) }
            try markSynced(confirmed.map(\.key), in: &state)
            return changed
        }
    }

    static func stampedChange(_ key: String, _ stamp: ChangeStamp, _ entry: Entry?) -> StampedChange {
        StampedChange(key: key, value: entry.map { Data($0.xml) }, type: entry?.type, stamp: stamp)
    }
}
