import KVCloud
import KVStore

/// When the remote's history is not the one this mount saw (another identity, or a history
/// that ends before the mount's position), and when the user asks for the remote's values
/// instead of the mount's. Neither ever loses a local change silently.
extension SyncEngine {
    /// On the first contact with a remote, records its identity. Another identity than the one
    /// last synced with (the remote was replaced or emptied, or the mount names another account)
    /// is never obeyed by deleting local values: the mount resynchronises. Asked on the first
    /// round and then once every `accountCheckInterval` on the engine's clock.
    func checkAccount() async throws {
        if let last = lastAccountCheck.withLock({ $0 }), clock.elapsed - last < accountCheckInterval { return }
        let identity = try await remote.identity()
        store.setReadOnly(try await remote.readOnlyReason(of: remoteStore))
        lastAccountCheck.withLock { $0 = clock.elapsed }
        let recorded = try store.setting(.remoteIdentity)
        guard recorded != identity else { return }
        if let recorded {
            try await resynchronise(identity: identity, because: "the remote's identity changed from \(recorded) to \(identity)")
        } else {
            try store.setSetting(.remoteIdentity, to: identity)
        }
    }

    /// Brings a remote whose history is not the one this mount saw (another identity, or a
    /// history that ends before the mount's cursor: emptied, replaced, restored from a backup)
    /// and the store together without losing anything: every local change the remote lacks
    /// (it has none, or an older one, for the key; see `neverAccepted`) becomes pending and is
    /// pushed again by this round, and the remote's changes are taken in by the merge rule. No
    /// local value is removed for being absent from the remote. Reported as a `remote-reset`
    /// event and in the status.
    ///
    /// `history`, when given, is the remote's whole history fetched already. Fetching it itself,
    /// it covers the gaps noted before it began, as an audit would (`auditIfDue`, which covers
    /// its own when it gives `history`).
    func resynchronise(identity: String?, because reason: String, history: WholeHistory? = nil) async throws {
        let gaps = history == nil ? auditCount.withLock { $0.gaps } : nil
        // Found by this mount's own position: its other mounts may not be able to tell.
        if identity == nil, let recorded = try store.setting(.remoteIdentity) { _ = try await remote.renewIdentity(replacing: recorded) }
        let fetched = if let history { history } else { try await fetchWholeHistory() }
        let (remoteChanges, position) = (fetched.changes, fetched.position)
        let lost = store.allChanges().filter { fetched.lacks($0) && !neverAccepted($0, by: fetched) }
        try store.markPending(lost.map(\.key))
        let changed = try await apply(Array(remoteChanges.values), mode: .merge)
        let conflicts = try store.takeConflicts(from: Array(remoteChanges.values), replacingAll: true)
        // The remote's identity as it is now: a remote that renewed it on finding another
        // history (see `ChangeLog.renewIdentity(replacing:)`) need not send this mount round again.
        let current = if let identity { identity } else { try await remote.identity() }
        try store.setSetting(.remoteIdentity, to: current)
        try record(position)
        if let gaps { noteAudited(gaps) }
        noteIncident("\(reason): \(lost.count) local changes pushed again, no local value removed",
                     keys: Set(lost.map(\.key) + changed).sorted())
        report(conflicts)
    }

    /// Whether `change` is a removal of a key the remote has no row of, and never accepted: the
    /// tombstone a refused write of a key the remote never held was rolled back to. Pushing it
    /// would store a row for a key the remote never held, or be refused again. (A refused write
    /// rolled back to the remote's own removal is that removal, and is pushed back like any.)
    private func neverAccepted(_ change: StampedChange, by history: WholeHistory) -> Bool {
        change.isTombstone && history.held[change.key] == nil && store.syncState(forKey: change.key) != .synced
    }

    /// Resynchronises once the round's push is done (from its fetch or its audit), and pushes
    /// what that made pending now.
    func resynchroniseAndPush(because reason: String, history: WholeHistory? = nil) async throws {
        try await resynchronise(identity: nil, because: reason, history: history)
        _ = try await push()  // once, not a stream of writes: no burst for the loop to space
    }

    /// Replaces the store's values by the remote's, on request (`kvsfs sync --replace-with-remote`):
    /// every key takes the remote's latest change, a key the remote does not hold is removed, and
    /// local changes the remote does not have, pending ones included, are discarded. The only way
    /// kvsfs discards local changes for a remote's; reported as a `remote-reset` event.
    public func replaceWithRemote() async throws {
        remote.discardPrefetched()
        try await roundLock.withLock {
            let history = try await fetchWholeHistory()
            let (remoteChanges, position) = (history.changes, history.position)
            let local = store.allChanges()
            let removals = local.filter { remoteChanges[$0.key] == nil && !$0.isTombstone }.map { StampedChange.tombstone($0.key, stamp: $0.stamp) }
            // A deletion of a key the remote has no row of (lost, or never pushed) goes too: kept,
            // the next audit would take it for lost and push it again.
            let strayRemovals = local.filter { $0.isTombstone && history.held[$0.key] == nil }
            let held = Dictionary(uniqueKeysWithValues: local.map { ($0.key, $0) })
            let replacements = remoteChanges.values.filter { held[$0.key] != $0 }
            let changed = try await apply(replacements + removals, mode: .replace)
            // The store then holds nothing for a removed key, as the remote: its tombstone bears
            // the stamp of the value it removed, and would pass that value over should it come
            // back (pushed again by a mount that still has it). Forgotten before anything else
            // can fail, so that no later audit finds such a tombstone and pushes it.
            try store.forget(removals + strayRemovals)
            let conflicts = try store.takeConflicts(from: Array(remoteChanges.values), replacingAll: true)
            try store.discardUnsentLosses()
            try store.setSetting(.remoteIdentity, to: try await remote.identity())
            try record(position)
            noteIncident("replaced by the remote's values on request: \(changed.count) keys changed, \(removals.count) of them removed",
                         keys: changed.sorted())
            report(conflicts)
        }
    }
}
