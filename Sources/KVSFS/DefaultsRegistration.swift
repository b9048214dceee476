import FoundationEssentials
import FuseKit
import KVStore

/// How registered defaults appear in the mount, and how a new set replaces the old.
///
/// The kernel caches names and attributes for `cacheTimeout`, which is safe because every
/// change to a key passes through it. Registering defaults changes files without any file
/// operation, so when a mount registers defaults the kernel caches nothing whose existence or
/// content a default decides: not a file showing a default (entry and attributes), and no
/// negative look-up (a name may gain a default). Keys with a value are cached as before.
extension KeyValueFileSystem {
    /// The value `user.kvsfs.sync` gives for a file showing a default: it is never synced.
    public static let defaultSyncState = "default"

    /// Shows `defaults` for every key without a value, in place of those registered before:
    /// a file showing a default that is no longer registered is removed from the directory, one
    /// whose default changed shows the new value. Keys with a value are untouched.
    ///
    /// The directory changes at once, as one. Then each file that appeared, changed or went is
    /// shown through the applier (`MountApplier.show`) as a writer's create, write or unlink
    /// would be, so that the kernel raises the same inotify events as for a value; what it
    /// cannot show needs nothing more, as the kernel caches nothing a default decides. Called
    /// without the namespace lock.
    public func registerDefaults(_ defaults: RegisteredDefaults) {
        let (changes, added) = state.withLock { ns in
            let now = Date()
            let before = ns.defaults
            ns.defaults = defaults
            ns.defaultsRegisteredAt = now
            for node in Array(ns.names.values) {
                guard case .registeredDefault(let key, let old) = node.kind else { continue }
                guard let registered = defaults[key] else {
                    // What a writer has open becomes the key when committed, as a new file would.
                    if node.openWriters > 0 {
                        ns.setKind(node, .placeholder(key))
                    } else {
                        remove(node, content: content(of: node), because: .defaultDropped, in: &ns)
                    }
                    continue
                }
                guard registered != old else { continue }
                ns.setKind(node, .registeredDefault(key, registered))
                node.modifiedAt = now
                node.rendered = nil
            }
            if Swift.Set(before.values.keys) != Swift.Set(defaults.values.keys) { ns.directoryModifiedAt = now }
            return defaultsShown(from: before, to: defaults, in: ns)
        }
        guard !changes.isEmpty, let applier else { return }
        _ = applier.show(changes, newKeys: added)
    }

    /// What a new set of defaults changed in the files of keys without a value, as changes for
    /// the applier to show (the default's value, or a removal), and the keys whose file is new.
    /// A file kept for a writer that has it open (a placeholder now) is not shown.
    private func defaultsShown(from before: RegisteredDefaults, to after: RegisteredDefaults,
                               in ns: Namespace) -> (changes: [StampedChange], added: Swift.Set<String>) {
        var changes: [StampedChange] = []
        var added = Swift.Set<String>()
        for key in Swift.Set(before.values.keys).union(after.values.keys).sorted() {
            guard store.entry(forKey: key) == nil, ns.hiddenKeys[key] == nil, before[key] != after[key] else { continue }
            guard let registered = after[key] else {
                if ns.names[KeyFileName.fileName(forKey: key)] == nil {
                    changes.append(StampedChange(key: key, value: nil, type: nil, stamp: ShownChange.unstamped))
                }
                continue
            }
            if before[key] == nil { added.insert(key) }
            changes.append(StampedChange(key: key, value: Data(registered.xml), type: registered.value.type, stamp: ShownChange.unstamped))
        }
        return (changes, added)
    }

    /// How long the kernel may remember that a name does not exist.
    var negativeLookupTimeout: Double {
        configuration.registersDefaults ? 0 : configuration.cacheTimeout
    }

    /// How long the kernel may remember a name. Not at all for a default (a value may replace
    /// it without the kernel) nor for a placeholder (gone without the kernel when the value
    /// written to it is refused; the removal notice that follows comes from another thread,
    /// and an open that raced it would write into a removed file).
    func entryTimeout(of node: Node) -> Double {
        switch node.kind {
        case .registeredDefault, .placeholder: 0
        case .key, .editorFile, .removed: configuration.cacheTimeout
        }
    }
}

extension Node {
    var isRegisteredDefault: Bool {
        if case .registeredDefault = kind { return true }
        return false
    }
}
