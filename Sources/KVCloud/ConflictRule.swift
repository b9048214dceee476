import KVStore

/// When two changes of a key conflict, as the remote decides it for each change pushed to it.
///
/// Two changes are concurrent when neither writer held the other's change when it wrote.
/// The remote holds one change per key, and every change it accepted before came through it:
/// so a pushed change is concurrent with the key's change at the remote exactly when its
/// writer did not hold that one. Its writer held it when the change `replaces` it, or when
/// both came from the same device (a device holds its own changes). A change that does not
/// say what it replaces (a kvsfs before kept conflicts), or says it is not known, is never
/// taken for a conflict.
///
/// The merge rule is untouched: of two concurrent changes, the greater stamp wins. The other
/// is kept with the key's change as its open conflict (`StampedChange.lost`), until a change
/// that replaces the winner settles it. Two concurrent changes with the same value (or both
/// removals) agree: no conflict.
///
/// Several changes can lose to one winner: each device's newest is kept (a device held its own
/// earlier change), none from the winner's device, at most `KeptChangeList.maximumCount`. A
/// change that becomes the key's change takes on the changes that lost to the one before,
/// but for those its writer held: the one it replaced, and those its mount showed in that
/// conflict when the change was written (`StampedChange.settles`). So a change settles only what its writer
/// could see; one that does not say (a kvsfs before kept conflicts) settles none.
package enum ConflictRule {
    /// Whether `change` was written without its writer holding `current`.
    package static func isConcurrent(_ change: StampedChange, with current: StampedChange) -> Bool {
        guard let replaces = change.replaces, replaces != .unknown else { return false }
        if change.stamp.device == current.stamp.device { return false }
        return replaces != .change(current.stamp)
    }

    /// Whether `change` and `current` conflict: concurrent, and not the same value (two
    /// devices that both removed a key, or wrote the same value, agree).
    package static func conflict(_ change: StampedChange, with current: StampedChange) -> Bool {
        isConcurrent(change, with: current) && (change.value != current.value || change.type != current.type)
    }

    /// The changes kept as lost to `winner` once `pushed` (the winner itself, or a change that
    /// lost to it) arrives, of `candidates`: each device's newest, except the winner's device's,
    /// those that agree with the winner, and those `pushed`'s writer held (the one it replaced,
    /// and, when it is the winner, those it settles), newest first. Longer than `KeptChangeList.maximumCount` when more devices lost than a key
    /// keeps: the caller refuses the change that would make it so.
    package static func losers(_ candidates: [KeptChange], winner: StampedChange, pushed: StampedChange) -> [KeptChange] {
        var newest: [String: KeptChange] = [:]
        for change in candidates where change.stamp < winner.stamp && change.stamp.device != winner.stamp.device
            && (change.value != winner.value || change.type != winner.type) && pushed.replaces != .change(change.stamp)
            && !(pushed.stamp == winner.stamp && pushed.settles.contains(change.stamp)) {
            if let kept = newest[change.stamp.device], kept.stamp >= change.stamp { continue }
            newest[change.stamp.device] = change
        }
        return newest.values.sorted { $0.stamp > $1.stamp }
    }
}
