import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Logging
import Synchronization

/// When and how what a handle wrote becomes a key's value: at flush, fsync or release, whole,
/// decoded and checked against the quotas; a remote change written by the applier is taken
/// in as that change. Decoding happens before the namespace lock where it can.
extension KeyValueFileSystem {
    /// Commits what a handle wrote. Idempotent: a second flush of the same data does nothing.
    func commit(_ file: OpenFile, decoded: DecodedContent? = nil, in ns: inout Namespace) throws {
        guard let bytes = try file.state.bytesToCommit() else { return }
        do {
            if let shown = file.shown, shown.change.key == file.node.key {
                commitShown(to: file.node, in: &ns)
            } else {
                try commit(bytes, to: file.node, decoded: decoded, in: &ns)
            }
            file.state.committed()
            committedSetTime(of: file.node)
        } catch {
            droppedSetTime(of: file.node)
            // Told at release, if the handle ends refused: a shell's redirection flushes an empty
            // duplicate before it writes, and that refusal is cleared by the write.
            file.state.refusedCommit(error)
            throw error
        }
    }

    /// Makes `content` the node's content: for a key, a parsed value checked against the quotas.
    func commit(_ content: [UInt8], to node: Node, decoded: DecodedContent? = nil, in ns: inout Namespace) throws {
        switch node.kind {
        case .key(let key):
            try store.put(try decode(content, reusing: decoded), forKey: key)
        case .placeholder(let key):
            guard !content.isEmpty else { return }
            if let mode = node.modeAsked, !modeRule.admitsCreated(mode: mode) { throw FileSystemError.permissionsFixed }
            try store.put(try decode(content, reusing: decoded), forKey: key)
            unhide(key, in: &ns)
            ns.setKind(node, .key(key))
        case .registeredDefault(let key, _):
            try store.put(try decode(content, reusing: decoded), forKey: key)
            ns.setKind(node, .key(key))
        case .editorFile(var file):
            file.content = content
            ns.setKind(node, .editorFile(file))
            node.modifiedAt = Date()
        case .removed:
            return
        }
        node.rendered = nil
    }

    /// Brings the node along with the change the applier showed: the store holds it already
    /// (with its stamp and sync state) and is not written again.
    func commitShown(to node: Node, in ns: inout Namespace) {
        switch node.kind {
        case .placeholder(let key), .registeredDefault(let key, _):
            guard store.entry(forKey: key) != nil else { break }
            unhide(key, in: &ns)
            ns.setKind(node, .key(key))
        case .key, .editorFile, .removed:
            break
        }
        node.rendered = nil
    }

    /// The value `content` holds, within the store's per-value limit: the one `decoded`
    /// found before the lock when the bytes are the same, else decoded now.
    func decode(_ content: [UInt8], reusing decoded: DecodedContent? = nil) throws -> PropertyListValue {
        guard !content.isEmpty else { throw FileSystemError.emptyValue }
        if let decoded, decoded.bytes == content { return try decoded.value.get() }
        return try PropertyListCodec.decode(content, limits: decodingLimits)
    }

    var decodingLimits: PropertyListDecodingLimits {
        PropertyListDecodingLimits(maxBytes: store.limits.valueBytes)
    }

    /// Decodes, without the namespace lock, what a handle would commit: a large or hostile
    /// value then holds up no other request. Only a guess: the commit, under the lock, uses
    /// it only if the handle still holds the same bytes.
    func decodeUnlocked(_ handle: FileHandle) -> DecodedContent? {
        var decodedAtWrite: DecodedContent?
        let decoded = decodeUnlocked { ns in
            guard let file = ns.handles[handle], file.shown == nil, file.node.key != nil, let due = file.state.dueBytes else { return nil }
            // Decoded already at the write that made them, for the store's schema.
            if let atWrite = file.decodedAtWrite, atWrite.bytes == due {
                decodedAtWrite = atWrite
                return nil
            }
            return due
        }
        return decodedAtWrite ?? decoded
    }

    /// Decodes the bytes `pick` finds under the lock, after letting go of it.
    func decodeUnlocked(_ pick: (inout Namespace) -> [UInt8]?) -> DecodedContent? {
        guard let bytes = state.withLock({ pick(&$0) }), !bytes.isEmpty else { return nil }
        return DecodedContent(decoding: bytes, limits: decodingLimits)
    }
}
