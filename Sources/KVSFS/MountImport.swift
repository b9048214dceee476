import FoundationEssentials
import Glibc
import FuseKit
import KVStore
import Synchronization

/// An import (`kvsfs import`) as the mount shows it. The store takes the whole import in one
/// transaction (`KeyValueStore.importValues`); then the applier shows each key it changed
/// through the mount (`MountApplier`), so that the kernel raises a writer's inotify events for
/// them, on this mount as on every other, and drops what it cached of the old values. Should
/// the applier be unable to, the mount's nodes are brought along under the namespace lock and
/// the kernel is told to forget what it holds for those keys (`KernelCache`), without events.
extension KeyValueFileSystem {
    /// Where the mount sends its notices to the kernel: set once the session exists, and to
    /// nil once it has ended (the session holds the file system: this would hold it back).
    public func attach(kernelCache: (any KernelCache)?) {
        attachedKernelCache.withLock { $0 = kernelCache }
    }

    /// Imports `values` as one change (see `KeyValueStore.importValues`) and shows it in the
    /// mount; with `dryRun`, only says what it would change.
    public func importValues(_ values: [String: PropertyListValue], replacing: Bool, dryRun: Bool) throws -> ImportPlan {
        if configuration.readOnly, !dryRun { throw StoreError.readOnly("the mount is read-only") }
        // Checked and encoded before any lock: the mount serves its files meanwhile.
        let prepared: PreparedImport
        do {
            prepared = try store.prepareImport(values, replacing: replacing)
        } catch {
            // Told as a write through the mount would be: the log and the event log name the
            // key and the rule, not only the command line.
            if !dryRun, let key = error.key { tell(refusalOf: key, error.reason) }
            throw error
        }
        if dryRun { return try store.importValues(prepared, dryRun: true) }
        // What open handles of a key about to be removed go on reading, as after an unlink.
        var removedContent: [InodeNumber: [UInt8]] = [:]
        let plan = try state.withLock { ns throws -> ImportPlan in
            if replacing {
                for node in ns.names.values where node.openHandles > 0 {
                    if case .key(let key) = node.kind, values[key] == nil { removedContent[node.inode] = content(of: node) }
                }
            }
            do {
                return try store.importValues(prepared, dryRun: false)
            } catch let refusal as ImportRefusal {
                if let key = refusal.key { tell(refusalOf: key, refusal.reason) }
                throw refusal
            }
        }
        showChanged(added: plan.added, changed: plan.changed, removed: plan.removed, removedContent: removedContent, of: "an import")
        return plan
    }
}
