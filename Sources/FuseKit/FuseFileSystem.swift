/// A file system served through the FUSE low-level API: one method per `fuse_lowlevel_ops`
/// request. Methods run on libfuse's worker threads, several at once.
///
/// A method returns its answer or throws; the thrown error becomes the reply's errno through
/// `errno(for:)`. Names are already copied into Swift strings; a name that is not valid UTF-8
/// never reaches a method (EINVAL).
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
    func fsyncdir(inode: InodeNumber, handle: FileHandle, dataOnly: Bool) throws

    func statfs(inode: InodeNumber) throws -> FileSystemStatistics
    func getxattr(inode: InodeNumber, name: String) throws -> [UInt8]
    func listxattr(inode: InodeNumber) throws -> [String]
    func setxattr(inode: InodeNumber, name: String, value: [UInt8], flags: Int32) throws
    func removexattr(inode: InodeNumber, name: String) throws

    /// The errno a thrown error is answered with. One place decides it.
    func errno(for error: any Error) -> Int32
}
