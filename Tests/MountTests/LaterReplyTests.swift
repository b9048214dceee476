import Foundation
import FuseKit
import Glibc
import KVTestSupport
import Synchronization
import Testing

/// A root holding `count` directories `d0`, `d1`, ..., whose fsync is answered later, when the
/// test says: each directory has its own lock in the kernel, so their fsyncs reach the file
/// system all at once.
private final class SlowSyncFileSystem: FuseFileSystem {
    let count: Int
    let held = Mutex<[Reply]>([])

    init(count: Int) { self.count = count }

    private func attributes(_ inode: InodeNumber) -> FileAttributes {
        let time = TimeStamp(secondsSince1970: 0)
        return FileAttributes(inode: inode, kind: .directory, permissions: 0o755, size: 0, linkCount: 2, uid: getuid(),
                              gid: getgid(), accessTime: time, modificationTime: time, changeTime: time)
    }

    func lookup(parent: InodeNumber, name: String, context: RequestContext) throws -> LookupResult {
        guard parent == .root, name.hasPrefix("d"), let index = Int(name.dropFirst()), (0..<count).contains(index) else {
            return .notFound(timeout: 0)
        }
        return .found(Entry(attributes: attributes(InodeNumber(UInt64(index) + 2)), attributeTimeout: 60, entryTimeout: 60))
    }

    func getattr(inode: InodeNumber) throws -> AttributesReply {
        guard inode.rawValue < UInt64(count) + 2 else { throw Errno.noEntry }
        return AttributesReply(attributes: attributes(inode), timeout: 0)
    }

    func opendir(inode: InodeNumber) throws -> FuseKit.FileHandle { FuseKit.FileHandle(inode.rawValue) }

    func fsyncdir(inode: InodeNumber, handle: FuseKit.FileHandle, dataOnly: Bool) throws -> Answer {
        .later { [self] reply in held.withLock { $0.append(reply) } }
    }

    func errno(for error: any Error) -> Int32 { (error as? Errno)?.rawValue ?? EIO }
}

/// What a thread's fsync of a directory returned: 0 or its errno; nil while it waits.
private func fsyncOf(_ path: String) -> Int32 {
    let fd = open(path, O_RDONLY | O_DIRECTORY)
    guard fd >= 0 else { return -errno }
    defer { close(fd) }
    return fsync(fd) == 0 ? 0 : errno
}

@Suite("Replies sent later", .serialized)
struct LaterReplyTests {
    @Test("12 fsyncs waiting for their answer, more than libfuse's 10 request threads, hold none: stat answers meanwhile, and each gets its one answer")
    func waitingRequestsHoldNoThread() throws {
        try withTemporaryDirectory { dir in
            let mountpoint = try dir.privateSubdirectory("mnt")
            let fs = SlowSyncFileSystem(count: 12)
            let mount = try FuseMount(fileSystem: fs, mountpoint: mountpoint, options: ["fsname=slow", "subtype=slow"])
            let finished = DispatchSemaphore(value: 0)
            Thread { mount.run(); finished.signal() }.start()
            let results = Mutex<[Int: Int32]>([:])
            let ended = DispatchGroup()
            defer {
                // Whatever failed above: answer what waits, so that every thread ends and the mount goes.
                for reply in fs.held.withLock({ $0 }) { reply.answer(Result<Void, Errno>.failure(.io)) }
                _ = ended.wait(timeout: .now() + 10)
                mount.unmount()
                finished.wait()
            }
            for index in 0..<12 {
                ended.enter()
                Thread {
                    let result = fsyncOf(mountpoint + "/d\(index)")
                    results.withLock { $0[index] = result }
                    ended.leave()
                }.start()
            }
            let deadline = Date().addingTimeInterval(10)
            while fs.held.withLock({ $0.count }) < 12, Date() < deadline { usleep(20_000) }
            #expect(fs.held.withLock { $0.count } == 12, "all 12 fsyncs reach the file system at once")
            #expect(results.withLock { $0.isEmpty }, "none is answered before the file system answers")

            let statted = DispatchSemaphore(value: 0)
            Thread {
                var st = stat()
                if stat(mountpoint, &st) == 0 { statted.signal() }
            }.start()
            #expect(statted.wait(timeout: .now() + 5) == .success, "stat of the mount answers within 5 s while the fsyncs wait")

            let replies = fs.held.withLock { $0 }
            for (index, reply) in replies.enumerated() {
                if index % 2 == 0 {
                    reply.answer(Result<Void, Errno>.success(()))
                } else {
                    reply.answer(Result<Void, Errno>.failure(.noSpace))
                }
                reply.answer(Result<Void, Errno>.failure(.io))  // a second answer is not sent
            }
            #expect(ended.wait(timeout: .now() + 10) == .success, "every fsync ends once answered")
            let codes = results.withLock { $0.values.sorted() }
            #expect(codes == Array(repeating: 0, count: 6) + Array(repeating: ENOSPC, count: 6), "\(codes)")
        }
    }

    @Test("a reply is sent once: the first answer, else EIO when it is dropped unanswered")
    func oneAnswer() {
        let fs = SlowSyncFileSystem(count: 0)
        let sent = Mutex<[Int32]>([])
        do {
            let reply = Reply(errnoFrom: fs) { code in sent.withLock { $0.append(code) } }
            reply.answer(Result<Void, Errno>.failure(.noSpace))
            reply.answer(Result<Void, Errno>.success(()))
        }
        do {
            _ = Reply(errnoFrom: fs) { code in sent.withLock { $0.append(code) } }
        }
        #expect(sent.withLock { $0 } == [ENOSPC, EIO])
    }
}
