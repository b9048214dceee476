import KVCloud
import KVStore
import Synchronization

/// The audit of the remote after a gap in the mount's contact with it (the daemon started;
/// the remote could not be reached, failed a request, or ended the event stream): one fetch of
/// the remote's whole history per gap, none otherwise.
///
/// It finds out the restore that history marks let through (`HistoryMark`): a remote rewound
/// and since written past a mount's mark, under the mark's own key. A restore takes the remote
/// away from the mounts connected to it, so each meets a gap.
///
/// Invariant: a change the mount holds as synced was accepted by the remote, and in one
/// history the remote never lacks it (`WholeHistory.lacks`); a remote that does is another
/// history.
extension SyncEngine {
    /// Gaps noted, and how many of them an audit or a resynchronisation has covered.
    struct AuditCount: Sendable {
        var gaps = 1  // the daemon's start is one
        var audited = 0
    }

    /// Notes a gap when `error` is the remote's failure (a server whose storage is down answers
    /// 503, which is `busy`); not a refused token, nor another history, which the round
    /// resynchronises from.
    func noteGap(after error: any Error) {
        guard let error = error as? CloudError else { return }
        switch error {
        case .unavailable, .unreachable, .notProtocol, .busy, .refused: auditCount.withLock { $0.gaps += 1 }
        default: break
        }
    }

    /// Marks the gaps up to `gaps` covered: the mount has compared its store with the remote's
    /// whole history since they were noted.
    func noteAudited(_ gaps: Int) {
        auditCount.withLock { $0.audited = max($0.audited, gaps) }
    }

    /// Audits the remote when a gap was noted since the last audit; a gap noted while it runs is
    /// left for the next round. A mount that holds nothing as synced has nothing to compare:
    /// its gaps are covered at once.
    func auditIfDue() async throws {
        let gaps = auditCount.withLock { $0.gaps > $0.audited ? $0.gaps : nil }
        guard let gaps else { return }
        // Taken before the fetch: the remote had accepted each of them before the fetch began
        // (`pushNow` marks changes synced outside the round).
        let synced = store.syncedChanges()
        if !synced.isEmpty { try await audit(synced) }
        noteAudited(gaps)
    }

    /// Compares `synced` with the remote's whole history, fetched with the mount's mark: another
    /// history (the mark does not fit, the history ends before the mount's cursor, or it lacks
    /// one of `synced`) sends the mount through a resynchronisation, and what the remote lost
    /// is pushed again; otherwise the mount takes in every change by the merge rule, and its
    /// position moves to the history's end (in one history, what its next fetches would bring).
    private func audit(_ synced: [StampedChange]) async throws {
        let stored = try storedPosition()
        // A batch the event stream delivered is not the history from its start.
        remote.discardPrefetched()
        let history: WholeHistory
        do {
            history = try await fetchWholeHistory(checking: stored?.mark)
        } catch let error as CloudError where error.isHistoryMismatch {
            return try await resynchroniseAndPush(because: "the remote's history is not the one this mount saw: \(error)")
        }
        if let stored, stored.cursor > history.position.cursor {
            return try await resynchroniseAndPush(because: "the remote's history ends at \(history.position.cursor), before this mount's cursor \(stored.cursor)",
                                                  history: history)
        }
        // A row that could not be read may be a key's the history seems to lack.
        let lost = synced.filter { history.lacks($0) && (history.held[$0.key] != nil || !history.unreadable) }
        guard lost.isEmpty else {
            let keys = lost.prefix(3).map(\.key.debugDescription).joined(separator: ", ") + (lost.count > 3 ? ", ..." : "")
            return try await resynchroniseAndPush(because: "the remote lost changes it had accepted: \(keys) (\(lost.count) in all)",
                                                  history: history)
        }
        let remoteChanges = Array(history.changes.values)
        let changed = try await apply(remoteChanges, mode: .merge)
        let conflicts = try store.takeConflicts(from: remoteChanges)
        try record(history.position)
        if !changed.isEmpty { onEvent(SyncEvent(reason: stored == nil ? .initialSync : .serverChange, keys: changed.sorted())) }
        report(conflicts)
    }
}
