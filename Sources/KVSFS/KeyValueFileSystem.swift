import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Logging
import Synchronization

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

    /// The extended attribute of a key whose change lost to a concurrent one: the two changes,
    /// in one line (`KeyConflict.summary`). There only while the conflict is open.
    public static let conflictAttribute = "user.kvsfs.conflict"

    /// The extended attribute of a key that the store's schema has a rule for: the rule and
    /// its description, in words (`KeySchema.describe`).
    public static let schemaAttribute = "user.kvsfs.schema"

    public let store: KeyValueStore
    public let configuration: MountConfiguration
    let logger: Logger
    let state: GuardedNamespace
    let sync: (any MountSynchronizer)?
    /// Who shows the changes the kernel did not make (`MountApplier`); nil in tests of the
    /// file system alone, where the kernel is only told to forget what it cached.
    let applier: (any ChangeShowing)?
    /// Where notices to the kernel go (`attach(kernelCache:)`); nil until the session exists.
    let attachedKernelCache = Mutex<(any KernelCache)?>(nil)
    /// Refused writes told in the log and the event log.
    let refusals: RefusalReports

    public init(store: KeyValueStore, configuration: MountConfiguration = MountConfiguration(), sync: (any MountSynchronizer)? = nil,
                applier: (any ChangeShowing)? = nil, logger: Logger = Logger(label: "kvsfs")) {
        self.store = store
        self.configuration = configuration
        self.sync = sync
        self.applier = applier
        self.logger = logger
        self.refusals = RefusalReports(logger: logger)
        self.state = GuardedNamespace(Namespace(now: Date()))
    }

    public func errno(for error: any Error) -> Int32 {
        ErrnoMapping.errno(for: error, logger: logger)
    }

    // MARK: - Names
    // Every name is normalised to NFC first (the key rule, `KeyName`): both spellings of a
    // name are one file.

    public func lookup(parent: InodeNumber, name: String, context: RequestContext) throws -> LookupResult {
        let name = KeyName.canonical(name)
        return try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard try classify(name) != nil else { return .notFound(timeout: negativeLookupTimeout) }
            let shown = shownChange(in: context).flatMap { $0.change.key == KeyFileName.key(forFileName: name) ? $0 : nil }
            // The applier creates the file of a key that is new, unless the kernel knows it already
            // (a listing gives nodes to every key, the kernel only to those it looks up).
            if let shown, shown.keyIsNew, !shown.change.isTombstone, (ns.names[name]?.lookups ?? 0) == 0 {
                return .notFound(timeout: 0)
            }
            guard let node = try visibleNode(named: name, in: &ns) ?? shownRemoval(shown, named: name, in: &ns) else {
                return .notFound(timeout: negativeLookupTimeout)
            }
            node.lookups += 1
            return .found(entry(for: node))
        }
    }

    /// The file a remote deletion removes, for the applier to unlink: the store, which took the
    /// deletion in first, no longer has the key.
    private func shownRemoval(_ shown: ShownChange?, named name: String, in ns: inout Namespace) -> Node? {
        guard let shown, shown.change.isTombstone, !shown.keyIsNew, ns.hiddenKeys[shown.change.key] == nil else { return nil }
        return ns.addNode(name: name, kind: .key(shown.change.key), modifiedAt: Date())
    }

    /// The change a request shows, when it is the applier's: decided once per request.
    func shownChange(in context: RequestContext) -> ShownChange? {
        applier?.shownChange(for: context)
    }

    /// Refuses (ENOENT) the applier's step that shows a registered default's change once the
    /// key has a value or a writer's new file: a default is decided under the namespace lock
    /// and shown after it, and what was written in between wins, unshown.
    func checkShownDefaultStands(_ shown: ShownChange?, in ns: Namespace) throws {
        guard let shown, shown.showsDefault else { return }
        let key = shown.change.key
        if store.entry(forKey: key) != nil { throw FileSystemError.noSuchFile }
        if case .placeholder = ns.names[KeyFileName.fileName(forKey: key)]?.kind { throw FileSystemError.noSuchFile }
    }

    public func forget(inode: InodeNumber, lookups: UInt64) {
        state.forget(inode, lookups: lookups)
    }

    // MARK: - Directory

    public func opendir(inode: InodeNumber) throws -> FileHandle {
        try state.withLock { ns in
            guard inode == .root else { throw FileSystemError.notADirectory }
            var listed = Swift.Set(store.keys().compactMap { key in ns.hiddenKeys[key] == nil ? KeyFileName.fileName(forKey: key) : nil })
            for (name, node) in ns.names where !node.isKey { listed.insert(name) }
            for key in ns.defaults.values.keys where ns.hiddenKeys[key] == nil { listed.insert(KeyFileName.fileName(forKey: key)) }
            let names = listed.sorted()
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
    /// The push is answered later, when it ends: no request thread waits on the remote.
    public func fsyncdir(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws -> Answer {
        try store.makeDurable()
        guard let sync else { return .now }
        return .later { reply in sync.pushNow { reply.answer($0) } }
    }

    // MARK: - What a flat directory of keys does not have

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

    // MARK: - Names (called with the lock held)

    enum NameClass: Equatable {
        case key(String)
        case editorFile
    }

    /// What a file name stands for; nil for a name that is not the canonical name of a key.
    func classify(_ name: String) throws -> NameClass? {
        if EditorFileRule.isEditorFile(name) { return .editorFile }
        guard let key = KeyFileName.key(forFileName: name) else { return nil }
        try store.ledger.checkKeyName(key)
        return .key(key)
    }

    /// The node a name in the directory stands for, making one for a key seen for the first time.
    /// A key without a value shows its registered default, if it has one.
    func visibleNode(named name: String, in ns: inout Namespace) throws -> Node? {
        if let node = ns.names[name] {
            // A value that reached the store without a write through this file (a remote change
            // applied straight to the store) replaces the default.
            if case .registeredDefault(let key, _) = node.kind, store.entry(forKey: key) != nil { ns.setKind(node, .key(key)) }
            return node
        }
        guard let key = KeyFileName.key(forFileName: name), ns.hiddenKeys[key] == nil else { return nil }
        if let entry = store.entry(forKey: key) {
            return ns.addNode(name: name, kind: .key(key), modifiedAt: entry.modifiedAt)
        }
        guard let registered = ns.defaults[key] else { return nil }
        return ns.addNode(name: name, kind: .registeredDefault(key, registered), modifiedAt: ns.defaultsRegisteredAt)
    }

    func existingNode(_ inode: InodeNumber, in ns: Namespace) throws -> Node {
        guard let node = ns.nodes[inode] else { throw FileSystemError.noSuchFile }
        return node
    }
}

extension Node {
    var isKey: Bool {
        if case .key = kind { return true }
        return false
    }

    /// The key a key, placeholder or registered default stands for.
    var key: String? {
        switch kind {
        case .key(let key), .placeholder(let key), .registeredDefault(let key, _): key
        case .editorFile, .removed: nil
        }
    }
}
