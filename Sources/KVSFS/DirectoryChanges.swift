import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Logging
import Synchronization

/// Unlink and rename: how keys, placeholders and editors' scratch files change names, and
/// how an editor's save (a scratch file renamed over a key) becomes one change of the key.
extension KeyValueFileSystem {
    public func unlink(parent: InodeNumber, name: String, context: RequestContext) throws {
        try checkMayChange(context)
        let name = KeyName.canonical(name)
        try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard try classify(name) != nil, let node = try visibleNode(named: name, in: &ns) else {
                throw FileSystemError.noSuchFile
            }
            try checkShownDefaultStands(shownChange(in: context), in: ns)
            let content = ns.contentOfShownRemovals[node.inode] ?? content(of: node)
            switch node.kind {
            case .key(let key):
                // The applier's unlink shows a removal the store holds already; a default's,
                // only while the key still has no value (one written since stays).
                if let shown = shownChange(in: context), shown.change.key == key, shown.change.isTombstone {
                    break
                }
                try store.removeValue(forKey: key)
            case .registeredDefault(let key, _):
                // Only the applier removes one, for a remote deletion racing a local one.
                guard let shown = shownChange(in: context), shown.change.key == key, shown.change.isTombstone else {
                    throw FileSystemError.registeredDefault(key)
                }
            case .editorFile(let file):
                try deleteHiddenKey(of: file, heldBy: node, in: &ns)
            case .placeholder, .removed:
                break
            }
            remove(node, content: content, in: &ns)
        }
    }

    public func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags, context: RequestContext) throws {
        try checkMayChange(context)
        let (name, newName) = (KeyName.canonical(name), KeyName.canonical(newName))
        // An editor file renamed to a key (vim's and sed's save) is decoded before the lock.
        let decoded = decodeUnlocked { ns in
            guard case .editorFile(let file) = ns.names[name]?.kind else { return nil }
            return file.content
        }
        try state.withLock { ns in
            guard parent == .root, newParent == .root else { throw FileSystemError.notADirectory }
            if flags.contains(.exchange) { throw FileSystemError.exchangeNotSupported }
            guard try classify(name) != nil, let source = try visibleNode(named: name, in: &ns) else {
                throw FileSystemError.noSuchFile
            }
            guard let targetClass = try classify(newName) else { throw FileSystemError.nonCanonicalName(newName) }
            if name == newName { return }
            let target = try visibleNode(named: newName, in: &ns)
            if target != nil, flags.contains(.noReplace) { throw FileSystemError.fileExists }
            let targetContent = target.map { content(of: $0) }

            switch (source.kind, targetClass) {
            case (.key(let sourceKey), .key(let destination)):
                try store.apply([.move(from: sourceKey, to: destination)])
                unhide(destination, in: &ns)
                ns.setKind(source, .key(destination))
            case (.key(let sourceKey), .editorFile):
                if let target { try discardEditorFile(target, in: &ns) }
                let time = source.shownSetTime(holding: store.entry(forKey: sourceKey)?.xml)
                ns.setKind(source, .editorFile(EditorFile(content: content(of: source), hiddenKey: sourceKey)))
                ns.hiddenKeys[sourceKey] = source
                source.setTime = time.map { SetTime(time: $0, standing: .uncommitted) }
            case (.editorFile(let file), .key(let destination)):
                let hidden = file.hiddenKey.flatMap { ns.hiddenKeys[$0] === source ? $0 : nil }
                do {
                    var changes: [KeyChange] = [.put(destination, try decode(file.content, reusing: decoded))]
                    if let hidden, hidden != destination { changes.append(.delete(hidden)) }
                    try store.apply(changes)
                } catch {
                    tell(refusalOf: destination, error)
                    throw error
                }
                if let hidden { ns.hiddenKeys[hidden] = nil }
                unhide(destination, in: &ns)
                ns.setKind(source, .key(destination))
                committedSetTime(of: source)  // rsync's times, set on its temporary file
            case (.editorFile, .editorFile):
                if let target { try discardEditorFile(target, in: &ns) }
            case (.placeholder, .key(let destination)):
                if case .key = target?.kind { throw FileSystemError.emptyValue }
                ns.setKind(source, .placeholder(destination))
            case (.placeholder, .editorFile):
                if let target { try discardEditorFile(target, in: &ns) }
                ns.setKind(source, .editorFile(EditorFile(content: [], hiddenKey: nil)))
            case (.registeredDefault(let key, _), .key):
                throw FileSystemError.registeredDefault(key)
            case (.registeredDefault, .editorFile):
                // An editor's backup of a default (vim's `k` → `k~`) is a copy: the default
                // stays under its own name, which the next look-up finds again.
                if let target { try discardEditorFile(target, in: &ns) }
                ns.setKind(source, .editorFile(EditorFile(content: content(of: source), hiddenKey: nil)))
            case (.removed, _):
                throw FileSystemError.noSuchFile
            }

            if let target, target !== source {
                remove(target, content: targetContent ?? [], in: &ns)
            }
            ns.names[name] = nil
            source.name = newName
            ns.names[newName] = source
            source.rendered = nil
            ns.directoryModifiedAt = Date()
        }
    }

    /// A key given a value through a visible name is no longer hidden by an editor file.
    func unhide(_ key: String, in ns: inout Namespace) {
        guard let holder = ns.hiddenKeys.removeValue(forKey: key), case .editorFile(var file) = holder.kind else { return }
        file.hiddenKey = nil
        ns.setKind(holder, .editorFile(file))
    }

    func deleteHiddenKey(of file: EditorFile, heldBy node: Node, in ns: inout Namespace) throws {
        guard let hidden = file.hiddenKey, ns.hiddenKeys[hidden] === node else { return }
        try store.removeValue(forKey: hidden)
        ns.hiddenKeys[hidden] = nil
    }

    /// An editor file replaced by a rename: like an unlink of it.
    func discardEditorFile(_ node: Node, in ns: inout Namespace) throws {
        if case .editorFile(let file) = node.kind { try deleteHiddenKey(of: file, heldBy: node, in: &ns) }
    }

    func remove(_ node: Node, content: [UInt8], because removal: Node.Removal = .unlinked, in ns: inout Namespace) {
        ns.setKind(node, .removed(content, because: removal))
        if ns.names[node.name] === node { ns.names[node.name] = nil }
        ns.directoryModifiedAt = Date()
        ns.dropIfUnused(node)
    }
}
