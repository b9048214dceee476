import CFuse
import Glibc
import Synchronization

/// The kernel's caches of a mounted file system's files, written from the file system's side
/// (`fuse_lowlevel_notify_inval_inode`, `fuse_lowlevel_notify_store`).
///
/// A file system gets one through `FuseFileSystem.mounted(kernelCache:)`. Calls block until
/// the kernel has done what they ask, and the kernel may wait for a page being read, whose
/// READ is answered by another worker: never call them while holding a lock that a request
/// takes.
public final class KernelCache: Sendable {
    /// The session: calls come from requests, which run only while it exists.
    private nonisolated(unsafe) let session: OpaquePointer
    /// Set by the mount before its session ends: a late call then does nothing.
    private let ended = Atomic<Bool>(false)

    init(session: OpaquePointer) {
        self.session = session
    }

    /// The page size: what `replaceContent` stores at most, one page that a reader gets
    /// whole, old or new.
    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Makes `bytes` what the kernel's page cache holds for `inode`: first drops every cached
    /// page and the cached attributes, then stores `bytes` as the file's first page. Returns
    /// whether the kernel now holds them: false when it does not know the inode (it dropped it,
    /// or the mount has ended), or for more than a page.
    ///
    /// Readers see the old page or the new one, never a mix: the old page leaves the cache
    /// before the new one is filled, and a reader holding the old one keeps it whole. When the
    /// kernel's size for the file is larger than `bytes` (a value shrank), the page is stored
    /// but not marked up to date, and the next read asks the file system as before.
    public func replaceContent(of inode: InodeNumber, with bytes: [UInt8]) -> Bool {
        guard bytes.count <= Self.pageSize, !ended.load(ordering: .acquiring) else { return false }
        guard fuse_lowlevel_notify_inval_inode(session, fuse_ino_t(inode.rawValue), 0, 0) == 0 else { return false }
        return bytes.withUnsafeBytes { cfuse_notify_store(session, fuse_ino_t(inode.rawValue), 0, $0.baseAddress, $0.count) } == 0
    }

    /// Called by the mount before its session ends.
    func end() {
        ended.store(true, ordering: .releasing)
    }
}
