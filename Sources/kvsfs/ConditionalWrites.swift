import Foundation
import KVCloud
import KVSFS
import KVStore

/// Changes made on a condition the remote judges (`kvsfs set --if-version`, `kvsfs delete
/// --if-version`, `kvsfs import --if-unchanged-since`), as the control socket makes them.
///
/// Never through the store first: a local write is pending until a later push, and the command
/// must hear the remote's verdict. The change is checked against the store's rules and stamped
/// by its clock (`KeyValueStore.conditionalChanges`), pushed to the remote with its condition
/// through the mount's change log, and, once accepted, taken in as the remote's through the
/// mount's applier (`MountSync.takeIn`), so that it shows as any synced change does. Refused,
/// nothing changes here and the command prints the remote's words.
extension ControlSocket {
    /// Sets `key` to `value` (nil: removes it) on `condition`.
    func changeOnCondition(_ key: String, to value: PropertyListValue?, _ condition: ChangeCondition) throws {
        let sync = try conditionalSync()
        // Stamped after the remote's latest change of the key as well as the mount's: stored,
        // it must replace that change on every replica, whose clock may be ahead of this one.
        let latest = try askRemote(what: "a condition is judged by a remote") { log, store in
            try await log.history(of: key, in: store).first?.stamp
        }
        let changes: [StampedChange]
        do {
            changes = try fileSystem.store.conditionalChanges([key: value], condition: condition, after: latest.map { [key: $0] } ?? [:])
        } catch {
            throw CommandFailure("cannot write \(key.debugDescription): \(error)")
        }
        try push(changes, through: sync)
    }

    /// Imports `values` (see `KeyValueStore.importValues`) on the condition that no key it sets
    /// or removes has a version on the remote after `cursor`: all of it or nothing.
    func importOnCondition(_ values: [String: PropertyListValue], replacing: Bool, unchangedSince cursor: Int64) throws -> ImportPlan {
        let sync = try conditionalSync()
        do {
            try ChangeCondition.unchangedSince(cursor).check()
        } catch {
            throw CommandFailure(error.description)
        }
        let store = fileSystem.store
        let (plan, changes) = try store.conditionalImport(try store.prepareImport(values, replacing: replacing), unchangedSince: cursor)
        try push(changes, through: sync)
        return plan
    }

    /// The mount's sync, which a conditional change needs: refused on a mount without a remote
    /// or a read-only one.
    private func conditionalSync() throws -> MountSync {
        guard let sync else { throw CommandFailure("\(mountpoint) has no remote, and a condition is judged by a remote") }
        if fileSystem.configuration.readOnly { throw CommandFailure("\(mountpoint) is mounted read-only: nothing was written") }
        return sync
    }

    /// Pushes `changes` with their conditions in one push and takes in what the remote
    /// accepted; the first refusal, in the remote's words, when it refused them (then it
    /// stored none of them, and nothing changes here).
    private func push(_ changes: [StampedChange], through sync: MountSync) throws {
        guard !changes.isEmpty else { return }
        let named = try sync.named(changes)
        let outcome = try askRemote(what: "a condition is judged by a remote") { log, store in try await log.push(named, to: store) }
        if let refusal = outcome.refused.first {
            throw CommandFailure("\(refusal.change.key.debugDescription): \(refusal.reason); nothing was changed")
        }
        do {
            try sync.takeIn(outcome.accepted)
        } catch {
            // Stored on the remote: the mount's next fetch brings it all the same.
            throw CommandFailure("the remote took the change, but this mount could not show it yet (it will with the next sync): \(error)")
        }
        // A remote answers with each accepted change as it read it: a server older than
        // conditions reads none, and stores the change as any other.
        if outcome.accepted.contains(where: { $0.condition == nil }) {
            throw CommandFailure("the remote took the change without judging its condition: it is a kvsfs serve older than "
                                 + "conditional writes (update it); the change was made as an ordinary write")
        }
    }
}
