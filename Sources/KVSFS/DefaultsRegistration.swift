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
    public func registerDefaults(_ defaults: RegisteredDefaults) {
        state.withLock { ns in
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
                        remove(node, content: content(of: node), in: &ns)
                    }
                    continue
                }
                guard registered != old else { continue }
                ns.setKind(node, .registeredDefault(key, registered))
                node.modifiedAt = now
                node.rendered = nil
            }
            if Swift.Set(before.values.keys) != Swift.Set(defaults.values.keys) { ns.directoryModifiedAt = now }
        }
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
