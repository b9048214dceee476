import KVCloud
import KVStore

/// A round's fetch: what the remote accepted since the mount's position is checked against
/// the change rule, applied, and only then recorded as taken in.
extension SyncEngine {
    /// How many keys' changes a fetch gathers, page after page, before it applies them.
    /// Gathered pages are applied as one transaction, so that a push the remote took in
    /// whole (an import) is taken in whole here too, however the remote pages it, unless
    /// more keys than this changed on the remote since the last fetch.
    static let keysPerApply = 20_000

    /// The most changes one fetch asks for.
    static let batchLimit = 4096

    /// One page of the remote's changes after `cursor`, checked against `mark`.
    func fetch(after cursor: Int64, mark: HistoryMark?) async throws -> ChangeBatch {
        try await remote.changes(in: remoteStore, after: cursor, mark: mark, limit: Self.batchLimit)
    }

    /// Fetches and applies what the remote accepted since the cursor. The very first fetch
    /// into this store is the initial sync. Returns how many changes made elsewhere it took in.
    func pull() async throws -> Int {
        let stored = try storedPosition()
        let reason: SyncEvent.Reason = stored == nil ? .initialSync : .serverChange
        var position = stored ?? .start
        var recorded = stored != nil
        var fetched = position
        var newer = [String: StampedChange]()
        // Every change taken in, in the remote's order: each key's last says its open conflict.
        var given = [StampedChange]()
        var takenIn = 0
        while true {
            let batch: ChangeBatch
            do {
                batch = try await fetch(after: fetched.cursor, mark: fetched.mark)
            } catch let error as CloudError where error.isHistoryMismatch {
                // Found after this round's push: push what the remote lost now. Once, not a
                // stream of changes: nothing for the loop to space.
                try await resynchroniseAndPush(because: "the remote's history is not the one this mount saw: \(error)")
                return 0
            }
            // Taken before the batch's changes, so that they are judged by the schema they came under.
            try await takeSchema(seen: batch.schemaVersion)
            var confirmations = [StampedChange]()
            let admitted = admit(batch).changes
            try store.keepDeviceNames(batch.namedDevices)
            given += admitted
            for change in admitted {
                if store.accepts(change) {
                    if newer[change.key].map({ change.stamp > $0.stamp }) ?? true { newer[change.key] = change }
                } else {
                    confirmations.append(change)
                }
            }
            // The remote confirming this mount's own changes: taken in at once, as taking one
            // in again changes nothing.
            if !confirmations.isEmpty { try store.applyExternal(confirmations) }
            fetched = fetched.after(batch)
            guard batch.complete || newer.count >= Self.keysPerApply else { continue }
            // A failure leaves the cursor where it was: the round fails, and the next one
            // (after backoff) fetches and applies these changes again.
            let changed = newer.isEmpty ? [] : try await apply(newer.values.sorted { $0.stamp < $1.stamp }, mode: .merge)
            takenIn += newer.count
            let conflicts = try store.takeConflicts(from: given)
            given.removeAll(keepingCapacity: true)
            if fetched != position || !recorded {
                try record(fetched)
                recorded = true
            }
            position = fetched
            knownPosition.update { $0 = position }
            if !changed.isEmpty { onEvent(SyncEvent(reason: reason, keys: changed.sorted())) }
            reportSchemaBreaches(in: newer.values.filter { changed.contains($0.key) })
            report(conflicts)
            if batch.complete { break }
            newer.removeAll(keepingCapacity: true)
        }
        return takenIn
    }

    /// Tells what taking in conflicts did: a `conflict` event for the keys with a new one, and
    /// a `refused-remote-change` event for those not kept, past the store's total quota.
    func report(_ intake: ConflictIntake) {
        if !intake.opened.isEmpty { onEvent(Self.conflictEvent(intake.opened)) }
        if !intake.notKept.isEmpty {
            onEvent(SyncEvent(reason: .refusedRemoteChange, keys: intake.notKept.sorted(),
                              message: "a conflict the remote gave was not kept: the changes that lost would pass the store's total quota"))
        }
    }

    /// The event that says `keys` have a new conflict: a change lost to a concurrent one and
    /// is kept (`kvsfs conflicts`).
    static func conflictEvent(_ keys: [String]) -> SyncEvent {
        SyncEvent(reason: .conflict, keys: keys,
                  message: "a change lost to a concurrent change and is kept: see kvsfs conflicts")
    }

    /// The remote's whole history, fetched from the start.
    struct WholeHistory {
        /// Every key's latest change that meets the change rule.
        var changes: [String: StampedChange] = [:]
        /// Every key's latest stamp, of every row the mount could read (those the change rule
        /// refuses too, by their key in NFC): what the remote holds, not what this mount would
        /// take in.
        var held: [String: ChangeStamp] = [:]
        /// Whether a row could not be read at all: its key is not known.
        var unreadable = false
        /// Where the fetch leaves the mount.
        var position = SyncPosition.start

        /// Whether the remote lacks `change`: it holds no row of the key, or an older change of
        /// it. In one history a key's row only moves forward, and the greater stamp wins: a
        /// change the remote accepted is never lacking.
        ///
        /// A removal too: a remote holds the tombstone of every removal it accepted (one that
        /// did not store it said so, and the mount forgot it), so no row is a removal lost. Were
        /// it taken for the key being absent, a mount that still holds the value would push it
        /// back, and the removal this mount acknowledged would be undone on every mount.
        func lacks(_ change: StampedChange) -> Bool {
            guard let stamp = held[change.key] else { return true }
            return stamp < change.stamp
        }
    }

    /// The remote's whole history, fetched from the start. `mark`, when given, goes with every
    /// request: a remote whose history it does not fit answers a history mismatch, as to a
    /// fetch (a server renews the account's generation on it).
    func fetchWholeHistory(checking mark: HistoryMark? = nil) async throws -> WholeHistory {
        var history = WholeHistory(position: SyncPosition(cursor: 0, mark: mark))
        while true {
            let batch = try await fetch(after: history.position.cursor, mark: history.position.mark)
            let admission = admit(batch)
            try store.keepDeviceNames(batch.namedDevices)
            // A key's change given again later (with its conflict) is the one the remote holds.
            for change in admission.changes where history.changes[change.key].map({ change.stamp >= $0.stamp }) ?? true {
                history.changes[change.key] = change
            }
            let rows = admission.changes.map { ($0.key, $0.stamp) }
                + admission.refused.map { (KeyName.canonical($0.change.key), $0.change.stamp) }
            for (key, stamp) in rows where history.held[key].map({ stamp > $0 }) ?? true {
                history.held[key] = stamp
            }
            history.unreadable = history.unreadable || !batch.unreadable.isEmpty
            history.position = history.position.after(batch)
            if batch.complete { return history }
        }
    }

    /// Applies through the applier; a failure is reported (an `apply-failed` event) and thrown,
    /// so that the round ends before anything records the changes as taken in.
    func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        do {
            return try await applier.apply(changes, mode: mode)
        } catch {
            onEvent(SyncEvent(reason: .applyFailed, keys: changes.map(\.key).sorted(), message: String(describing: error)))
            throw error
        }
    }

    /// A fetched batch's changes as the store keeps those that meet the change rule. Each one
    /// that does not is reported (an event with the reason) and passed over: the remote holds
    /// it as it is, so fetching it again would give the same.
    private func admit(_ batch: ChangeBatch) -> Admission {
        let admission = ChangeAdmission.admit(batch.changes, policy: .fetched)
        if !admission.refused.isEmpty || !batch.unreadable.isEmpty || !admission.droppedConflicts.isEmpty {
            let reasons = admission.refused.map { "\($0.change.key.debugDescription): \($0.reason)" } + batch.unreadable
                + admission.droppedConflicts
            onEvent(SyncEvent(reason: .refusedRemoteChange, keys: admission.refused.map(\.change.key).sorted(),
                              message: reasons.joined(separator: "; ")))
        }
        return admission
    }
}
