import Foundation
import FuseKit
import Glibc
import KVTestSupport
import Testing

/// A file system that implements nothing but the root: every other operation is FuseKit's
/// default.
private final class BareFileSystem: FuseFileSystem {
    func lookup(parent: InodeNumber, name: String, context: RequestContext) throws -> LookupResult {
        .notFound(timeout: 0)
    }

    func getattr(inode: InodeNumber) throws -> AttributesReply {
        guard inode == .root else { throw Errno.noEntry }
        let time = TimeStamp(secondsSince1970: 0)
        return AttributesReply(
            attributes: FileAttributes(inode: .root, kind: .directory, permissions: 0o755, size: 0, linkCount: 2, uid: getuid(),
                                       gid: getgid(), accessTime: time, modificationTime: time, changeTime: time),
            timeout: 0)
    }

    func errno(for error: any Error) -> Int32 { (error as? Errno)?.rawValue ?? EIO }
}

@Suite("Operations a file system leaves out", .serialized)
struct OperationDefaultsTests {
    @Test("are ENOSYS through a real mount, and df still answers")
    func leftOutOperationsAreNotImplemented() throws {
        try withTemporaryDirectory { dir in
            let mountpoint = dir.subdirectory("mnt")
            let mount = try FuseMount(fileSystem: BareFileSystem(), mountpoint: mountpoint, options: ["fsname=bare", "subtype=bare"])
            let finished = DispatchSemaphore(value: 0)
            Thread { mount.run(); finished.signal() }.start()
            defer {
                mount.unmount()
                finished.wait()
            }
            errno = 0
            #expect(Glibc.mkdir(mountpoint + "/d", 0o755) == -1 && errno == ENOSYS)
            errno = 0
            #expect(Glibc.symlink("x", mountpoint + "/s") == -1 && errno == ENOSYS)
            var statistics = statvfs()
            #expect(statvfs(mountpoint, &statistics) == 0 && statistics.f_namemax == 255)
        }
    }
}
