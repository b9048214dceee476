import FuseKit
import Glibc
import KVSFS
import KVStore
import Logging
import KVTestSupport
import Testing

/// Drives a `KeyValueFileSystem` the way the kernel would, without a mount.
final class Harness {
    let directory = TemporaryDirectory("kvsfs-logic")
    let store: KeyValueStore
    let fs: KeyValueFileSystem
    let context = RequestContext(threadID: 100, uid: getuid(), gid: getgid())

    init(limits: QuotaLimits? = nil, format: ValueFormat = .xml, readOnly: Bool = false, registersDefaults: Bool = false,
         allowOther: Bool = false, sync: (any MountSynchronizer)? = nil, applier: (any ChangeShowing)? = nil) throws {
        store = try makeStore(in: directory, limits: limits)
        let configuration = MountConfiguration(format: format, readOnly: readOnly, registersDefaults: registersDefaults,
                                               allowOther: allowOther)
        fs = KeyValueFileSystem(store: store, configuration: configuration, sync: sync, applier: applier, logger: .silent)
    }

    deinit { directory.remove() }

    func inode(_ name: String) throws -> InodeNumber? {
        if case .found(let entry) = try fs.lookup(parent: .root, name: name, context: context) { return entry.attributes.inode }
        return nil
    }

    /// open(2) of an existing file, or creat(2) of a new one when `create` is set.
    func open(_ name: String, _ flags: Int32, create: Bool = false) throws -> (InodeNumber, FileHandle) {
        if create, try inode(name) == nil {
            let (entry, reply) = try fs.create(parent: .root, name: name, mode: 0o644, flags: OpenFlags(rawValue: flags), context: context)
            return (entry.attributes.inode, reply.handle)
        }
        guard let ino = try inode(name) else { throw Errno.noEntry }
        return (ino, try fs.open(inode: ino, flags: OpenFlags(rawValue: flags), context: context).handle)
    }

    @discardableResult
    func write(_ ino: InodeNumber, _ handle: FileHandle, _ text: String, at offset: Int = 0) throws -> Int {
        try Array(text.utf8).withUnsafeBytes { try fs.write(inode: ino, handle: handle, offset: offset, bytes: $0, context: context) }
    }

    /// `echo TEXT > name`, closed with flush then release; returns the flush's error, if any.
    func writeFile(_ name: String, _ text: String) throws {
        let (ino, handle) = try open(name, O_WRONLY | O_CREAT | O_TRUNC, create: true)
        defer { fs.release(inode: ino, handle: handle) }
        try write(ino, handle, text)
        try fs.flush(inode: ino, handle: handle, context: context)
    }

    func readFile(_ name: String) throws -> String {
        let (ino, handle) = try open(name, O_RDONLY)
        defer { fs.release(inode: ino, handle: handle) }
        return String(decoding: try fs.read(inode: ino, handle: handle, offset: 0, size: 1 << 22), as: UTF8.self)
    }

    func value(_ key: String) throws -> PropertyListValue? {
        try store.entry(forKey: key).map { try PropertyListCodec.decode($0.xml) }
    }

    func names() throws -> [String] {
        let dir = try fs.opendir(inode: .root)
        defer { fs.releasedir(inode: .root, handle: dir) }
        return try fs.readdir(inode: .root, handle: dir, offset: 0).map(\.name).filter { $0 != "." && $0 != ".." }
    }

    func rename(_ from: String, _ to: String, _ flags: RenameFlags = []) throws {
        try fs.rename(parent: .root, name: from, newParent: .root, newName: to, flags: flags, context: context)
    }

    func unlink(_ name: String) throws {
        try fs.unlink(parent: .root, name: name, context: context)
    }

    func size(_ name: String) throws -> UInt64 {
        try fs.getattr(inode: try #require(try inode(name))).attributes.size
    }
}

/// The errno a call fails with, or nil when it succeeds.
func errnoOf(_ fs: KeyValueFileSystem, _ body: () throws -> Void) -> Int32? {
    do {
        try body()
        return nil
    } catch {
        return fs.errno(for: error)
    }
}
