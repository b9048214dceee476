/// A file system served through the FUSE low-level API: one method per `fuse_lowlevel_ops`
/// request. Methods run on libfuse's worker threads, several at once.
///
/// A method returns its answer or throws; the thrown error becomes the reply's errno through
/// `errno(for:)`. One that may wait long answers later instead (`Answer`, `Reply`), so that
/// it holds none of libfuse's request threads while it waits. Names are already copied into
/// Swift strings; a name that is not valid UTF-8 never reaches a method (EINVAL).
public protocol FuseFileSystem: AnyObject, Sendable {
    func lookup(parent: InodeNumber, name: String, context: RequestContext) throws -> LookupResult
    func forget(inode: InodeNumber, lookups: UInt64)
    func getattr(inode: InodeNumber) throws -> AttributesReply
    func setattr(inode: InodeNumber, changes: AttributeChanges, handle: FileHandle?, context: RequestContext) throws -> AttributesReply

    func open(inode: InodeNumber, flags: OpenFlags, context: RequestContext) throws -> OpenReply
    func create(parent: InodeNumber, name: String, mode: UInt32, flags: OpenFlags, context: RequestContext) throws -> (Entry, OpenReply)
    func read(inode: InodeNumber, handle: FileHandle, offset: Int, size: Int) throws -> [UInt8]
    func write(inode: InodeNumber, handle: FileHandle, offset: Int, bytes: UnsafeRawBufferPointer, context: RequestContext) throws -> Int
    func flush(inode: InodeNumber, handle: FileHandle, context: RequestContext) throws
    func release(inode: InodeNumber, handle: FileHandle)
    func fsync(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws

    func unlink(parent: InodeNumber, name: String, context: RequestContext) throws
    func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags, context: RequestContext) throws
    func mkdir(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry
    func rmdir(parent: InodeNumber, name: String) throws
    func mknod(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry
    func symlink(target: String, parent: InodeNumber, name: String) throws -> Entry
    func link(inode: InodeNumber, newParent: InodeNumber, newName: String) throws -> Entry

    func opendir(inode: InodeNumber) throws -> FileHandle
    func readdir(inode: InodeNumber, handle: FileHandle, offset: Int) throws -> [DirectoryEntry]
    func releasedir(inode: InodeNumber, handle: FileHandle)
    /// May answer later (`Answer.later`): fsync of a directory may wait long.
    func fsyncdir(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws -> Answer

    func statfs(inode: InodeNumber) throws -> FileSystemStatistics
    func getxattr(inode: InodeNumber, name: String) throws -> [UInt8]
    func listxattr(inode: InodeNumber) throws -> [String]
    func setxattr(inode: InodeNumber, name: String, value: [UInt8], flags: Int32) throws
    func removexattr(inode: InodeNumber, name: String) throws

    /// The errno a thrown error is answered with. One place decides it.
    func errno(for error: any Error) -> Int32
}

/// What a file system that leaves an operation out answers: ENOSYS, which the kernel takes
/// as "not implemented" (for flush, fsync and the extended attributes it then stops asking
/// and answers for itself), or, where a request has no reply, nothing at all. Only lookup,
/// getattr and `errno(for:)` have no default.
extension FuseFileSystem {
    public func forget(inode: InodeNumber, lookups: UInt64) {}
    public func setattr(inode: InodeNumber, changes: AttributeChanges, handle: FileHandle?, context: RequestContext) throws -> AttributesReply {
        throw Errno.notImplemented
    }

    public func open(inode: InodeNumber, flags: OpenFlags, context: RequestContext) throws -> OpenReply { throw Errno.notImplemented }
    public func create(parent: InodeNumber, name: String, mode: UInt32, flags: OpenFlags, context: RequestContext) throws -> (Entry, OpenReply) {
        throw Errno.notImplemented
    }
    public func read(inode: InodeNumber, handle: FileHandle, offset: Int, size: Int) throws -> [UInt8] { throw Errno.notImplemented }
    public func write(inode: InodeNumber, handle: FileHandle, offset: Int, bytes: UnsafeRawBufferPointer, context: RequestContext) throws -> Int {
        throw Errno.notImplemented
    }
    public func flush(inode: InodeNumber, handle: FileHandle, context: RequestContext) throws { throw Errno.notImplemented }
    public func release(inode: InodeNumber, handle: FileHandle) {}
    public func fsync(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws { throw Errno.notImplemented }

    public func unlink(parent: InodeNumber, name: String, context: RequestContext) throws { throw Errno.notImplemented }
    public func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags, context: RequestContext) throws {
        throw Errno.notImplemented
    }
    public func mkdir(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry { throw Errno.notImplemented }
    public func rmdir(parent: InodeNumber, name: String) throws { throw Errno.notImplemented }
    public func mknod(parent: InodeNumber, name: String, mode: UInt32) throws -> Entry { throw Errno.notImplemented }
    public func symlink(target: String, parent: InodeNumber, name: String) throws -> Entry { throw Errno.notImplemented }
    public func link(inode: InodeNumber, newParent: InodeNumber, newName: String) throws -> Entry { throw Errno.notImplemented }

    public func opendir(inode: InodeNumber) throws -> FileHandle { throw Errno.notImplemented }
    public func readdir(inode: InodeNumber, handle: FileHandle, offset: Int) throws -> [DirectoryEntry] { throw Errno.notImplemented }
    public func releasedir(inode: InodeNumber, handle: FileHandle) {}
    public func fsyncdir(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws -> Answer { throw Errno.notImplemented }

    /// A file system with nothing to count: no blocks, no files, names up to 255 bytes.
    public func statfs(inode: InodeNumber) throws -> FileSystemStatistics {
        FileSystemStatistics(blockSize: 512, blocks: 0, blocksFree: 0, files: 0, filesFree: 0, nameMax: 255)
    }
    public func getxattr(inode: InodeNumber, name: String) throws -> [UInt8] { throw Errno.notImplemented }
    public func listxattr(inode: InodeNumber) throws -> [String] { throw Errno.notImplemented }
    public func setxattr(inode: InodeNumber, name: String, value: [UInt8], flags: Int32) throws { throw Errno.notImplemented }
    public func removexattr(inode: InodeNumber, name: String) throws { throw Errno.notImplemented }
}
