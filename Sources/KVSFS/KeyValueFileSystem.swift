import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Synchronization

/// How a mount shows its store.
public struct MountConfiguration: Sendable {
    /// The form in which files show values.
    public var format: ValueFormat
    /// How long the kernel may cache names and attributes of keys nobody is writing. Safe to
    /// make long: every change to the mount's files passes through the kernel.
    public var cacheTimeout: Double
    /// How many placeholders and editor files may exist at once.
    public var maxPendingFiles: Int
    public var uid: UInt32
    public var gid: UInt32

    public init(format: ValueFormat = .xml, cacheTimeout: Double = 3600, maxPendingFiles: Int = 256,
                uid: UInt32 = getuid(), gid: UInt32 = getgid()) {
        self.format = format
        self.cacheTimeout = cacheTimeout
        self.maxPendingFiles = maxPendingFiles
        self.uid = uid
        self.gid = gid
    }
}

/// What the mount needs from sync, wired by whoever runs both.
public struct SyncHooks: Sendable {
    /// Tells which requests come from the thread applying remote changes, and which change.
    public var externalChanges: ExternalChangeRegistry
    /// `synchronize()`: blocks until done; throws `FileSystemError.remoteUnreachable`,
    /// `.remoteBusy` or `.authorizationRefused`. Never called from a request during which the kernel holds the root
    /// directory's lock: remote changes are applied through that directory.
    public var synchronize: @Sendable () throws -> Void
    /// For fsync of the root: pushes what is pending, blocking until the remote has it (or
    /// throwing like `synchronize`), and starts a round that fetches and applies, not waited for.
    public var pushNow: @Sendable () throws -> Void
    /// Replaces the store's values by the remote's, blocking and throwing like `synchronize`.
    public var replaceWithRemote: @Sendable () throws -> Void
    /// Extended attributes of the mount's root (`user.kvsfs.sync`, `user.kvsfs.events`, ...).
    public var rootAttributes: @Sendable () -> [String: String]

    public init(externalChanges: ExternalChangeRegistry, synchronize: @escaping @Sendable () throws -> Void,
                pushNow: @escaping @Sendable () throws -> Void, replaceWithRemote: @escaping @Sendable () throws -> Void,
                rootAttributes: @escaping @Sendable () -> [String: String]) {
        self.externalChanges = externalChanges
        self.synchronize = synchronize
        self.pushNow = pushNow
        self.replaceWithRemote = replaceWithRemote
        self.rootAttributes = rootAttributes
    }
}

/// The mount's file operations over a key-value store: one flat directory, one file per key.
///
/// Invariants: a write is committed to the store only at flush, fsync or release, and only
/// whole; a refused commit changes nothing in the store and refuses every later commit of the
/// same handle; editor files and placeholders never reach the store.
public final class KeyValueFileSystem: FuseFileSystem {
    /// The extended attribute that names a key's value type.
    public static let typeAttribute = "user.kvsfs.type"
    /// The extended attribute that tells where a key's latest change stands with the remote.
    public static let syncAttribute = "user.kvsfs.sync"
    /// Reading this attribute of the root runs `synchronize()` and gives `done` (`kvsfs sync`).
    /// It is not listed, so that `getfattr -d` does not sync.
    public static let synchronizeAttribute = "user.kvsfs.synchronize"
    /// Reading this attribute of the root runs `replaceWithRemote()` and gives `done`
    /// (`kvsfs sync --replace-with-remote`). Not listed either.
    public static let replaceAttribute = "user.kvsfs.replace-with-remote"

    public let store: KeyValueStore
    public let configuration: MountConfiguration
    private let log: @Sendable (String) -> Void
    private let state: GuardedNamespace
    private let sync: SyncHooks?

    public init(store: KeyValueStore, configuration: MountConfiguration = MountConfiguration(), sync: SyncHooks? = nil,
                log: @escaping @Sendable (String) -> Void = { FileHandleOutput.standardError.write("kvsfs: \($0)\n") }) {
        self.store = store
        self.configuration = configuration
        self.sync = sync
        self.log = log
        self.state = GuardedNamespace(Namespace(now: Date()))
    }

    public func errno(for error: any Error) -> Int32 {
        ErrnoMapping.errno(for: error, log: log)
    }

    // MARK: - Names
    // Every name is normalised to NFC first (the key rule, `KeyName`): both spellings of a
    // name are one file.

    public func lookup(parent: InodeNumber, name: String, context: RequestContext) throws -> LookupResult {
        let name = KeyName.canonical(name)
        return try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard try classify(name) != nil, let node = try visibleNode(named: name, in: &ns) else {
                return .notFound(timeout: configuration.cacheTimeout)
            }
            node.lookups += 1
            return .found(entry(for: node))
        }
    }

    public func forget(inode: InodeNumber, lookups: UInt64) {
        state.forget(inode, lookups: lookups)
    }

    public func getattr(inode: InodeNumber) throws -> AttributesReply {
        try state.withLock { ns in
            if inode == .root { return rootAttributes(ns) }
            let node = try existingNode(inode, in: ns)
            return AttributesReply(attributes: attributes(of: node), timeout: attributeTimeout(of: node))
        }
    }

    public func setattr(inode: InodeNumber, changes: AttributeChanges, handle: FileHandle?, context: RequestContext) throws -> AttributesReply {
        try state.withLock { ns in
            if inode == .root {
                if let permissions = changes.permissions, permissions != 0o755 { throw FileSystemError.permissionsFixed }
                try checkOwnership(changes)
                return rootAttributes(ns)
            }
            let node = try existingNode(inode, in: ns)
            if let permissions = changes.permissions, permissions != 0o644 { throw FileSystemError.permissionsFixed }
            try checkOwnership(changes)
            if let size = changes.size {
                try truncate(node, to: Int(size), through: handle.flatMap { ns.handles[$0] }, in: &ns)
            }
            if let change = changes.modificationTime {
                switch node.kind {
                case .placeholder, .editorFile:
                    node.modifiedAt = date(of: change)
                case .key, .removed:
                    break  // A key's mtime is when its value last changed.
                }
            }
            return AttributesReply(attributes: attributes(of: node), timeout: attributeTimeout(of: node))
        }
    }

    // MARK: - Files

    public func open(inode: InodeNumber, flags: OpenFlags, context: RequestContext) throws -> OpenReply {
        try state.withLock { ns in
            if inode == .root { throw Errno.isDirectory }
            let node = try existingNode(inode, in: ns)
            if flags.isWritable, node.key != nil { try checkWritable(context) }
            return open(node, flags: flags, external: isExternal(context), in: &ns)
        }
    }

    public func create(parent: InodeNumber, name: String, mode: UInt32, flags: OpenFlags, context: RequestContext) throws -> (Entry, OpenReply) {
        let name = KeyName.canonical(name)
        return try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard let nameClass = try classify(name) else { throw FileSystemError.nonCanonicalName(name) }
            if case .key = nameClass { try checkWritable(context) }
            if let existing = try visibleNode(named: name, in: &ns) {
                if flags.exclusive { throw FileSystemError.fileExists }
                existing.lookups += 1
                return (entry(for: existing), open(existing, flags: flags, external: isExternal(context), in: &ns))
            }
            guard ns.pendingFiles < configuration.maxPendingFiles else {
                throw FileSystemError.tooManyEditorFiles(limit: configuration.maxPendingFiles)
            }
            let kind: Node.Kind
            switch nameClass {
            case .editorFile:
                kind = .editorFile(EditorFile(content: [], hiddenKey: nil))
            case .key(let key):
                if store.entry(forKey: key) == nil, !isExternal(context) { try store.ledger.checkNewKey(usage: store.usage) }
                kind = .placeholder(key)
            }
            let node = ns.addNode(name: name, kind: kind, modifiedAt: Date())
            ns.directoryModifiedAt = node.modifiedAt
            node.lookups += 1
            return (entry(for: node), open(node, flags: flags, external: isExternal(context), in: &ns))
        }
    }

    public func read(inode: InodeNumber, handle: FileHandle, offset: Int, size: Int) throws -> [UInt8] {
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            let content = file.buffer ?? file.snapshot ?? content(of: file.node)
            guard offset < content.count else { return [] }
            return Array(content[offset..<min(content.count, offset + size)])
        }
    }

    public func write(inode: InodeNumber, handle: FileHandle, offset: Int, bytes: UnsafeRawBufferPointer, context: RequestContext) throws -> Int {
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            guard file.writable else { throw FileSystemError.notOpenForWriting }
            if let refusal = file.writeRefusal { throw refusal }
            var buffer = file.buffer ?? content(of: file.node)
            file.buffer = nil  // keep `buffer` uniquely referenced while it grows
            let end = offset + bytes.count
            if end > buffer.count {
                do {
                    if !file.external { try checkGrowth(of: file.node, to: end) }
                } catch {
                    file.buffer = buffer
                    file.writeRefusal = error
                    throw error
                }
                buffer.append(contentsOf: repeatElement(0, count: end - buffer.count))
            }
            buffer.withUnsafeMutableBytes { target in
                target.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            }
            file.buffer = buffer
            file.dirty = true
            file.commitRefusal = nil
            return bytes.count
        }
    }

    public func flush(inode: InodeNumber, handle: FileHandle, context: RequestContext) throws {
        let decoded = decodeUnlocked(handle)
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            try commit(file, decoded: decoded, in: &ns)
        }
    }

    public func fsync(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws {
        let decoded = decodeUnlocked(handle)
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            try commit(file, decoded: decoded, in: &ns)
            try store.makeDurable()
        }
    }

    public func release(inode: InodeNumber, handle: FileHandle) {
        let decoded = decodeUnlocked(handle)
        state.withLock { ns in
            guard let file = ns.handles.removeValue(forKey: handle) else { return }
            if file.dirty, file.writeRefusal == nil, file.commitRefusal == nil {
                do {
                    try commit(file, decoded: decoded, in: &ns)
                } catch {
                    log("a write to \(file.node.name) closed without flush was refused: \(error)")
                }
            }
            file.node.openHandles -= 1
            if file.writable { file.node.openWriters -= 1 }
            ns.dropIfUnused(file.node)
        }
    }

    // MARK: - Directory changes

    public func unlink(parent: InodeNumber, name: String, context: RequestContext) throws {
        let name = KeyName.canonical(name)
        try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard try classify(name) != nil, let node = try visibleNode(named: name, in: &ns) else {
                throw FileSystemError.noSuchFile
            }
            let content = content(of: node)
            switch node.kind {
            case .key(let key):
                if isExternal(context), let (change, mode) = sync?.externalChanges.inFlight(key), change.isTombstone {
                    try store.applyExternal([change], mode: mode)
                } else {
                    try store.removeValue(forKey: key)
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
                ns.setKind(source, .editorFile(EditorFile(content: content(of: source), hiddenKey: sourceKey)))
                ns.hiddenKeys[sourceKey] = source
            case (.editorFile(let file), .key(let destination)):
                let value = try decode(file.content, reusing: decoded)
                var changes: [KeyChange] = [.put(destination, value)]
                let hidden = file.hiddenKey.flatMap { ns.hiddenKeys[$0] === source ? $0 : nil }
                if let hidden, hidden != destination { changes.append(.delete(hidden)) }
                try store.apply(changes)
                if let hidden { ns.hiddenKeys[hidden] = nil }
                unhide(destination, in: &ns)
                ns.setKind(source, .key(destination))
            case (.editorFile, .editorFile):
                if let target { try discardEditorFile(target, in: &ns) }
            case (.placeholder, .key(let destination)):
                if case .key = target?.kind { throw FileSystemError.emptyValue }
                ns.setKind(source, .placeholder(destination))
            case (.placeholder, .editorFile):
                if let target { try discardEditorFile(target, in: &ns) }
                ns.setKind(source, .editorFile(EditorFile(content: [], hiddenKey: nil)))
            case (.removed, _):
                throw FileSystemError.noSuchFile
            }

            if let target, target !== source {
                remove(target, content: targetContent ?? [], in: &ns)
            }
            ns.names[name] = nil
            source.name = newName
            ns.names[newName] = source
            source.pageCacheTrusted = false
            source.rendered = nil
            ns.directoryModifiedAt = Date()
        }
    }

    public func mkdir(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry {
        throw FileSystemError.directoriesNotSupported
    }

    public func rmdir(parent: InodeNumber, name: String) throws {
        let name = KeyName.canonical(name)
        let exists = try state.withLock { ns in try classify(name) != nil && visibleNode(named: name, in: &ns) != nil }
        throw exists ? FileSystemError.notADirectory : FileSystemError.noSuchFile
    }

    public func mknod(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry {
        throw FileSystemError.specialFilesNotSupported
    }

    public func symlink(target: String, parent: InodeNumber, name: String) throws -> Entry {
        throw FileSystemError.linksNotSupported
    }

    public func link(inode: InodeNumber, newParent: InodeNumber, newName: String) throws -> Entry {
        throw FileSystemError.linksNotSupported
    }

    // MARK: - Directory

    public func opendir(inode: InodeNumber) throws -> FileHandle {
        try state.withLock { ns in
            guard inode == .root else { throw FileSystemError.notADirectory }
            var names = store.keys().compactMap { key in ns.hiddenKeys[key] == nil ? KeyFileName.fileName(forKey: key) : nil }
            for (name, node) in ns.names where !node.isKey { names.append(name) }
            names.sort()
            var listing = [
                DirectoryEntry(name: ".", inode: .root, kind: .directory, nextOffset: 1),
                DirectoryEntry(name: "..", inode: .root, kind: .directory, nextOffset: 2),
            ]
            for name in names {
                guard let node = try visibleNode(named: name, in: &ns) else { continue }
                listing.append(DirectoryEntry(name: name, inode: node.inode, kind: .regularFile, nextOffset: listing.count + 1))
            }
            let handle = FileHandle(ns.nextHandle)
            ns.nextHandle += 1
            ns.listings[handle] = listing
            return handle
        }
    }

    public func readdir(inode: InodeNumber, handle: FileHandle, offset: Int) throws -> [DirectoryEntry] {
        try state.withLock { ns in
            guard let listing = ns.listings[handle] else { throw FileSystemError.badHandle }
            return offset < listing.count ? Array(listing[offset...]) : []
        }
    }

    public func releasedir(inode: InodeNumber, handle: FileHandle) {
        state.withLock { ns in ns.listings[handle] = nil }
    }

    /// fsync of the mount's root makes every committed change durable on disk, pushes what is
    /// pending (failing like `kvsfs sync` when the remote cannot be reached) and starts a round
    /// that fetches and applies remote changes. It does not wait for those applies: the kernel
    /// holds the directory's lock until fsync returns, and they go through that directory.
    public func fsyncdir(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws {
        try store.makeDurable()
        try sync?.pushNow()
    }

    /// `df`: blocks of one byte, the store's byte quota and its use; files are keys.
    public func statfs(inode: InodeNumber) throws -> FileSystemStatistics {
        let limits = store.limits
        let usage = store.usage
        return FileSystemStatistics(
            blockSize: 1,
            blocks: UInt64(limits.totalBytes),
            blocksFree: UInt64(max(0, limits.totalBytes - usage.bytes)),
            files: UInt64(limits.keys),
            filesFree: UInt64(max(0, limits.keys - usage.keys)),
            nameMax: 255)
    }

    // MARK: - Extended attributes

    public func getxattr(inode: InodeNumber, name: String) throws -> [UInt8] {
        if inode == .root {
            guard let sync else { throw FileSystemError.noSuchAttribute }
            if name == Self.synchronizeAttribute {
                try sync.synchronize()
                return Array("done".utf8)
            }
            if name == Self.replaceAttribute {
                try sync.replaceWithRemote()
                return Array("done".utf8)
            }
            guard let value = sync.rootAttributes()[name] else { throw FileSystemError.noSuchAttribute }
            return Array(value.utf8)
        }
        return try state.withLock { ns in
            let node = try existingNode(inode, in: ns)
            guard case .key(let key) = node.kind, let entry = store.entry(forKey: key) else {
                throw FileSystemError.noSuchAttribute
            }
            switch name {
            case Self.typeAttribute: return Array(entry.type.rawValue.utf8)
            case Self.syncAttribute where sync != nil: return Array((store.syncState(forKey: key) ?? .pending).rawValue.utf8)
            default: throw FileSystemError.noSuchAttribute
            }
        }
    }

    public func listxattr(inode: InodeNumber) throws -> [String] {
        if inode == .root { return sync?.rootAttributes().keys.sorted() ?? [] }
        return try state.withLock { ns in
            guard try existingNode(inode, in: ns).isKey else { return [] }
            return sync == nil ? [Self.typeAttribute] : [Self.syncAttribute, Self.typeAttribute]
        }
    }

    public func setxattr(inode: InodeNumber, name: String, value: [UInt8], flags: Int32) throws {
        throw name.hasPrefix("user.kvsfs.") ? FileSystemError.attributeReadOnly : FileSystemError.attributesNotSupported
    }

    public func removexattr(inode: InodeNumber, name: String) throws {
        throw name.hasPrefix("user.kvsfs.") ? FileSystemError.attributeReadOnly : FileSystemError.attributesNotSupported
    }

    // MARK: - Helpers (called with the lock held)

    private enum NameClass: Equatable {
        case key(String)
        case editorFile
    }

    /// What a file name stands for; nil for a name that is not the canonical name of a key.
    private func classify(_ name: String) throws -> NameClass? {
        if EditorFileRule.isEditorFile(name) { return .editorFile }
        guard let key = KeyFileName.key(forFileName: name) else { return nil }
        try store.ledger.checkKeyName(key)
        return .key(key)
    }

    /// The node a name in the directory stands for, making one for a key seen for the first time.
    private func visibleNode(named name: String, in ns: inout Namespace) throws -> Node? {
        if let node = ns.names[name] { return node }
        guard let key = KeyFileName.key(forFileName: name), ns.hiddenKeys[key] == nil,
              let entry = store.entry(forKey: key) else { return nil }
        return ns.addNode(name: name, kind: .key(key), modifiedAt: entry.modifiedAt)
    }

    private func existingNode(_ inode: InodeNumber, in ns: Namespace) throws -> Node {
        guard let node = ns.nodes[inode] else { throw FileSystemError.noSuchFile }
        return node
    }

    private func open(_ node: Node, flags: OpenFlags, external: Bool, in ns: inout Namespace) -> OpenReply {
        let file = OpenFile(node: node, writable: flags.isWritable, external: external)
        node.openHandles += 1
        var keepCache = false
        if file.writable {
            node.openWriters += 1
            node.pageCacheTrusted = false
            if flags.truncates {
                file.buffer = []
                file.dirty = true
            }
        } else if node.openWriters > 0 {
            // The kernel's size and pages may come from a writer now (its O_TRUNC open set the
            // size to 0, its writes grow it): this reader reads the value committed when it
            // opened, whole, straight from here.
            file.snapshot = content(of: node)
        } else {
            keepCache = node.pageCacheTrusted
            node.pageCacheTrusted = true
        }
        // Writes bypass the page cache: a refused value never lingers there, and the kernel
        // skips its security.capability lookup before each buffered write.
        return OpenReply(handle: ns.addHandle(file), keepCache: keepCache, directIO: file.writable || file.snapshot != nil,
                         noFlush: !file.writable)
    }

    /// Refuses, before anything is committed, a file that grows past what its value may be.
    /// While a file is written its length counts as its size.
    private func checkGrowth(of node: Node, to length: Int) throws {
        let limits = store.limits
        switch node.kind {
        case .editorFile:
            if length > limits.valueBytes { throw FileSystemError.editorFileTooLarge(limit: limits.valueBytes) }
        case .key(let key), .placeholder(let key):
            if length > limits.valueBytes { throw StoreError.valueTooLarge(size: length, limit: limits.valueBytes) }
            let current = store.entry(forKey: key)?.size ?? 0
            let available = limits.totalBytes - (store.usage.bytes - current)
            if length > available {
                throw StoreError.storeFull(needed: length, available: max(0, available), limit: limits.totalBytes)
            }
        case .removed:
            break
        }
    }

    /// Commits what a handle wrote. Idempotent: a second flush of the same data does nothing.
    private func commit(_ file: OpenFile, decoded: DecodedContent? = nil, in ns: inout Namespace) throws {
        if let refusal = file.writeRefusal ?? file.commitRefusal { throw refusal }
        guard file.dirty else { return }
        do {
            if file.external, let key = file.node.key, let (change, mode) = sync?.externalChanges.inFlight(key) {
                try commitExternal(change, mode: mode, to: file.node, in: &ns)
            } else {
                try commit(file.buffer ?? [], to: file.node, decoded: decoded, in: &ns)
            }
            file.dirty = false
        } catch {
            file.commitRefusal = error
            throw error
        }
    }

    /// Makes `content` the node's content: for a key, a parsed value checked against the quotas.
    private func commit(_ content: [UInt8], to node: Node, decoded: DecodedContent? = nil, in ns: inout Namespace) throws {
        switch node.kind {
        case .key(let key):
            try store.put(try decode(content, reusing: decoded), forKey: key)
        case .placeholder(let key):
            guard !content.isEmpty else { return }
            try store.put(try decode(content, reusing: decoded), forKey: key)
            unhide(key, in: &ns)
            ns.setKind(node, .key(key))
        case .editorFile(var file):
            file.content = content
            ns.setKind(node, .editorFile(file))
            node.modifiedAt = Date()
        case .removed:
            return
        }
        node.pageCacheTrusted = false
        node.rendered = nil
    }

    /// Makes a remote change the node's value, as the change itself (its stamp, its sync state).
    private func commitExternal(_ change: StampedChange, mode: ExternalApplyMode, to node: Node, in ns: inout Namespace) throws {
        try store.applyExternal([change], mode: mode)
        if case .placeholder(let key) = node.kind, store.entry(forKey: key) != nil {
            unhide(key, in: &ns)
            ns.setKind(node, .key(key))
        }
        node.pageCacheTrusted = false
        node.rendered = nil
    }

    /// Refuses a local change to a key up front when the store is read-only here (EROFS);
    /// the thread applying remote changes always may.
    private func checkWritable(_ context: RequestContext) throws {
        if let reason = store.readOnly, !isExternal(context) { throw StoreError.readOnly(reason) }
    }

    /// Whether a request comes from the thread applying remote changes.
    private func isExternal(_ context: RequestContext) -> Bool {
        sync?.externalChanges.isApplier(thread: context.threadID) ?? false
    }

    /// The value `content` holds, within the store's per-value limit: the one `decoded`
    /// found before the lock when the bytes are the same, else decoded now.
    private func decode(_ content: [UInt8], reusing decoded: DecodedContent? = nil) throws -> PropertyListValue {
        guard !content.isEmpty else { throw FileSystemError.emptyValue }
        if let decoded, decoded.bytes == content { return try decoded.value.get() }
        return try PropertyListCodec.decode(content, limits: decodingLimits)
    }

    private var decodingLimits: PropertyListDecodingLimits {
        PropertyListDecodingLimits(maxBytes: store.limits.valueBytes)
    }

    /// Decodes, without the namespace lock, what a handle would commit: a large or hostile
    /// value then holds up no other request. Only a guess: the commit, under the lock, uses
    /// it only if the handle still holds the same bytes.
    private func decodeUnlocked(_ handle: FileHandle) -> DecodedContent? {
        decodeUnlocked { ns in
            guard let file = ns.handles[handle], file.dirty, !file.external, file.writeRefusal == nil, file.commitRefusal == nil,
                  file.node.key != nil else { return nil }
            return file.buffer
        }
    }

    /// Decodes the bytes `pick` finds under the lock, after letting go of it.
    private func decodeUnlocked(_ pick: (inout Namespace) -> [UInt8]?) -> DecodedContent? {
        guard let bytes = state.withLock({ pick(&$0) }), !bytes.isEmpty else { return nil }
        let limits = decodingLimits
        return DecodedContent(bytes: bytes, value: Result { () throws(StoreError) in try PropertyListCodec.decode(bytes, limits: limits) })
    }

    /// Truncation: of the handle's buffer when a writer asks, else of every open writer's
    /// buffer, else of the value itself (committed at once).
    private func truncate(_ node: Node, to size: Int, through handle: OpenFile?, in ns: inout Namespace) throws {
        let writers = handle.map { $0.writable ? [$0] : [] } ?? ns.handles.values.filter { $0.node === node && $0.writable }
        guard writers.isEmpty else {
            for file in writers {
                if let refusal = file.writeRefusal { throw refusal }
                var buffer = file.buffer ?? content(of: node)
                if size > buffer.count {
                    try checkGrowth(of: node, to: size)
                    buffer.append(contentsOf: repeatElement(0, count: size - buffer.count))
                } else {
                    buffer.removeLast(buffer.count - size)
                }
                file.buffer = buffer
                file.dirty = true
                file.commitRefusal = nil
            }
            return
        }
        var content = content(of: node)
        guard size != content.count else { return }
        if size > content.count {
            try checkGrowth(of: node, to: size)
            content.append(contentsOf: repeatElement(0, count: size - content.count))
        } else {
            content.removeLast(content.count - size)
        }
        try commit(content, to: node, in: &ns)
    }

    /// A key given a value through a visible name is no longer hidden by an editor file.
    private func unhide(_ key: String, in ns: inout Namespace) {
        guard let holder = ns.hiddenKeys.removeValue(forKey: key), case .editorFile(var file) = holder.kind else { return }
        file.hiddenKey = nil
        ns.setKind(holder, .editorFile(file))
    }

    private func deleteHiddenKey(of file: EditorFile, heldBy node: Node, in ns: inout Namespace) throws {
        guard let hidden = file.hiddenKey, ns.hiddenKeys[hidden] === node else { return }
        try store.removeValue(forKey: hidden)
        ns.hiddenKeys[hidden] = nil
    }

    /// An editor file replaced by a rename: like an unlink of it.
    private func discardEditorFile(_ node: Node, in ns: inout Namespace) throws {
        if case .editorFile(let file) = node.kind { try deleteHiddenKey(of: file, heldBy: node, in: &ns) }
    }

    private func remove(_ node: Node, content: [UInt8], in ns: inout Namespace) {
        ns.setKind(node, .removed(content))
        if ns.names[node.name] === node { ns.names[node.name] = nil }
        ns.directoryModifiedAt = Date()
        ns.dropIfUnused(node)
    }

    /// The bytes a node's file holds, in the mount's format.
    private func content(of node: Node) -> [UInt8] {
        switch node.kind {
        case .key(let key):
            guard let entry = store.entry(forKey: key) else { return [] }
            guard configuration.format != .xml else { return entry.xml }
            if let rendered = node.rendered, rendered.xml == entry.xml { return rendered.bytes }
            do {
                let bytes = try PropertyListCodec.encode(try PropertyListCodec.decode(entry.xml), as: configuration.format)
                node.rendered = (entry.xml, bytes)
                return bytes
            } catch {
                log("cannot render \(key) as \(configuration.format): \(error)")
                return entry.xml
            }
        case .placeholder:
            return []
        case .editorFile(let file):
            return file.content
        case .removed(let content):
            return content
        }
    }

    private func attributes(of node: Node) -> FileAttributes {
        var modified = node.modifiedAt
        let size: Int
        if case .key(let key) = node.kind, let entry = store.entry(forKey: key) {
            // One look-up of the key: in the default format the file is the stored XML itself.
            modified = entry.modifiedAt
            size = configuration.format == .xml ? entry.size : content(of: node).count
        } else {
            size = content(of: node).count
        }
        let time = TimeStamp(secondsSince1970: modified.timeIntervalSince1970)
        return FileAttributes(
            inode: node.inode, kind: .regularFile, permissions: 0o644, size: UInt64(size),
            linkCount: node.isRemoved ? 0 : 1, uid: configuration.uid, gid: configuration.gid,
            accessTime: time, modificationTime: time, changeTime: time)
    }

    /// Keys nobody is writing may be cached long; anything else may change without the kernel
    /// seeing its size change (a commit re-renders the value), so it is not cached.
    private func attributeTimeout(of node: Node) -> Double {
        node.isKey && node.openWriters == 0 ? configuration.cacheTimeout : 0
    }

    private func entry(for node: Node) -> Entry {
        Entry(attributes: attributes(of: node), attributeTimeout: attributeTimeout(of: node), entryTimeout: configuration.cacheTimeout)
    }

    private func rootAttributes(_ ns: Namespace) -> AttributesReply {
        let time = TimeStamp(secondsSince1970: ns.directoryModifiedAt.timeIntervalSince1970)
        let attributes = FileAttributes(
            inode: .root, kind: .directory, permissions: 0o755, size: 0, linkCount: 2,
            uid: configuration.uid, gid: configuration.gid, accessTime: time, modificationTime: time, changeTime: time)
        return AttributesReply(attributes: attributes, timeout: configuration.cacheTimeout)
    }

    private func checkOwnership(_ changes: AttributeChanges) throws {
        if let uid = changes.uid, uid != configuration.uid { throw FileSystemError.ownershipFixed }
        if let gid = changes.gid, gid != configuration.gid { throw FileSystemError.ownershipFixed }
    }

    private func date(of change: AttributeChanges.TimeChange) -> Date {
        switch change {
        case .now: Date()
        case .to(let time): Date(timeIntervalSince1970: Double(time.seconds) + Double(time.nanoseconds) / 1e9)
        }
    }
}

extension Node {
    var isKey: Bool {
        if case .key = kind { return true }
        return false
    }

    /// The key a key or placeholder stands for.
    var key: String? {
        switch kind {
        case .key(let key), .placeholder(let key): key
        case .editorFile, .removed: nil
        }
    }
}

/// Writes diagnostics to a standard stream.
public struct FileHandleOutput: Sendable {
    let descriptor: Int32
    public static let standardError = FileHandleOutput(descriptor: 2)
    public func write(_ text: String) {
        var bytes = Array(text.utf8)
        _ = Glibc.write(descriptor, &bytes, bytes.count)
    }
}
