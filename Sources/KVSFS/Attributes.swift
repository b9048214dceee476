import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Logging
import Synchronization

/// What the mount shows of a key besides its name: attributes, the file's bytes in the
/// mount's format, extended attributes and `df`'s figures.
extension KeyValueFileSystem {
    public func getattr(inode: InodeNumber) throws -> AttributesReply {
        try state.withLock { ns in
            if inode == .root { return rootAttributes(ns) }
            let node = try existingNode(inode, in: ns)
            return AttributesReply(attributes: attributes(of: node), timeout: attributeTimeout(of: node))
        }
    }

    public func setattr(inode: InodeNumber, changes: AttributeChanges, handle: FileHandle?, context: RequestContext) throws -> AttributesReply {
        try checkMayChange(context)
        return try state.withLock { ns in
            if inode == .root {
                if let permissions = changes.permissions { try modeRule.check(mode: permissions, shown: ModeRule.directoryMode) }
                try modeRule.check(uid: changes.uid, gid: changes.gid)
                return rootAttributes(ns)
            }
            let node = try existingNode(inode, in: ns)
            try modeRule.check(uid: changes.uid, gid: changes.gid)
            if let permissions = changes.permissions {
                if case .editorFile = node.kind {
                    // A scratch file's modes are not judged: mkstemp makes it 0600 whatever it
                    // stands in for (rsync chmods it so again); the key it becomes shows 0644.
                } else {
                    try modeRule.check(mode: permissions, shown: ModeRule.fileMode)
                    node.modeAsked = nil
                }
            }
            if let size = changes.size {
                try truncate(node, to: Int(size), through: handle.flatMap { ns.handles[$0] }, in: &ns)
            }
            if let change = changes.modificationTime { setModificationTime(change, of: node, in: ns) }
            return AttributesReply(attributes: attributes(of: node), timeout: attributeTimeout(of: node))
        }
    }

    /// `df`: blocks of one byte, the store's byte quota and its use; files are keys.
    public func statfs(inode: InodeNumber) throws -> FileSystemStatistics {
        let ledger = store.ledger
        let room = ledger.room(leftBy: store.usage)
        return FileSystemStatistics(
            blockSize: 1,
            blocks: UInt64(ledger.limits.totalBytes),
            blocksFree: UInt64(room.bytes),
            files: UInt64(ledger.limits.keys),
            filesFree: UInt64(room.keys),
            nameMax: 255)
    }

    /// The bytes a node's file holds, in the mount's format.
    func content(of node: Node) -> [UInt8] {
        switch node.kind {
        case .key(let key):
            guard let entry = store.entry(forKey: key) else { return [] }
            return rendering(entry.xml, ofKey: key, in: node)
        case .registeredDefault(let key, let registered):
            return rendering(registered.xml, ofKey: key, in: node)
        case .placeholder:
            return []
        case .editorFile(let file):
            return file.content
        case .removed(let content, _):
            return content
        }
    }

    /// A value's canonical XML in the mount's format, rendered once per value. A value that
    /// XML 1.0 cannot carry (a string holding a control character) shows in binary on an XML
    /// mount, as `kvsfs export` writes it: every property-list reader reads that back.
    private func rendering(_ xml: [UInt8], ofKey key: String, in node: Node) -> [UInt8] {
        if let rendered = node.rendered, rendered.xml == xml { return rendered.bytes }
        let format: ValueFormat = configuration.format == .xml && PropertyListCodec.carriesInXML10(xml) ? .xml : .binary
        guard format != .xml else {
            node.rendered = (xml, xml)  // one buffer twice: the next comparison is by identity
            return xml
        }
        do {
            let bytes = try PropertyListCodec.encode(try PropertyListCodec.decode(xml), as: format)
            node.rendered = (xml, bytes)
            return bytes
        } catch {
            logger.error("cannot render \(key) as \(format): \(error)")
            return xml
        }
    }

    func attributes(of node: Node) -> FileAttributes {
        var modified = node.modifiedAt
        let size: Int
        let setTime: TimeStamp?
        if case .key(let key) = node.kind, let entry = store.entry(forKey: key) {
            // One look-up of the key: in the default format the file is mostly the stored XML.
            modified = entry.modifiedAt
            size = rendering(entry.xml, ofKey: key, in: node).count
            setTime = node.shownSetTime(holding: entry.xml)
        } else {
            size = content(of: node).count
            setTime = node.isKey ? node.shownSetTime(holding: nil) : node.setTime?.time
        }
        // mtime (and atime) is a time set with utimensat while it holds; ctime is always when
        // the content last changed.
        let changed = TimeStamp(secondsSince1970: modified.timeIntervalSince1970)
        let time = setTime ?? changed
        return FileAttributes(
            inode: node.inode, kind: .regularFile, permissions: ModeRule.fileMode, size: UInt64(size),
            linkCount: node.isRemoved ? 0 : 1, uid: configuration.uid, gid: configuration.gid,
            accessTime: time, modificationTime: time, changeTime: changed)
    }

    /// Keys nobody is writing may be cached long; anything else may change without the kernel
    /// seeing its size change (a commit re-renders the value), so it is not cached.
    func attributeTimeout(of node: Node) -> Double {
        node.isKey && node.openWriters == 0 ? configuration.cacheTimeout : 0
    }

    func entry(for node: Node) -> Entry {
        Entry(attributes: attributes(of: node), attributeTimeout: attributeTimeout(of: node), entryTimeout: entryTimeout(of: node))
    }

    func rootAttributes(_ ns: Namespace) -> AttributesReply {
        let time = TimeStamp(secondsSince1970: ns.directoryModifiedAt.timeIntervalSince1970)
        let attributes = FileAttributes(
            inode: .root, kind: .directory, permissions: ModeRule.directoryMode, size: 0, linkCount: 2,
            uid: configuration.uid, gid: configuration.gid, accessTime: time, modificationTime: time, changeTime: time)
        return AttributesReply(attributes: attributes, timeout: configuration.cacheTimeout)
    }

    // MARK: - Extended attributes

    public func getxattr(inode: InodeNumber, name: String) throws -> [UInt8] {
        if inode == .root {
            guard let value = try rootAttributes()[name] else { throw FileSystemError.noSuchAttribute }
            return Array(value.utf8)
        }
        return try state.withLock { ns in
            let node = try existingNode(inode, in: ns)
            let type: ValueType
            let syncState: String
            let key: String
            switch node.kind {
            case .key(let name):
                guard let entry = store.entry(forKey: name) else { throw FileSystemError.noSuchAttribute }
                key = name
                type = entry.type
                syncState = (store.syncState(forKey: key) ?? .pending).rawValue
            case .registeredDefault(let name, let registered):
                key = name
                type = registered.value.type
                syncState = Self.defaultSyncState
            case .placeholder, .editorFile, .removed:
                throw FileSystemError.noSuchAttribute
            }
            switch name {
            case Self.typeAttribute: return Array(type.rawValue.utf8)
            case Self.syncAttribute where sync != nil: return Array(syncState.utf8)
            case Self.conflictAttribute:
                guard let conflict = store.conflict(forKey: key) else { throw FileSystemError.noSuchAttribute }
                return Array(conflict.summary(names: try store.deviceNames(of: conflict.devices)).utf8)
            case Self.schemaAttribute:
                let held = store.schema
                if let reason = held.unreadable {
                    return Self.attributeValue("the store's schema (version \(held.version)) cannot be read by this kvsfs: \(reason)")
                }
                guard let words = held.rules?.describe(key) else { throw FileSystemError.noSuchAttribute }
                return Self.attributeValue(words)
            default: throw FileSystemError.noSuchAttribute
            }
        }
    }

    /// `text` as an attribute's value: cut, at a character, to the kernel's 64 KiB.
    static func attributeValue(_ text: String) -> [UInt8] {
        let limit = MountStatus.maximumJSONBytes
        guard text.utf8.count > limit else { return Array(text.utf8) }
        var cut = String.UnicodeScalarView()
        var bytes = 0
        for scalar in text.unicodeScalars {
            bytes += String(scalar).utf8.count
            guard bytes <= limit - 3 else { break }
            cut.append(scalar)
        }
        return Array((String(cut) + "…").utf8)
    }

    public func listxattr(inode: InodeNumber) throws -> [String] {
        if inode == .root { return try rootAttributes().keys.sorted() }
        return try state.withLock { ns in
            let node = try existingNode(inode, in: ns)
            let key: String
            switch node.kind {
            case .key(let name), .registeredDefault(let name, _): key = name
            case .placeholder, .editorFile, .removed: return []
            }
            var names = sync == nil ? [Self.typeAttribute] : [Self.syncAttribute, Self.typeAttribute]
            if store.conflict(forKey: key) != nil { names.insert(Self.conflictAttribute, at: 0) }
            let held = store.schema
            if held.unreadable != nil || held.rules?.describe(key) != nil { names.append(Self.schemaAttribute) }
            return names.sorted()
        }
    }

    /// The root's attributes: the mount's status, on every mount, and sync's own when it syncs.
    func rootAttributes() throws -> [String: String] {
        let status = MountStatus(store: store, location: configuration.location, sync: sync?.standing())
        return try status.attributes().merging(sync?.rootAttributes() ?? [:]) { _, sync in sync }
    }

    public func setxattr(inode: InodeNumber, name: String, value: [UInt8], flags: Int32) throws {
        throw name.hasPrefix("user.kvsfs.") ? FileSystemError.attributeReadOnly : FileSystemError.attributesNotSupported
    }

    public func removexattr(inode: InodeNumber, name: String) throws {
        throw name.hasPrefix("user.kvsfs.") ? FileSystemError.attributeReadOnly : FileSystemError.attributesNotSupported
    }
}
