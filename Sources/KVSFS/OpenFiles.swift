import Dispatch
import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Logging
import Synchronization

/// Opening, reading and writing files. A handle writes to a buffer of its own; the buffer
/// becomes the key's value only when committed (`CommitPolicy.swift`), whole.
extension KeyValueFileSystem {
    public func open(inode: InodeNumber, flags: OpenFlags, context: RequestContext) throws -> OpenReply {
        try state.withLock { ns in
            if inode == .root { throw Errno.isDirectory }
            let node = try existingNode(inode, in: ns)
            // A default a reload dropped since the kernel looked its name up: no program removed
            // it, and what a writer wrote to it would reach no key, so the kernel looks again
            // and opens or creates what the name is now. A file a program unlinked opens as on
            // any file system (/proc/self/fd/N), and a reader still reads what it showed.
            if flags.isWritable, case .removed(_, .defaultDropped) = node.kind { throw FileSystemError.removedSinceLookup }
            if flags.isWritable { try checkMayChange(context) }
            if flags.isWritable, node.key != nil { try checkWritable(context) }
            let shown = shownChange(in: context)
            try checkShownDefaultStands(shown, in: ns)
            if flags.isWritable { try checkMayBecomeKey(node, shown: shown) }
            return open(node, flags: flags, shown: shown, in: &ns)
        }
    }

    public func create(parent: InodeNumber, name: String, mode: UInt32, flags: OpenFlags, context: RequestContext) throws -> (Entry, OpenReply) {
        let name = KeyName.canonical(name)
        return try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            let shown = shownChange(in: context)
            try checkShownDefaultStands(shown, in: ns)
            // A new file made as mkstemp makes one, under rsync's name for it, is rsync's
            // temporary file: scratch (`EditorFileRule`). A file of that name that exists is
            // found below as what it is.
            let madeByMkstemp = flags.exclusive && mode & 0o7777 == 0o600 && EditorFileRule.isTransferShaped(name)
                && ns.names[name] == nil && KeyFileName.key(forFileName: name).map { store.entry(forKey: $0) == nil } ?? true
            guard let nameClass = try madeByMkstemp ? .editorFile : classify(name) else { throw FileSystemError.nonCanonicalName(name) }
            try checkMayChange(context)
            if case .key = nameClass { try checkWritable(context) }
            if let existing = try visibleNode(named: name, in: &ns) {
                if flags.exclusive { throw FileSystemError.fileExists }
                if flags.isWritable { try checkMayBecomeKey(existing, shown: shown) }
                existing.lookups += 1
                return (entry(for: existing), open(existing, flags: flags, shown: shown, in: &ns))
            }
            guard ns.pendingFiles < configuration.maxPendingFiles else {
                throw FileSystemError.tooManyEditorFiles(limit: configuration.maxPendingFiles)
            }
            let kind: Node.Kind
            switch nameClass {
            case .editorFile:
                kind = .editorFile(EditorFile(content: [], hiddenKey: nil))
            case .key(let key):
                if store.entry(forKey: key) == nil, shown == nil {
                    do {
                        try store.ledger.checkNewKey(usage: store.usage)
                    } catch {
                        tell(refusalOf: key, error)
                        throw error
                    }
                }
                kind = .placeholder(key)
            }
            let node = ns.addNode(name: name, kind: kind, modifiedAt: Date())
            // A new key's mode is judged when its first value is committed (`ModeRule`).
            if case .key = nameClass, shown == nil,
               !modeRule.admitsCreated(mode: mode) {
                node.modeAsked = mode
            }
            ns.directoryModifiedAt = node.modifiedAt
            node.lookups += 1
            return (entry(for: node), open(node, flags: flags, shown: shown, in: &ns))
        }
    }

    public func read(inode: InodeNumber, handle: FileHandle, offset: Int, size: Int) throws -> [UInt8] {
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            // A reader starting over reads what is committed now; one going on reads the rest
            // of the value it started, so a value read in several requests is one value.
            if offset == 0 { file.state.readFromStart(committed: content(of: file.node)) }
            let content = file.state.bytes ?? content(of: file.node)
            guard offset < content.count else { return [] }
            return Array(content[offset..<min(content.count, offset + size)])
        }
    }

    public func write(inode: InodeNumber, handle: FileHandle, offset: Int, bytes: UnsafeRawBufferPointer, context: RequestContext) throws -> Int {
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            guard file.writable else { throw FileSystemError.notOpenForWriting }
            try file.state.checkMayWrite()
            let held = file.state.takeBytesForWriting()  // keep `buffer` uniquely referenced while it grows
            let firstWrite = held == nil
            var buffer = held ?? content(of: file.node)
            if firstWrite { file.prefix.know(buffer.count) }
            let offset = file.appends ? buffer.count : offset
            let end = offset + bytes.count
            do {
                if end > buffer.count {
                    if file.shown == nil { try checkGrowth(of: file.node, to: end) }
                    buffer.append(contentsOf: repeatElement(0, count: end - buffer.count))
                }
                buffer.withUnsafeMutableBytes { target in
                    target.baseAddress!.advanced(by: offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
                }
                if file.shown == nil, let key = file.node.key {
                    try checkPrefix(of: file, in: buffer, writtenFrom: offset, to: end)
                    // Bytes past this write's end (an older value rewritten in place) may yet be cut.
                    let schema = store.schema
                    if end == buffer.count, schema.judgesWritten(buffer, forKey: key) {
                        let decoded = DecodedContent(decoding: buffer, limits: decodingLimits)
                        file.decodedAtWrite = decoded
                        if case .success(let value) = decoded.value,
                           let violation = schema.settledViolation(of: value, written: buffer, forKey: key) {
                            throw StoreError.schemaViolation(violation)
                        }
                    }
                }
            } catch {
                file.state.refusedWrite(buffer, reason: error)
                if let key = file.node.key { tell(refusalOf: key, error) }
                throw error
            }
            file.state.wrote(buffer)
            file.node.contentChanged()
            return bytes.count
        }
    }

    /// Refuses, at the write() that makes it so, bytes that no continuation can make a value
    /// (`ValuePrefixCheck`): a shell hears a failed write(), never a failed close(). Bytes
    /// are checked from offset 0 as they arrive; a write back over checked bytes checks again
    /// from 0, and one past a hole stops the checking (the commit's decode still decides).
    /// The check covers the bytes up to the end of this write only: what lies past it (an
    /// older, longer value being rewritten in place) may yet be cut off.
    func checkPrefix(of file: OpenFile, in buffer: [UInt8], writtenFrom offset: Int, to end: Int) throws {
        guard case .checking(var check, let checked, let known) = file.prefix else { return }
        file.prefix = .unchecked  // keep `check` uniquely referenced while it is fed
        guard offset <= max(checked, known) else { return }
        var from = checked
        if offset < checked {
            check = ValuePrefixCheck()
            from = 0
        }
        let verdict = buffer.withUnsafeBytes { all in check.feed(UnsafeRawBufferPointer(rebasing: all[from..<end])) }
        switch verdict {
        case .viable:
            file.prefix = .checking(check, checked: end, known: max(known, end))
        case .undecidable:
            file.prefix = .unchecked
        case .refused(let reason):
            file.prefix = .unchecked
            throw StoreError.invalidPropertyList(reason)
        }
    }

    public func flush(inode: InodeNumber, handle: FileHandle, context: RequestContext) throws {
        let decoded = decodeUnlocked(handle)
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            try commit(file, decoded: decoded, in: &ns)
        }
    }

    /// Commits the handle's bytes under the namespace lock, then makes the store durable once
    /// it is released: the disk sync takes milliseconds, and every request of the mount, readers
    /// included, needs that lock. The commit is in the store before the lock is released, so
    /// `makeDurable` takes it along; a failure of either fails the fsync with its errno.
    public func fsync(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws {
        let decoded = decodeUnlocked(handle)
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            try commit(file, decoded: decoded, in: &ns)
        }
        try store.makeDurable()
    }

    public func release(inode: InodeNumber, handle: FileHandle) {
        let decoded = decodeUnlocked(handle)
        let notices = state.withLock { ns -> [KernelNotice] in
            guard let file = ns.handles.removeValue(forKey: handle) else { return [] }
            if file.state.dueBytes != nil {
                do {
                    try commit(file, decoded: decoded, in: &ns)
                } catch {
                    // Told below, as a refusal the handle ended with.
                }
            }
            // Bytes never committed: a time set on them must not stay on the content that remains.
            if file.state.holdsUncommittedBytes { droppedSetTime(of: file.node) }
            if let refusal = file.state.refusalUntold, file.shown == nil, let key = file.node.key { tell(refusalOf: key, refusal) }
            file.node.openHandles -= 1
            if file.writable { file.node.openWriters -= 1 }
            let notices = dropRefusedPlaceholder(file, in: &ns)
            ns.dropIfUnused(file.node)
            return notices
        }
        // The kernel is told from another thread: this is a request of the mount's own.
        if !notices.isEmpty { DispatchQueue.global().async { [self] in tell(notices, of: "a refused new file") } }
    }

    /// A new file whose value was refused is gone once its last handle closes: the directory
    /// shows what the store holds, and the store holds no such key. (A placeholder nothing was
    /// refused to, such as `touch`'s empty file, stays.) Returns what the kernel must be told
    /// so that it forgets the name too.
    private func dropRefusedPlaceholder(_ file: OpenFile, in ns: inout Namespace) -> [KernelNotice] {
        guard case .placeholder = file.node.kind, file.node.openHandles == 0,
              file.state.isRefused else { return [] }
        let name = file.node.name
        remove(file.node, content: [], in: &ns)
        return [.removal(name, file.node.inode)]
    }

    func open(_ node: Node, flags: OpenFlags, shown: ShownChange?, in ns: inout Namespace) -> OpenReply {
        let state = HandleState.opened(writable: flags.isWritable, truncating: flags.truncates, committed: content(of: node))
        let file = OpenFile(node: node, appends: flags.appends, shown: shown, state: state)
        node.openHandles += 1
        if file.writable {
            node.openWriters += 1
            if shown != nil { file.prefix = .unchecked }
        }
        // Nothing goes through the page cache. Writes: a refused value never lingers there,
        // and the kernel skips its security.capability lookup before each buffered write.
        // Reads: the kernel cuts a cached read at the file's size as it knows it, and a writer
        // moves that size (its O_TRUNC open sets it to 0, its writes grow it) before anything
        // is committed, whenever it opens; a reader already open would read a cut value.
        return OpenReply(handle: ns.addHandle(file), keepCache: false, directIO: true, noFlush: !file.writable)
    }

    /// Refuses, before anything is committed, a file that grows past what its value may be.
    /// While a file is written its length counts as its size.
    func checkGrowth(of node: Node, to length: Int) throws {
        let limits = store.limits
        switch node.kind {
        case .editorFile:
            if length > limits.valueBytes { throw FileSystemError.editorFileTooLarge(limit: limits.valueBytes) }
        case .key(let key), .placeholder(let key), .registeredDefault(let key, _):
            // The value written so far, as the store would take it: what it leaves must fit.
            try store.ledger.checkReplacing(bytes: store.entry(forKey: key)?.size, with: length, usage: store.usage)
            try store.checkRoom(for: length)
        case .removed:
            break
        }
    }

    /// Refuses, up front, writing a file that shows a default when the store holds its limit of
    /// keys (ENOSPC): its value would be a new key. The applier always may.
    func checkMayBecomeKey(_ node: Node, shown: ShownChange?) throws {
        if node.isRegisteredDefault, shown == nil { try store.ledger.checkNewKey(usage: store.usage) }
    }

    /// Refuses any change through a read-only mount (EROFS), but the applier's.
    func checkMayChange(_ context: RequestContext) throws {
        if configuration.readOnly, shownChange(in: context) == nil { throw FileSystemError.readOnlyMount }
    }

    /// Refuses a local change to a key up front when the store is read-only here (EROFS);
    /// the thread applying remote changes always may.
    func checkWritable(_ context: RequestContext) throws {
        if let reason = store.readOnly, shownChange(in: context) == nil { throw StoreError.readOnly(reason) }
    }

    /// Truncation: of the handle's buffer when a writer asks, else of every open writer's
    /// buffer, else of the value itself (committed at once).
    func truncate(_ node: Node, to size: Int, through handle: OpenFile?, in ns: inout Namespace) throws {
        let writers = handle.map { $0.writable ? [$0] : [] } ?? ns.handles.values.filter { $0.node === node && $0.writable }
        guard writers.isEmpty else {
            for file in writers {
                try file.state.checkMayWrite()
                if file.state.bytes == nil { file.prefix.know(content(of: node).count) }
                var buffer = file.state.bytes ?? content(of: node)
                file.prefix.cut(to: size)
                if size > buffer.count {
                    try checkGrowth(of: node, to: size)
                    buffer.append(contentsOf: repeatElement(0, count: size - buffer.count))
                } else {
                    buffer.removeLast(buffer.count - size)
                }
                file.state.wrote(buffer)
                node.contentChanged()
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
}
