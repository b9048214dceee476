import CFuse
import Glibc
import Synchronization

/// Why a mount could not be made.
public struct FuseMountError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// A FUSE session mounted on a directory, serving one file system until it is unmounted.
public final class FuseMount: @unchecked Sendable {
    public let mountpoint: String
    let session: OpaquePointer
    private let box: Unmanaged<FileSystemBox>
    private let unmountedHere = Mutex(false)
    private let handlesSignals = Mutex(false)

    /// Mounts `fileSystem` on `mountpoint` with mount `options` (as for `-o`). Requests are
    /// served once `run()` is called.
    public init(fileSystem: any FuseFileSystem, mountpoint: String, options: [String]) throws(FuseMountError) {
        self.mountpoint = mountpoint
        let box = Unmanaged.passRetained(FileSystemBox(fileSystem))
        self.box = box
        var operations = makeLowLevelOperations()
        var args = fuse_args(argc: 0, argv: nil, allocated: 0)
        for argument in ["kvsfs"] + (options.isEmpty ? [] : ["-o", options.joined(separator: ",")]) {
            _ = cfuse_args_add(&args, argument)
        }
        defer { fuse_opt_free_args(&args) }
        guard let session = withUnsafePointer(to: &operations, /* libfuse copies the table */ { cfuse_session_new(&args, $0, box.toOpaque()) }) else {
            box.release()
            throw FuseMountError(description: "libfuse refused the mount options \(options.joined(separator: ","))")
        }
        guard fuse_session_mount(session, mountpoint) == 0 else {
            fuse_session_destroy(session)
            box.release()
            throw FuseMountError(description: "cannot mount on \(mountpoint) (is /dev/fuse there, and are you allowed to mount?)")
        }
        self.session = session
    }

    deinit {
        box.takeUnretainedValue().outstanding.endAll(with: ENOTCONN)
        fuse_session_destroy(session)
        box.release()
    }

    /// Makes SIGINT, SIGTERM and SIGHUP end `run()`. Call it on the thread that calls `run()`.
    /// The signals are unblocked there: a parent may have started this process with them blocked.
    public func handleSignals() {
        handlesSignals.withLock { $0 = true }
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        fuse_set_signal_handlers(session)
    }

    /// Serves requests on several threads until the mount is unmounted or a handled signal
    /// arrives, then unmounts. Returns 0 on a clean end (an unmount or SIGINT, SIGTERM,
    /// SIGHUP), else libfuse's error status.
    @discardableResult
    public func run() -> Int32 {
        var status = cfuse_session_loop_mt(session)
        // No request is served any more; one still owed a reply (a fsync waiting on the network,
        // say) is told the file system is going away, while the session can still send it.
        box.takeUnretainedValue().outstanding.endAll(with: ENOTCONN)
        if [SIGINT, SIGTERM, SIGHUP].contains(status) { status = 0 }
        if handlesSignals.withLock({ $0 }) { fuse_remove_signal_handlers(session) }
        if !unmountedHere.withLock({ $0 }) { fuse_session_unmount(session) }
        return status
    }

    /// Ends `run()` from another thread by unmounting (lazily if files are still open).
    public func unmount() {
        unmountedHere.withLock { $0 = true }
        fuse_session_exit(session)
        if umount2(mountpoint, 0) != 0 {
            umount2(mountpoint, Int32(MNT_DETACH))
        }
    }
}
