import Foundation
import Glibc

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`: what a daemon told it.
public final class NotifySocket: @unchecked Sendable {
    public let path: String
    private let descriptor: Int32

    public init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard descriptor >= 0, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw DaemonError(description: "cannot make a notify socket at \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw DaemonError(description: "cannot bind \(path): \(String(cString: strerror(errno)))") }
    }

    deinit {
        close(descriptor)
        unlink(path)
    }

    /// The next datagram, or nil when none came within `seconds`.
    public func receive(within seconds: Double) -> String? {
        var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&waiting, 1, Int32(seconds * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(descriptor, &buffer, buffer.count, 0)
        return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : nil
    }
}
