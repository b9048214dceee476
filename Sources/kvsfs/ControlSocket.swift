import Foundation
import Glibc
import KVSFS
import KVStore
import Logging

/// Where a mount's control socket is: `STORE.control` in its data directory.
///
/// The socket is reached through `/proc/self/fd/N/STORE.control`, N an `O_PATH` descriptor of
/// the directory, so that a data directory of any length fits the 108 bytes of a socket
/// address; only a store name over 80 bytes does not, and such a mount has no control socket.
struct ControlAddress {
    let directory: String
    let name: String

    init(dataDirectory: String, storeID: String) {
        directory = dataDirectory
        name = storeID + ".control"
    }

    var path: String { (directory as NSString).appendingPathComponent(name) }

    /// Linux's `O_PATH` (a descriptor that names a directory without reading it), which
    /// Swift's Glibc module leaves out.
    private static let openPath: Int32 = 0o10000000

    /// Calls `body` with the socket address; nil when the directory cannot be opened or the
    /// name does not fit (errno says which).
    func withSocketAddress<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result? {
        let directoryDescriptor = open(directory, Self.openPath | O_DIRECTORY | O_CLOEXEC)
        guard directoryDescriptor >= 0 else { return nil }
        defer { close(directoryDescriptor) }
        let reachable = Array("/proc/self/fd/\(directoryDescriptor)/\(name)".utf8)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard reachable.count < MemoryLayout.size(ofValue: address.sun_path) else {
            errno = ENAMETOOLONG
            return nil
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: reachable) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}

/// One end of a control connection, exchanging frames: a 4-byte big-endian length, then that
/// many bytes. Each side bounds what it reads, and the whole exchange has one deadline, which
/// a peer sending a byte now and then does not push back.
struct ControlConnection {
    /// A request's most bytes: its JSON.
    static let maximumRequestBytes = 64 << 10
    /// The most bytes of the property list an import sends after its request.
    static let maximumImportBytes = 64 << 20
    /// An answer's most bytes: a whole store as a property list.
    static let maximumAnswerBytes = 1 << 30

    enum Failure: Error, CustomStringConvertible {
        case closed
        case tooLarge(Int, limit: Int)
        case deadlinePassed
        case system(String)

        var description: String {
            switch self {
            case .closed: "the connection closed before the message was whole"
            case .tooLarge(let length, let limit): "a message of \(length) bytes is over the limit of \(limit)"
            case .deadlinePassed: "the exchange did not end within its deadline"
            case .system(let reason): reason
            }
        }
    }

    let socket: Int32
    let deadline: ContinuousClock.Instant

    /// `socket`, whose exchange must end within `seconds` from now.
    init(_ socket: Int32, seconds: Int) {
        self.socket = socket
        deadline = .now + .seconds(seconds)
    }

    func write(_ bytes: [UInt8]) throws(Failure) {
        guard let length = UInt32(exactly: bytes.count) else { throw .tooLarge(bytes.count, limit: Int(UInt32.max)) }
        let frame = [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + bytes
        var sent = 0
        while sent < frame.count {
            try armTimeout(SO_SNDTIMEO)
            let count = frame[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count < 0, errno == EINTR || errno == EAGAIN { continue }
            guard count > 0 else { throw .system(String(cString: strerror(errno))) }
            sent += count
        }
    }

    func read(limit: Int) throws(Failure) -> [UInt8] {
        let header = try readExactly(4)
        let length = header.reduce(0) { $0 << 8 | Int($1) }
        guard length <= limit else { throw .tooLarge(length, limit: limit) }
        return try readExactly(length)
    }

    private func readExactly(_ count: Int) throws(Failure) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var received = 0
        while received < count {
            try armTimeout(SO_RCVTIMEO)
            let got = bytes[received...].withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if got < 0, errno == EINTR || errno == EAGAIN { continue }
            if got == 0 { throw .closed }
            guard got > 0 else { throw .system(String(cString: strerror(errno))) }
            received += got
        }
        return bytes
    }

    /// Limits the next send or receive to the time left before the deadline.
    private func armTimeout(_ option: Int32) throws(Failure) {
        let left = deadline - .now
        guard left > .zero else { throw .deadlinePassed }
        let (seconds, attoseconds) = left.components
        var limit = timeval(tv_sec: Int(seconds), tv_usec: max(1, Int(attoseconds / 1_000_000_000_000)))
        _ = setsockopt(socket, SOL_SOCKET, option, &limit, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// A request on the control socket, as JSON.
struct ControlRequest: Codable, Equatable {
    enum Command: String, Codable {
        /// Answered with the store as one property list.
        case export
        /// Followed by a frame with the property list to import; answered with the
        /// `ImportPlan` as JSON.
        case `import`
    }

    var command: Command
    /// The form of an exported property list: xml or binary.
    var format: String?
    /// For an import: remove the keys the property list does not hold.
    var replace: Bool?
    /// For an import: say what would change, change nothing.
    var dryRun: Bool?
    /// The device number of the directory the command named, which must be the mount's.
    var device: UInt64?
}

extension ImportPlan: Codable {
    enum CodingKeys: String, CodingKey { case added, changed, removed, unchanged }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init()
        added = try container.decode([String].self, forKey: .added)
        changed = try container.decode([String].self, forKey: .changed)
        removed = try container.decode([String].self, forKey: .removed)
        unchanged = try container.decode(Int.self, forKey: .unchanged)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(added, forKey: .added)
        try container.encode(changed, forKey: .changed)
        try container.encode(removed, forKey: .removed)
        try container.encode(unchanged, forKey: .unchanged)
    }
}

/// How the mount reads a property list sent for import: the root one level deeper than a
/// value may be, within the frame's bytes.
let importDecodingLimits = PropertyListDecodingLimits(maxDepth: PropertyListDecodingLimits.standard.maxDepth + 1,
                                                      maxObjects: 4 << 20, maxBytes: ControlConnection.maximumImportBytes)

/// The answer to a request: a status byte, 0 then the result's bytes, or 1 then one line that
/// says why the request was refused.
enum ControlAnswer {
    static func success(_ bytes: [UInt8]) -> [UInt8] { [0] + bytes }
    static func failure(_ reason: String) -> [UInt8] { [1] + Array(reason.utf8) }

    static func result(of answer: [UInt8]) -> Result<[UInt8], CommandFailure> {
        switch answer.first {
        case 0: .success(Array(answer.dropFirst()))
        case 1: .failure(CommandFailure(String(decoding: answer.dropFirst(), as: UTF8.self)))
        default: .failure(CommandFailure("the mount gave an answer that is not one"))
        }
    }
}

/// The mount's side of the control socket: a thread that takes one connection at a time from
/// the mounting user (or root), reads one request, answers and closes.
///
/// Invariant: the socket exists only while the mount serves; a stale one, left by a daemon
/// that died, is replaced at the next mount (the store lock says no other daemon owns it).
final class ControlSocket: @unchecked Sendable {
    private let address: ControlAddress
    private let listener: Int32
    private let fileSystem: KeyValueFileSystem
    /// The mount's directory: a request names it by its device.
    private let mountpoint: String
    private let logger: Logger
    /// How long one connection may take to send its request or read its answer.
    static let connectionDeadline = 10

    init(address: ControlAddress, fileSystem: KeyValueFileSystem, mountpoint: String, logger: Logger) throws {
        self.address = address
        self.fileSystem = fileSystem
        self.mountpoint = mountpoint
        self.logger = logger
        listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw CommandFailure("cannot create the control socket: \(String(cString: strerror(errno)))") }
        _ = unlink(address.path)
        let bound = address.withSocketAddress { bind(listener, $0, $1) } ?? -1
        guard bound == 0, chmod(address.path, 0o600) == 0, listen(listener, 8) == 0 else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw CommandFailure("cannot listen on the control socket \(address.path): \(reason)")
        }
    }

    func start() {
        let thread = Thread { [self] in serve() }
        thread.name = "kvsfs-control"
        thread.start()
    }

    /// Stops taking connections and removes the socket.
    func stop() {
        _ = shutdown(listener, Int32(SHUT_RDWR))
        _ = unlink(address.path)
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                close(listener)  // shut down by `stop`
                return
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            answer(connection)
            close(connection)
        }
    }

    private func answer(_ socket: Int32) {
        let incoming = ControlConnection(socket, seconds: Self.connectionDeadline)
        let reply: [UInt8]
        do {
            guard let peer = Self.peerUser(of: socket), peer == 0 || peer == getuid() else {
                throw CommandFailure("only the user who mounted the store may use its control socket")
            }
            let bytes = try incoming.read(limit: ControlConnection.maximumRequestBytes)
            let request: ControlRequest
            do {
                request = try JSONDecoder().decode(ControlRequest.self, from: Data(bytes))
            } catch {
                throw CommandFailure("the request is not one the mount knows")
            }
            try checkDevice(request.device)
            reply = ControlAnswer.success(try perform(request, reading: incoming))
        } catch let failure as ControlConnection.Failure {
            logger.warning("a control request was not read whole: \(failure)")
            return
        } catch {
            reply = ControlAnswer.failure(String(describing: error))
        }
        do {
            // The answer has a deadline of its own: the work before it may take a while.
            try ControlConnection(socket, seconds: Self.connectionDeadline).write(reply)
        } catch {
            logger.warning("the answer to a control request was not sent whole: \(error)")
        }
    }

    /// Refuses a request made for another directory than this mount: the command line found
    /// the socket from attributes that any directory can carry (`setfattr`, `cp -a`).
    private func checkDevice(_ device: UInt64?) throws {
        var info = stat()
        guard stat(mountpoint, &info) == 0, let device, device == UInt64(info.st_dev) else {
            throw CommandFailure("the directory named is not this store's mount (\(mountpoint))")
        }
    }

    private func perform(_ request: ControlRequest, reading connection: ControlConnection) throws -> [UInt8] {
        switch request.command {
        case .export:
            guard let format = ValueFormat(rawValue: request.format ?? "xml") else {
                throw CommandFailure("the format must be xml or binary")
            }
            return try fileSystem.store.exportedPropertyList(as: format)
        case .import:
            let bytes = try connection.read(limit: ControlConnection.maximumImportBytes)
            let values: [String: PropertyListValue]
            do {
                guard case .dictionary(let dictionary) = try PropertyListCodec.decode(bytes, limits: importDecodingLimits) else {
                    throw CommandFailure("the property list's root is not a dictionary")
                }
                values = dictionary
            } catch StoreError.valueTooLarge {
                throw CommandFailure("the property list holds more than the \(ControlConnection.maximumImportBytes >> 20) MiB an import may, as XML")
            } catch let error as StoreError {
                throw CommandFailure("not a property list the store accepts: \(error)")
            }
            let plan = try fileSystem.importValues(values, replacing: request.replace ?? false, dryRun: request.dryRun ?? false)
            return Array(try JSONEncoder().encode(plan))
        }
    }

    /// The user id of the process at the other end of `connection` (`SO_PEERCRED`: pid, uid,
    /// gid as three 32-bit numbers).
    private static func peerUser(of connection: Int32) -> uid_t? {
        var credentials = [UInt32](repeating: 0, count: 3)
        var length = socklen_t(12)
        let result = credentials.withUnsafeMutableBytes { getsockopt(connection, SOL_SOCKET, SO_PEERCRED, $0.baseAddress, &length) }
        guard result == 0, length == 12 else { return nil }
        return credentials[1]
    }
}

/// The command line's side: one request to the mount at `mountpoint`, and its result.
enum ControlClient {
    /// How long a request may wait for its answer.
    static let answerDeadline = 60

    static func send(_ request: ControlRequest, body: [UInt8]? = nil, to mountpoint: String) throws -> [UInt8] {
        let attribute = { (name: String) throws -> String in
            String(decoding: try requiredMountAttribute(mountpoint, name, capacity: Int(PATH_MAX), what: "where the store is"), as: UTF8.self)
        }
        let address = ControlAddress(dataDirectory: try attribute("user.kvsfs.data-directory"), storeID: try attribute("user.kvsfs.store"))
        let connection = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard connection >= 0 else { throw CommandFailure("cannot create a socket: \(String(cString: strerror(errno)))") }
        defer { close(connection) }
        guard address.withSocketAddress({ connect(connection, $0, $1) }) == 0 else {
            throw CommandFailure("cannot reach the control socket of \(mountpoint) (\(address.path)): \(String(cString: strerror(errno)))")
        }
        let exchange = ControlConnection(connection, seconds: answerDeadline)
        var request = request
        var info = stat()
        guard stat(mountpoint, &info) == 0 else { throw CommandFailure("cannot read \(mountpoint): \(String(cString: strerror(errno)))") }
        request.device = UInt64(info.st_dev)
        do {
            try exchange.write(Array(try JSONEncoder().encode(request)))
            if let body { try exchange.write(body) }
            return try ControlAnswer.result(of: try exchange.read(limit: ControlConnection.maximumAnswerBytes)).get()
        } catch let failure as ControlConnection.Failure {
            throw CommandFailure("the mount at \(mountpoint) did not answer: \(failure)")
        }
    }
}
