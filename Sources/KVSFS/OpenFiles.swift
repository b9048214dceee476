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
            if flags.isWritable { try checkMayChange(context) }
            if flags.isWritable, node.key != nil { try checkWritable(context) }
            let remoteWrite = sync?.remoteWrite(in: context)
            if flags.isWritable { try checkMayBecomeKey(node, remoteWrite: remoteWrite) }
            return open(node, flags: flags, remoteWrite: remoteWrite, in: &ns)
        }
    }

    public func create(parent: InodeNumber, name: String, mode: UInt32, flags: OpenFlags, context: RequestContext) throws -> (Entry, OpenReply) {
        let name = KeyName.canonical(name)
        return try state.withLock { ns in
            guard parent == .root else { throw FileSystemError.notADirectory }
            guard let nameClass = try classify(name) else { throw FileSystemError.nonCanonicalName(name) }
            try checkMayChange(context)
            if case .key = nameClass { try checkWritable(context) }
            if let existing = try visibleNode(named: name, in: &ns) {
                if flags.exclusive { throw FileSystemError.fileExists }
                if flags.isWritable { try checkMayBecomeKey(existing, remoteWrite: sync?.remoteWrite(in: context)) }
                existing.lookups += 1
                return (entry(for: existing), open(existing, flags: flags, remoteWrite: sync?.remoteWrite(in: context), in: &ns))
            }
            guard ns.pendingFiles < configuration.maxPendingFiles else {
                throw FileSystemError.tooManyEditorFiles(limit: configuration.maxPendingFiles)
            }
            let kind: Node.Kind
            switch nameClass {
            case .editorFile:
                kind = .editorFile(EditorFile(content: [], hiddenKey: nil))
            case .key(let key):
                if store.entry(forKey: key) == nil, sync?.remoteWrite(in: context) == nil { try store.ledger.checkNewKey(usage: store.usage) }
                kind = .placeholder(key)
            }
            let node = ns.addNode(name: name, kind: kind, modifiedAt: Date())
            ns.directoryModifiedAt = node.modifiedAt
            node.lookups += 1
            return (entry(for: node), open(node, flags: flags, remoteWrite: sync?.remoteWrite(in: context), in: &ns))
        }
    }

    public func read(inode: InodeNumber, handle: FileHandle, offset: Int, size: Int) throws -> [UInt8] {
        try state.withLock { ns in
            guard let file = ns.handles[handle] else { throw FileSystemError.badHandle }
            // A reader starting over reads what is committed now; one going on reads the rest
            // of the value it started, so a value read in several requests is one value.
            if !file.writable, offset == 0 { file.snapshot = content(of: file.node) }
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
                    if file.remoteWrite == nil { try checkGrowth(of: file.node, to: end) }
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
                    logger.warning("a write to \(file.node.name) closed without flush was refused: \(error)")
                }
            }
            file.node.openHandles -= 1
            if file.writable { file.node.openWriters -= 1 }
            ns.dropIfUnused(file.node)
        }
    }

    func open(_ node: Node, flags: OpenFlags, remoteWrite: RemoteWrite?, in ns: inout Namespace) -> OpenReply {
        let file = OpenFile(node: node, writable: flags.isWritable, remoteWrite: remoteWrite)
        node.openHandles += 1
        if file.writable {
            node.openWriters += 1
            if flags.truncates {
                file.buffer = []
                file.dirty = true
            }
        } else {
            file.snapshot = content(of: node)
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

    /// Refuses, up front, writing a file that shows a default when the store holds its limit of
    /// keys (ENOSPC): its value would be a new key. The applier always may.
    func checkMayBecomeKey(_ node: Node, remoteWrite: RemoteWrite?) throws {
        if node.isRegisteredDefault, remoteWrite == nil { try store.ledger.checkNewKey(usage: store.usage) }
    }

    /// Refuses any change through a read-only mount (EROFS), but the applier's.
    func checkMayChange(_ context: RequestContext) throws {
        if configuration.readOnly, sync?.remoteWrite(in: context) == nil { throw FileSystemError.readOnlyMount }
    }

    /// Refuses a local change to a key up front when the store is read-only here (EROFS);
    /// the thread applying remote changes always may.
    func checkWritable(_ context: RequestContext) throws {
        if let reason = store.readOnly, sync?.remoteWrite(in: context) == nil { throw StoreError.readOnly(reason) }
    }

    /// Truncation: of the handle's buffer when a writer asks, else of every open writer's
    /// buffer, else of the value itself (committed at once).
    func truncate(_ node: Node, to size: Int, through handle: OpenFile?, in ns: inout Namespace) throws {
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
}
