import FoundationEssentials
import FuseKit
import Glibc
import KVStore

/// Changes the store took without the kernel, shown in the mount: through the applier as a
/// writer would, or, when it cannot, as notices that make the kernel forget what it cached.
extension KeyValueFileSystem {
    /// Shows keys the store changed without the kernel (an import, a settled conflict): through
    /// the applier, as a writer would; when it cannot, by bringing the nodes along and telling
    /// the kernel to forget what it cached. Called without the namespace lock.
    func showChanged(added: [String], changed: [String], removed: [String], removedContent: [InodeNumber: [UInt8]], of what: String) {
        let keys = added + changed + removed
        guard !keys.isEmpty else { return }
        // What open handles of a removed key go on reading, for the applier's unlink to keep.
        if !removedContent.isEmpty { state.withLock { $0.contentOfShownRemovals.merge(removedContent) { $1 } } }
        let unshown = applier?.show(keys.compactMap(store.allChanges(forKey:)), newKeys: Swift.Set(added)) ?? Swift.Set(keys)
        let notices = state.withLock { ns in
            for inode in removedContent.keys { ns.contentOfShownRemovals[inode] = nil }
            guard !unshown.isEmpty else { return [KernelNotice]() }
            return show(added: added.filter(unshown.contains), changed: changed.filter(unshown.contains),
                        removed: removed.filter(unshown.contains), removedContent: removedContent, in: &ns)
        }
        tell(notices, of: what)
    }

    /// Brings the mount's nodes along with keys the store changed without the kernel (an import,
    /// a settled conflict), under the namespace lock; returns what the kernel must be told.
    /// `removedContent`: what open handles of a removed key go on reading, as after an unlink.
    func show(added: [String], changed: [String], removed: [String], removedContent: [InodeNumber: [UInt8]],
              in ns: inout Namespace) -> [KernelNotice] {
        var notices: [KernelNotice] = []
        let now = Date()
        for key in added + changed {
            // A key an editor's save hides (`k` renamed to `k~`) is a key again, as after a
            // write of its file: removing the editor file no longer removes it.
            unhide(key, in: &ns)
            let name = KeyFileName.fileName(forKey: key)
            guard let node = ns.names[name], node.key == key else {
                notices.append(.name(name))  // the kernel may remember that it did not exist
                continue
            }
            if !node.isKey { ns.setKind(node, .key(key)) }  // a placeholder or a default
            node.rendered = nil
            node.modifiedAt = now
            notices.append(.content(node.inode))
        }
        for key in removed {
            unhide(key, in: &ns)
            let name = KeyFileName.fileName(forKey: key)
            guard let node = ns.names[name], node.key == key else { continue }
            notices.append(.removal(name, node.inode))
            remove(node, content: removedContent[node.inode] ?? [], in: &ns)
        }
        if !added.isEmpty || !removed.isEmpty {
            ns.directoryModifiedAt = now
            notices.append(.content(.root))  // its modification time
        }
        return notices
    }

    /// Tells the kernel `notices`, outside the namespace lock (the kernel may wait on requests
    /// that need it); `what` names the change in the log when the kernel refuses one.
    func tell(_ notices: [KernelNotice], of what: String) {
        guard let cache = attachedKernelCache.withLock({ $0 }) else { return }
        for notice in notices {
            let code: Int32
            switch notice {
            case .content(let inode): code = cache.forgetContent(of: inode)
            case .name(let name): code = cache.forgetName(name, in: .root)
            case .removal(let name, let inode): code = cache.announceRemoval(of: name, inode: inode, from: .root)
            }
            if code != 0, code != ENOENT {
                logger.error("the kernel refused a notice of \(what) (\(notice)): \(String(cString: strerror(code))); it may show old values of those keys until its cache expires")
            }
        }
    }
}

/// What the kernel is told after a change the store took without it, for one key.
enum KernelNotice {
    case content(InodeNumber)
    case name(String)
    case removal(String, InodeNumber)
}
