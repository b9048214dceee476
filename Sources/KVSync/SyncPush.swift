import KVCloud
import KVStore

/// A round's push: what is pending goes to the remote with the mount's history mark; what the
/// remote refuses is rolled back to what it holds, unless it could not read its own row for the
/// key: then the change stays pending.
extension SyncEngine {
    /// Pushes `pending` with the mount's history mark, and records what became of it.
    func send(_ pending: [StampedChange]) async throws -> PushOutcome {
        let known = try storedPosition()
        let outcome = answers(to: pending, in: try await remote.push(try named(pending), to: remoteStore, mark: known?.mark))
        // What the push stored is known to be in the remote's history from now on; and when
        // nobody else pushed since our last fetch, it is all ours: no need to fetch it. Before
        // the first fetch there is no position yet: that fetch is the initial sync.
        var next: SyncPosition?
        if outcome.mark != nil, let known, known.after(outcome) != known { next = known.after(outcome) }
        // The marks and the position in one local transaction, taken only once the remote has
        // answered: a push that fails leaves every change pending and the position as it was.
        // A change the remote could not judge was not answered for: an unsent loss among them
        // stays unsent.
        try store.recordPush(accepted: outcome.accepted, notStored: outcome.notStored,
                             refused: outcome.refused.filter { !$0.rowUnreadable }.map(\.change),
                             position: try next.map { try $0.setting })
        if let next { knownPosition.update { $0 = next } }
        return outcome
    }

    /// `changes`, this device's own each with its name (`DeviceName`), for the remote to keep
    /// beside its id.
    public func named(_ changes: [StampedChange]) throws -> [StampedChange] {
        guard let name = try store.deviceName else { return changes }
        return changes.map { change in
            var named = change
            if change.stamp.device == store.deviceID { named.deviceName = name }
            return named
        }
    }

    /// Returns how many changes it pushed.
    func push() async throws -> Int {
        guard store.readOnly == nil else { return 0 }
        var pending = store.changesToPush()
        guard !pending.isEmpty else { return 0 }
        let outcome: PushOutcome
        do {
            outcome = try await send(pending)
        } catch let error as CloudError where error.isHistoryMismatch {
            // Found before anything was pushed into the other history: take it in first.
            try await resynchronise(identity: nil, because: "the remote's history is not the one this mount saw: \(error)")
            pending = store.changesToPush()
            outcome = try await send(pending)
        }
        reportDeferred(outcome.refused.filter(\.rowUnreadable))
        let refused = outcome.refused.filter { !$0.rowUnreadable }
        guard !refused.isEmpty else { return pending.count }
        // Roll each refused change back to what the remote holds (or to nothing), if it is still
        // its key's latest: an unsent loss the remote refused to keep (a quota) was replaced
        // already, and must not take a later local write with it.
        let rollbacks = refused.filter { store.allChanges(forKey: $0.change.key)?.stamp == $0.change.stamp }
            .map { $0.current ?? .tombstone($0.change.key, stamp: $0.change.stamp) }
        _ = try await apply(rollbacks, mode: .rollback)
        onEvent(SyncEvent(reason: .quotaViolation, keys: refused.map(\.change.key).sorted(), message: Self.reasons(refused)))
        return pending.count
    }

    /// What of a remote's answer to a push of `pushed` counts. Each change it names must be one
    /// pushed (its key and stamp): any other is no answer, reported as a refused remote change
    /// (named in the message only: its key is the remote's word, not one of the mount's) and
    /// passed over, so that nothing a remote makes up touches the store. A refusal's `current`,
    /// which the change is rolled back to, must be a change of the same key that meets the
    /// change rule, and is taken in the form the store keeps; when it is not, the remote holds
    /// nothing for the key that the mount could take, and the refusal counts as one the remote
    /// could not judge (`rowUnreadable`): the change stays pending and is reported once, as when
    /// the remote cannot read its own row.
    func answers(to pushed: [StampedChange], in outcome: PushOutcome) -> PushOutcome {
        let sent = Set(pushed.map(ChangeName.init))
        var counted = outcome
        var unfounded: [String] = []
        counted.accepted = outcome.accepted.filter { sent.contains(ChangeName($0)) }
        counted.notStored = outcome.notStored.filter { sent.contains(ChangeName($0)) }
        unfounded += (outcome.accepted + outcome.notStored).filter { !sent.contains(ChangeName($0)) }.map(\.key)
        counted.refused = outcome.refused.compactMap { refusal in
            guard sent.contains(ChangeName(refusal.change)) else {
                unfounded.append(refusal.change.key)
                return nil
            }
            guard let current = refusal.current else { return refusal }
            let admission = ChangeAdmission.admit([current], policy: .fetched)
            var counted = refusal
            if let admitted = admission.changes.first, admitted.key == KeyName.canonical(refusal.change.key) {
                counted.current = admitted
            } else {
                let why = admission.refused.first.map(\.reason) ?? "it is a change of another key"
                counted.current = nil
                counted.rowUnreadable = true
                counted.reason = "\(refusal.reason.prefix(Self.reasonLength)); but what the remote holds for the key is "
                    + "no change this mount can take: \(why)"
            }
            return counted
        }
        if !unfounded.isEmpty {
            let named = unfounded.prefix(Self.namedAtMost).map { String($0.debugDescription.prefix(Self.reasonLength)) }
            onEvent(SyncEvent(reason: .refusedRemoteChange, keys: [],
                              message: "the remote's answer to a push names \(unfounded.count) changes that were not pushed: "
                                  + named.joined(separator: ", ") + (unfounded.count > Self.namedAtMost ? ", ..." : "")))
        }
        return counted
    }

    /// Reports the changes the remote could not judge (its row for the key cannot
    /// be read) that the last push did not already report: each is pushed again every round
    /// until the row is mended, and said once, not once a round (once more after a restart).
    /// Each names a change pushed: `answers` passed over any other.
    private func reportDeferred(_ deferred: [Refusal]) {
        // Most pushes have none: no work then but forgetting the last push's.
        guard !deferred.isEmpty else { return deferredReported.withLock { $0.removeAll() } }
        let new = deferredReported.withLock { reported in
            let new = deferred.filter { !reported.contains(ChangeName($0.change)) }
            reported = Set(deferred.map { ChangeName($0.change) })
            return new
        }
        guard !new.isEmpty else { return }
        onEvent(SyncEvent(reason: .pushDeferred, keys: new.map(\.change.key).sorted(), message: Self.reasons(new)))
    }

    /// What the remote said of each refused change, each key quoted (a key may hold any
    /// character) and each reason cut to `reasonLength` characters: the message goes into the
    /// event log and the daemon's log, whatever a remote answers.
    private static func reasons(_ refusals: [Refusal]) -> String {
        refusals.map { "\($0.change.key.debugDescription): \(String($0.reason.prefix(reasonLength)))" }.joined(separator: "; ")
    }

    static let reasonLength = 1000
    /// The most answers one event names in its message.
    static let namedAtMost = 20
}

