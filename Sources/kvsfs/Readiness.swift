import Foundation
import Glibc

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

    static func ready() {
        notifySystemd("READY=1")
        tellStarter("READY\n")
    }

    static func stopping() {
        notifySystemd("STOPPING=1")
    }

    /// The daemon will not be ready: `reason` is the one line its starter prints.
    static func failed(_ reason: String) {
        tellStarter("FAILED " + reason.replacingOccurrences(of: "\n", with: " ") + "\n")
    }

    private static func tellStarter(_ line: String) {
        guard let text = ProcessInfo.processInfo.environment[readyDescriptorVariable], let descriptor = Int32(text),
              descriptor > 2 else { return }
        var bytes = Array(line.utf8)
        _ = Glibc.write(descriptor, &bytes, bytes.count)
        close(descriptor)
        unsetenv(readyDescriptorVariable)
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
