import FoundationEssentials
import FuseKit
import KVStore
import Synchronization

/// A file of the mount, as the kernel knows it by inode number.
final class Node {
    enum Kind {
        /// The value of a key in the store.
        case key(String)
        /// A new, empty file that becomes the key when a value is written to it.
        case placeholder(String)
        /// A key with no value, showing the default registered for it (`RegisteredDefaults`);
        /// it becomes the key when a value is written to it.
        case registeredDefault(String, RegisteredDefaults.Value)
        /// An editor's or tool's scratch file, kept in memory only.
        case editorFile(EditorFile)
        /// Unlinked; open handles still read what it held, and the name is gone `because`.
        case removed([UInt8], because: Removal)
    }

    /// Why a file left the directory.
    enum Removal {
        /// A program unlinked it or renamed another file over it, or a change from elsewhere
        /// removed its key: as on any file system, it may still be opened through a handle
        /// (/proc/self/fd/N).
        case unlinked
        /// A reload dropped the default it showed: no program removed it, so a writer that
        /// looked its name up just before is told to look again (`removedSinceLookup`).
        case defaultDropped
    }

    let inode: InodeNumber
    var name: String
    var modifiedAt: Date
    /// How many times the kernel has looked this node up and not yet forgotten it.
    var lookups: UInt64 = 0
    var openHandles = 0
    var openWriters = 0
    /// The value as the file shows it (the XML itself, or another format), for the XML it was
    /// rendered from.
    var rendered: (xml: [UInt8], bytes: [UInt8])?
    /// A modification time set with utimensat, while it holds (`SetTime`).
    var setTime: SetTime?
    /// The mode a new file was created with, while `ModeRule` refuses it: its first value is
    /// refused unless a chmod first asks for a mode the rule gives (`ModeRule`).
    var modeAsked: UInt32?

    init(inode: InodeNumber, name: String, kind: Kind, modifiedAt: Date) {
        self.inode = inode
        self.name = name
        self.kind = kind
        self.modifiedAt = modifiedAt
    }

    fileprivate(set) var kind: Kind

    var isRemoved: Bool {
        if case .removed = kind { return true }
        return false
    }
}

extension Node.Kind {
    /// Placeholders and editor files: files that exist only in the mount's memory.
    var isPending: Bool {
        switch self {
        case .placeholder, .editorFile: true
        case .key, .registeredDefault, .removed: false
        }
    }
}

/// A value decoded from a file's bytes outside the namespace lock, with those bytes.
struct DecodedContent {
    let bytes: [UInt8]
    let value: Result<PropertyListValue, StoreError>

    init(decoding bytes: [UInt8], limits: PropertyListDecodingLimits) {
        self.bytes = bytes
        value = Result { () throws(StoreError) in try PropertyListCodec.decode(bytes, limits: limits) }
    }
}

/// The content of an editor's scratch file.
struct EditorFile {
    var content: [UInt8]
    /// The key this file was renamed from (vim's `k` → `k~`). The key stays in the store,
    /// hidden, until this file is removed (then the key is deleted) or renamed to a key name.
    var hiddenKey: String?
}

/// One open of a file. Writes go to the handle's own buffer and are committed at flush,
/// fsync or release.
final class OpenFile {
    let node: Node
    /// What the handle holds and whether it is due for commit (`HandleState`).
    var state: HandleState
    /// Opened for writing: every state but a reader's, which a handle has from its open on.
    var writable: Bool {
        if case .reading = state { return false }
        return true
    }
    /// The change this handle shows, when the applier opened it (`MountApplier`): the store
    /// holds it already, so nothing the handle writes is committed, and no local quota applies.
    let shown: ShownChange?
    /// How far what this handle wrote is known to begin a value (`checkPrefix`).
    var prefix = WrittenPrefix.checking(ValuePrefixCheck(), checked: 0, known: 0)
    /// What the bytes held at a write decoded to, when the store's schema asked (`write`):
    /// the commit takes it if the handle still holds those bytes, rather than decode again.
    var decodedAtWrite: DecodedContent?

    /// Opened with O_APPEND: every write goes to the end of what the handle holds, wherever
    /// the kernel, whose idea of the file's size may be out of date, says it goes.
    let appends: Bool

    init(node: Node, appends: Bool = false, shown: ShownChange? = nil, state: HandleState) {
        self.node = node
        self.state = state
        self.appends = appends
        self.shown = shown
    }
}

/// How much of a handle's bytes, from offset 0, is known to begin a value: what lets a write
/// be refused at the write() that makes the value impossible, where a shell hears it.
enum WrittenPrefix {
    /// Bytes `0..<checked` were fed to `check`, which found that they can still begin a value;
    /// bytes `0..<known` are not holes (the file's content when first written, then what the
    /// handle wrote in one run from there).
    case checking(ValuePrefixCheck, checked: Int, known: Int)
    /// Not checked as it is written (the check cannot tell, or a write left a hole before it):
    /// the decode at commit decides.
    case unchecked

    /// The file held `length` bytes before the handle first changed it.
    mutating func know(_ length: Int) {
        if case .checking(let check, let checked, let known) = self { self = .checking(check, checked: checked, known: max(known, length)) }
    }

    /// The handle's bytes were cut to `length`: bytes checked past it are gone, so the check
    /// starts again from 0 when it had gone further.
    mutating func cut(to length: Int) {
        guard case .checking(let check, let checked, let known) = self else { return }
        self = checked > length ? .checking(ValuePrefixCheck(), checked: 0, known: min(known, length))
                                : .checking(check, checked: checked, known: min(known, length))
    }
}

/// Everything the mount keeps in memory, guarded by one lock.
struct Namespace {
    var nodes: [InodeNumber: Node] = [:]
    /// The nodes of the names currently in the directory (keys get a node when first seen).
    var names: [String: Node] = [:]
    /// Keys renamed to an editor file name, and the file that holds each.
    var hiddenKeys: [String: Node] = [:]
    var handles: [FileHandle: OpenFile] = [:]
    var listings: [FileHandle: [DirectoryEntry]] = [:]
    var nextInode: UInt64 = InodeNumber.root.rawValue + 1
    var nextHandle: UInt64 = 1
    var directoryModifiedAt: Date
    /// What open handles of a key an import or a resolve removes go on reading, while the
    /// applier unlinks its file (the store no longer has the value by then).
    var contentOfShownRemovals: [InodeNumber: [UInt8]] = [:]
    /// The defaults shown for keys without a value.
    var defaults = RegisteredDefaults()
    /// When `defaults` were registered: the modification time of the files showing them.
    var defaultsRegisteredAt: Date

    init(now: Date) {
        defaultsRegisteredAt = now
        directoryModifiedAt = now
    }

    /// How many files are placeholders or editor files (not keys, not removed).
    private(set) var pendingFiles = 0

    /// Changes what a node is. Every change of kind goes through here, to keep `pendingFiles`.
    mutating func setKind(_ node: Node, _ kind: Node.Kind) {
        pendingFiles += (kind.isPending ? 1 : 0) - (node.kind.isPending ? 1 : 0)
        node.kind = kind
    }

    mutating func addNode(name: String, kind: Node.Kind, modifiedAt: Date) -> Node {
        let node = Node(inode: InodeNumber(nextInode), name: name, kind: kind, modifiedAt: modifiedAt)
        pendingFiles += kind.isPending ? 1 : 0
        nextInode += 1
        nodes[node.inode] = node
        names[name] = node
        return node
    }

    mutating func addHandle(_ file: OpenFile) -> FileHandle {
        let handle = FileHandle(nextHandle)
        nextHandle += 1
        handles[handle] = file
        return handle
    }

    /// Forgets a removed node once neither the kernel nor an open handle refers to it.
    mutating func dropIfUnused(_ node: Node) {
        if node.isRemoved, node.lookups == 0, node.openHandles == 0 {
            nodes[node.inode] = nil
        }
    }
}

/// The namespace behind its lock, and the FORGETs that arrived while the lock was held.
///
/// A FORGET needs no reply, yet the kernel sends it right after the request that dropped the
/// file (an unlink, say), while the next request is already on its way. Taking the lock for it
/// then made that next request sleep on a contended lock; the FORGET is instead queued and
/// applied by whoever holds the lock next. Lookup counts only add and subtract, so a late
/// FORGET leaves them as an early one would.
final class GuardedNamespace: Sendable {
    private struct Forget {
        let inode: InodeNumber
        let lookups: UInt64
    }

    private let namespace: Mutex<Namespace>
    private let forgets = Mutex<[Forget]>([])
    /// How many FORGETs wait in `forgets`: a request finds none without taking that lock.
    private let queuedForgets = Atomic<Int>(0)
    /// Set while a request holds the namespace: a FORGET then queues without trying the lock,
    /// whose failed try is a system call (a priority-inheritance futex).
    private let held = Atomic<Bool>(false)

    init(_ namespace: sending Namespace) {
        self.namespace = Mutex(namespace)
    }

    func withLock<Result, E: Error>(_ body: (inout Namespace) throws(E) -> sending Result) throws(E) -> sending Result {
        try namespace.withLock { (ns: inout sending Namespace) throws(E) -> sending Result in
            held.store(true, ordering: .relaxed)
            defer { held.store(false, ordering: .relaxed) }
            applyForgets(to: &ns)
            return try body(&ns)
        }
    }

    /// Whether a request holds the namespace now: tests look, from inside work that must run
    /// outside it (fsync's disk sync).
    var isHeld: Bool { held.load(ordering: .relaxed) }

    /// Applies the FORGET now if the lock is free, else leaves it to the lock's next holder.
    func forget(_ inode: InodeNumber, lookups: UInt64) {
        forgets.withLock { queued in
            queued.append(Forget(inode: inode, lookups: lookups))
            queuedForgets.add(1, ordering: .releasing)
        }
        guard !held.load(ordering: .relaxed) else { return }
        _ = namespace.withLockIfAvailable { (ns: inout sending Namespace) -> Void in applyForgets(to: &ns) }
    }

    private func applyForgets(to ns: inout Namespace) {
        guard queuedForgets.load(ordering: .acquiring) > 0 else { return }
        let queued = forgets.withLock { queued -> [Forget] in
            defer { queued.removeAll(keepingCapacity: true) }
            queuedForgets.subtract(queued.count, ordering: .relaxed)
            return queued
        }
        for forget in queued {
            guard let node = ns.nodes[forget.inode] else { continue }
            node.lookups -= min(forget.lookups, node.lookups)
            ns.dropIfUnused(node)
        }
    }
}
