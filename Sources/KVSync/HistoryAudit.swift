import KVCloud
import KVStore
import Synchronization

/// The audit of the remote after a gap in the mount's contact with it (the daemon started,
/// the remote could not be reached or answered an error, the event stream ended): the round
/// checks that the remote still holds every change this mount holds as synced, and takes in
/// everything the remote holds. One fetch of the remote's whole history per gap, none
/// otherwise.
///
/// It finds out the restore history marks cannot (`HistoryMark`): a remote rewound and since
/// written past a mount's mark, under the mark's own key. No request of that mount is refused,
/// so without the audit the changes accepted between the backup and the restore stay lost,
/// and those others wrote into the new history before the mount's cursor never reach it. A
/// restore takes the remote away from the mounts connected to it, and a mount started later
/// starts with a gap.
extension SyncEngine {
    /// Gaps noted, and how many of them an audit has covered.
    struct AuditCount: Sendable {
        var gaps = 1  // the daemon's start is one
        var audited = 0
    }

    /// Notes a gap when `error` came from talking to the remote (not from the local store):
    /// the next round audits the remote.
    func noteGap(after error: any Error) {
        guard let error = error as? CloudError else { return }
        switch error {
        case .unavailable, .busy, .refused: auditCount.withLock { $0.gaps += 1 }
        default: break
        }
    }

    /// When a gap has been noted since the last audit and the mount holds changes as synced:
    /// fetches the remote's whole history. When the remote lacks one of those changes (no row
    /// for a value, or an older change: in one history a key's row only moves forward, and
    /// the greater stamp wins), the mount resynchronises and pushes what the remote lost.
    /// Otherwise it takes in every change by the merge rule and moves its position to the
    /// history's end: in one history, what its next fetches would bring. A gap noted while it
    /// runs is left for the next round.
    func auditIfDue() async throws {
        let gaps = auditCount.withLock { $0.gaps > $0.audited ? $0.gaps : nil }
        guard let gaps else { return }
        // Taken before the fetch: the remote had accepted each of them before the fetch began
        // (`pushNow` marks changes synced outside the round).
        let synced = store.syncedChanges()
        if !synced.isEmpty { try await audit(synced) }
        auditCount.withLock { $0.audited = max($0.audited, gaps) }
    }

    private func audit(_ synced: [StampedChange]) async throws {
        let reason: SyncEvent.Reason = try storedPosition() == nil ? .initialSync : .serverChange
        // A batch the event stream delivered is not the history from its start.
        remote.discardPrefetched()
        let history = try await fetchWholeHistory()
        let lost = synced.filter { local in
            guard let stamp = history.held[local.key] else {
                // A row that could not be read may be this key's.
                return !local.isTombstone && !history.unreadable
            }
            return stamp < local.stamp
        }
        if lost.isEmpty {
            let remoteChanges = Array(history.changes.values)
            let changed = try await apply(remoteChanges, mode: .merge)
            let conflicts = try store.takeConflicts(from: remoteChanges)
            try record(history.position)
            if !changed.isEmpty { onEvent(SyncEvent(reason: reason, keys: changed.sorted())) }
            if !conflicts.isEmpty { onEvent(Self.conflictEvent(conflicts)) }
        } else {
            let keys = lost.prefix(3).map(\.key.debugDescription).joined(separator: ", ") + (lost.count > 3 ? ", ..." : "")
            try await resynchronise(identity: nil, because: "the remote lost changes it had accepted: \(keys) (\(lost.count) in all)",
                                    history: history)
            try await push()
        }
    }
}
