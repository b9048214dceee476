import Foundation
import Glibc
import Synchronization

/// Tells whoever started a daemon that it is ready, or why it could not start:
///
/// - systemd, through the datagram socket `$NOTIFY_SOCKET` (`READY=1`, then `STOPPING=1`), as
///   `Type=notify` units expect; one datagram each, no libsystemd;
/// - the `kvsfs STORE MOUNTPOINT` process that spawned it (`MountHelper`), through the pipe
///   whose descriptor `$KVSFS_READY_FD` names: `READY`, or `FAILED` and the reason, on one line.
///
/// Both are best effort: a daemon whose starter went away serves on.
enum Readiness {
    static let readyDescriptorVariable = "KVSFS_READY_FD"

    /// The starter's pipe, taken out of the environment at its first use: `Mount` makes that
    /// first use on the main thread, before it starts a thread (unsetenv is not safe while
    /// another thread reads the environment).
    private static let starter = StarterPipe.takenFromEnvironment(readyDescriptorVariable)

    /// Takes the starter's pipe out of the environment now, so that nothing this process
    /// starts inherits it.
    static func takeStarterPipe() {
        _ = starter
    }

    /// Called from the mount probe's thread.
    static func ready() {
        notifySystemd("READY=1")
        starter.tell("READY\n")
    }

    static func stopping() {
        notifySystemd("STOPPING=1")
    }

    /// The daemon will not be ready: `reason` is the one line its starter prints. Called from
    /// the main thread, perhaps while `ready()` runs: the starter hears whichever comes first.
    static func failed(_ reason: String) {
        starter.tell("FAILED " + reason.replacingOccurrences(of: "\n", with: " ") + "\n")
    }

    /// Sends `state` to `$NOTIFY_SOCKET`: a path, or an abstract name written with a leading `@`.
    private static func notifySystemd(_ state: String) {
        guard let name = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !name.isEmpty else { return }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(name.utf8)
        if path.first == UInt8(ascii: "@") { path[0] = 0 }
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let length = socklen_t(MemoryLayout.offset(of: \sockaddr_un.sun_path)! + path.count)
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { return }
        defer { close(socket) }
        var message = Array(state.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(socket, &message, message.count, 0, $0, length) }
        }
    }
}

/// The write end of the pipe back to the process that started this daemon: it carries one
/// line, and is closed after it.
///
/// Invariant: the descriptor is taken exactly once, under the lock; whoever takes it writes
/// the one line and closes it, and every later `tell` does nothing.
final class StarterPipe: Sendable {
    private let descriptor: Mutex<Int32?>

    init(descriptor: Int32?) {
        self.descriptor = Mutex(descriptor)
    }

    /// The pipe `variable` names, if any, marked close-on-exec and the variable unset, so that
    /// nothing this process starts holds it open or reads its number.
    static func takenFromEnvironment(_ variable: String) -> StarterPipe {
        guard let text = getenv(variable).map({ String(cString: $0) }) else { return StarterPipe(descriptor: nil) }
        unsetenv(variable)
        guard let descriptor = Int32(text), descriptor > 2, fcntl(descriptor, F_SETFD, FD_CLOEXEC) == 0 else {
            return StarterPipe(descriptor: nil)
        }
        return StarterPipe(descriptor: descriptor)
    }

    /// Writes `line` and closes the pipe, unless a line was told already; whether this call
    /// told it.
    @discardableResult
    func tell(_ line: String) -> Bool {
        guard let taken = descriptor.withLock({ held -> Int32? in
            defer { held = nil }
            return held
        }) else { return false }
        var bytes = Array(line.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(taken, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            // EPIPE: the starter went away; the daemon serves on.
            guard written > 0 else { break }
            bytes = bytes.dropFirst(written)
        }
        close(taken)
        return true
    }
}
