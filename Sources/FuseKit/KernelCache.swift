import CFuse
import Glibc

/// How a file system tells the kernel about changes that reached its files without a request
/// through the kernel, so that the kernel does not go on answering from what it cached. Each
/// notice returns 0, or the errno the kernel answered: ENOENT says it held nothing to drop.
public protocol KernelCache: Sendable {
    /// Drops the cached attributes and pages of `inode`: the next read asks again.
    func forgetContent(of inode: InodeNumber) -> Int32
    /// Drops the kernel's entry for `name` in `parent`, negative or not: the next use looks it up.
    func forgetName(_ name: String, in parent: InodeNumber) -> Int32
    /// Tells the kernel that `name`, which was `inode`, is gone from `parent`: the name goes,
    /// and descriptors open on it see a file with no links. (No inotify event comes of it.)
    func announceRemoval(of name: String, inode: InodeNumber, from parent: InodeNumber) -> Int32
}

/// The session's notices to the kernel (`fuse_lowlevel_notify_*`). Each is a write to
/// /dev/fuse that the kernel answers at once; one for something the kernel does not hold
/// fails with ENOENT, which says there was nothing to drop. Never called from a request
/// handler: the kernel may wait for that handler's own reply.
extension FuseMount: KernelCache {
    public func forgetContent(of inode: InodeNumber) -> Int32 {
        -fuse_lowlevel_notify_inval_inode(session, fuse_ino_t(inode.rawValue), 0, 0)
    }

    public func forgetName(_ name: String, in parent: InodeNumber) -> Int32 {
        // libfuse sends the name with its terminating NUL: a C string, its length without it.
        -name.withCString { fuse_lowlevel_notify_inval_entry(session, fuse_ino_t(parent.rawValue), $0, strlen($0)) }
    }

    public func announceRemoval(of name: String, inode: InodeNumber, from parent: InodeNumber) -> Int32 {
        -name.withCString { fuse_lowlevel_notify_delete(session, fuse_ino_t(parent.rawValue), fuse_ino_t(inode.rawValue), $0, strlen($0)) }
    }
}
