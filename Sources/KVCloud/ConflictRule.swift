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
/// is kept as the key's open conflict (`StampedChange.lost`), the newest such change if
/// several lost, until a change that replaces the winner settles it. Two concurrent changes
/// with the same value (or both removals) agree: no conflict.
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

    /// Whether `loser`, which lost to the key's change, is kept rather than the conflict the
    /// key has: the newest of the changes that lost is.
    package static func keeps(_ loser: KeptChange, over open: KeptChange?) -> Bool {
        guard let open else { return true }
        return loser.stamp > open.stamp
    }
}
