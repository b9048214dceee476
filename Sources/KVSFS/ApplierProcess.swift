import Dispatch
import FoundationEssentials
import FuseKit
import Glibc

/// The process through which the applier writes remote changes into the mount, and the wire
/// between it and the daemon: a stream socket carrying one step at a time, each answered with
/// an errno (0 when it was done).
///
/// Why a process of its own: a FUSE request the daemon has read but not answered when it is
/// killed is never answered. A thread of the daemon waiting on its own mount (in a write, an
/// unlink, the flush of a close) would keep the killed daemon from ending, and so keep its
/// connection open: the mount would hang and the next `kvsfs mount` would find the store
/// still locked. A child waiting on the mount holds nothing of the daemon's: the daemon
/// ends, the kernel aborts the connection as its device closes, and the child's wait ends.
///
/// Invariants: the child inherits no descriptor but the socket and the standard ones (in
/// particular not the daemon's /dev/fuse); it runs its steps on its main thread, so the
/// thread id FUSE reports for its requests is its process id; it ends when the socket closes.
public final class ApplierProcess {
    /// What the child is asked to do, in order: `begin` opens the mount's root (and answers
    /// ENOENT when `mountpoint` is no kvsfs mount's root any more), steps name files in it,
    /// and `end` closes it, so that nothing holds the mount between batches.
    /// `begin` names the mount by its device: a root on any other device (another mount over
    /// the same path, or the directory under it) is not this mount's, and nothing is written
    /// there.
    enum Step {
        case begin(mount: MountTable.Mount)
        case write(name: String, bytes: [UInt8])
        case unlink(name: String)
        case end

        fileprivate var code: Code {
            switch self {
            case .begin: .begin
            case .write: .write
            case .unlink: .unlink
            case .end: .end
            }
        }
    }

    /// Each step's first byte on the wire.
    fileprivate enum Code: UInt8 {
        case begin = 0x42, write = 0x57, unlink = 0x55, end = 0x45
    }

    /// How the daemon starts a child: the program and the arguments before the mountpoint.
    struct Command: Sendable {
        let executable: String
        let arguments: [String]
    }

    /// The first argument that makes `kvsfs` serve as the child (`serve(mountpoint:)`).
    public static let commandName = "__apply-remote-changes"
    /// The most a step may carry: a name is a file name, and a value is within any store's
    /// per-value limit.
    static let maximumNameBytes = 4096
    static let maximumValueBytes = 1 << 30

    let pid: pid_t
    private let socket: Int32

    private init(pid: pid_t, socket: Int32) {
        self.pid = pid
        self.socket = socket
    }

    /// Starts a child for `mountpoint`, with no signal blocked and SIGPIPE at its default.
    static func spawn(_ command: Command, mountpoint: String) throws(ApplierFailure) -> ApplierProcess {
        var ends: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw .cannotStart(String(cString: strerror(errno)))
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, ends[1], 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK) | Int16(POSIX_SPAWN_SETSIGDEF))
        let argv = ([command.executable] + command.arguments + [mountpoint]).map { strdup($0) } + [nil]
        let envp = ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, command.executable, &actions, &attributes, argv, envp)
        close(ends[1])
        guard spawned == 0 else {
            close(ends[0])
            throw .cannotStart(String(cString: strerror(spawned)))
        }
        return ApplierProcess(pid: child, socket: ends[0])
    }

    /// Has the child take `step`; returns its errno (0: done). Throws when the child is gone.
    func perform(_ step: Step) throws(ApplierFailure) -> Int32 {
        var frame = [step.code.rawValue]
        switch step {
        case .begin(let mount):
            frame += Self.word(mount.major) + Self.word(mount.minor)
        case .end:
            break
        case .write(let name, let bytes):
            frame += Self.field(Array(name.utf8)) + Self.field(bytes)
        case .unlink(let name):
            frame += Self.field(Array(name.utf8))
        }
        guard Self.send(frame, to: socket) else { throw .gone }
        guard let answer = Self.receive(4, from: socket) else { throw .gone }
        return Int32(bitPattern: UInt32(answer[0]) | UInt32(answer[1]) << 8 | UInt32(answer[2]) << 16 | UInt32(answer[3]) << 24)
    }

    /// Closes the socket, which ends the child, and reaps it from a thread of its own: a child
    /// still in a request of the mount ends only once that request is answered.
    func stop() {
        close(socket)
        let pid = pid
        DispatchQueue.global().async {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        }
    }

    // MARK: - The child

    /// Serves steps read from descriptor 0 until it closes; never returns.
    public static func serve(mountpoint: String) -> Never {
        closeInheritedDescriptors()
        var root: Int32 = -1
        while let byte = receive(1, from: 0)?.first {
            guard let code = Code(rawValue: byte) else { exit(2) }
            let answer: Int32
            switch code {
            case .begin:
                guard let device = receive(8, from: 0) else { exit(2) }
                if root >= 0 { close(root) }
                root = openMountRoot(mountpoint, major: number(device[0..<4]), minor: number(device[4..<8]))
                answer = root >= 0 ? 0 : ENOENT
            case .write:
                guard let name = receiveField(limit: maximumNameBytes), let bytes = receiveField(limit: maximumValueBytes) else { exit(2) }
                answer = root >= 0 ? writeFile(String(decoding: name, as: UTF8.self), bytes, in: root) : ENOENT
            case .unlink:
                guard let name = receiveField(limit: maximumNameBytes) else { exit(2) }
                answer = root >= 0 ? (unlinkat(root, String(decoding: name, as: UTF8.self), 0) == 0 ? 0 : errno) : ENOENT
            case .end:
                if root >= 0 { close(root) }
                root = -1
                answer = 0
            }
            let word = UInt32(bitPattern: answer)
            guard send([UInt8(word & 0xff), UInt8(word >> 8 & 0xff), UInt8(word >> 16 & 0xff), UInt8(word >> 24)], to: 0) else { exit(0) }
        }
        exit(0)
    }

    /// Closes every descriptor but 0, 1 and 2: one the daemon left open across exec would
    /// tie the daemon's fate to this process's (its /dev/fuse above all).
    private static func closeInheritedDescriptors() {
        guard let directory = opendir("/proc/self/fd") else { return }
        let own = dirfd(directory)
        var inherited = [Int32]()
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let descriptor = Int32(name), descriptor > 2, descriptor != own { inherited.append(descriptor) }
        }
        closedir(directory)
        for descriptor in inherited { close(descriptor) }
    }

    /// Opens the mount's root, or returns -1 when what `mountpoint` shows is not the root of
    /// the mount on device `major`:`minor` (after an unmount, or under another mount): nothing
    /// is ever written to the directory underneath, nor to another mount.
    private static func openMountRoot(_ mountpoint: String, major: UInt32, minor: UInt32) -> Int32 {
        let descriptor = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return -1 }
        var info = stat()
        let mount = MountTable.Mount(path: mountpoint, major: major, minor: minor, type: "")
        // A FUSE mount's root is inode 1, on the mount's own device.
        guard fstat(descriptor, &info) == 0, info.st_ino == 1, mount.holds(device: UInt64(info.st_dev)) else {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    private static func writeFile(_ name: String, _ bytes: [UInt8], in root: Int32) -> Int32 {
        let descriptor = openat(root, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return errno }
        var failure: Int32 = 0
        var written = 0
        bytes.withUnsafeBytes { buffer in
            while written < buffer.count {
                let count = write(descriptor, buffer.baseAddress! + written, buffer.count - written)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else {
                    failure = count < 0 ? errno : EIO
                    break
                }
                written += count
            }
        }
        if close(descriptor) != 0, failure == 0 { failure = errno }
        return failure
    }

    // MARK: - Framing

    private static func field(_ bytes: [UInt8]) -> [UInt8] {
        word(UInt32(bytes.count)) + bytes
    }

    private static func word(_ value: UInt32) -> [UInt8] {
        [UInt8(value & 0xff), UInt8(value >> 8 & 0xff), UInt8(value >> 16 & 0xff), UInt8(value >> 24)]
    }

    private static func number(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        bytes.reversed().reduce(0) { $0 << 8 | UInt32($1) }
    }

    private static func receiveField(limit: Int) -> [UInt8]? {
        guard let length = receive(4, from: 0) else { return nil }
        let count = Int(UInt32(length[0]) | UInt32(length[1]) << 8 | UInt32(length[2]) << 16 | UInt32(length[3]) << 24)
        guard count <= limit else { return nil }
        return count == 0 ? [] : receive(count, from: 0)
    }

    /// Sends all of `bytes`; false when the other end is gone. Never raises SIGPIPE.
    private static func send(_ bytes: [UInt8], to socket: Int32) -> Bool {
        var sent = 0
        return bytes.withUnsafeBytes { buffer in
            while sent < buffer.count {
                let count = Glibc.send(socket, buffer.baseAddress! + sent, buffer.count - sent, Int32(MSG_NOSIGNAL))
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { return false }
                sent += count
            }
            return true
        }
    }

    /// Exactly `count` bytes, or nil at the end of the stream or an error.
    private static func receive(_ count: Int, from socket: Int32) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var received = 0
        let whole = bytes.withUnsafeMutableBytes { buffer in
            while received < count {
                let got = recv(socket, buffer.baseAddress! + received, count - received, 0)
                if got < 0, errno == EINTR { continue }
                guard got > 0 else { return false }
                received += got
            }
            return true
        }
        return whole ? bytes : nil
    }
}

/// Why the applier's process could not take a step.
enum ApplierFailure: Error, CustomStringConvertible {
    case cannotStart(String)
    /// The process ended (it was killed, or failed to start its program).
    case gone

    var description: String {
        switch self {
        case .cannotStart(let reason): "cannot start the process that shows remote changes in the mount: \(reason)"
        case .gone: "the process that shows remote changes in the mount ended"
        }
    }
}
