import Foundation

/// Changes made on a condition the remote judges (`ChangeCondition`): `kvsfs set --if-version`
/// and `kvsfs import --if-unchanged-since`. Checked against the store's rules and stamped by
/// its clock here, but not committed: a local write is pending until a later push, and the
/// writer must hear the remote's verdict. The mount pushes them itself; an accepted change is
/// taken in as the remote's (`applyExternal`), a refused one leaves nothing behind.
extension KeyValueStore {
    /// `edits` (a key's new value, or nil to remove it) as changes to push on `condition`.
    /// Refused, changing nothing, when the store is read-only, when a value breaks the store's
    /// rules (a key name, a value's size, the schema) or the result its quotas, or when a key
    /// has a local change the remote has not taken yet (`StoreError.unpushedChange`): the
    /// condition would be judged against a version this mount has replaced already.
    ///
    /// `remoteStamps`: the latest stamps the remote holds of the keys, when known. Each change
    /// is stamped after them and after the key's local change, so that, stored, it replaces
    /// them on every replica by the merge rule.
    public func conditionalChanges(_ edits: [String: PropertyListValue?], condition: ChangeCondition,
                                   after remoteStamps: [String: ChangeStamp] = [:]) throws(StoreError) -> [StampedChange] {
        if let reason = readOnlyReason.withLock({ $0 }) { throw .readOnly(reason) }
        return try state.withLock { (state: inout State) throws(StoreError) -> [StampedChange] in
            let ledger = QuotaLedger(limits: state.limits)
            let unstamped = Date(timeIntervalSince1970: 0)
            var staged = [String: Entry?]()
            for (key, value) in edits {
                guard let value else {
                    staged[key] = .some(nil)
                    continue
                }
                staged[key] = .some(try ledger.checkedEntry(key, value, modifiedAt: unstamped))
                try state.schema.rules?.check(key: key, value: value)
            }
            let usage = staged.reduce(state.usage) { usage, edit in usage.replacing(state.values[edit.key], with: edit.value) }
            let changes = StagedChanges(edits: staged, usage: usage)
            try ledger.checkResult(before: state.usage, after: changes.usage, added: changes.addedBytes)
            return try stampUnsent(changes, condition: condition, after: remoteStamps, in: &state)
        }
    }

    /// `staged`'s edits as changes on `condition`, stamped by the store's clock (which moves on,
    /// so that no later stamp repeats one of them) but not committed. Each says what it
    /// replaces and settles, as a local write would (`ChangeMeta`).
    func stampUnsent(_ staged: StagedChanges, condition: ChangeCondition, after remoteStamps: [String: ChangeStamp],
                     in state: inout State) throws(StoreError) -> [StampedChange] {
        let keys = staged.edits.keys.sorted()
        if let pending = keys.first(where: { state.sync.pendingKeys.contains($0) }) { throw .unpushedChange(pending) }
        var clock = state.clock
        let physical = milliseconds(now())
        let changes = keys.map { key in
            let previous = state.sync.changes[key]
            let seen = [previous?.stamp, remoteStamps[key]].compactMap { $0 }.max()
            let stamp = clock.stamp(physical: physical, after: seen)
            let entry = staged.edits[key]!
            return StampedChange(key: key, value: entry.map { Data($0.xml) }, type: entry?.type, stamp: stamp,
                                 replaces: ChangeMeta.base(after: previous),
                                 settles: ChangeMeta.settles(after: previous, shown: state.sync.conflicts[key]), condition: condition)
        }
        state.clock = clock
        return changes
    }
}
