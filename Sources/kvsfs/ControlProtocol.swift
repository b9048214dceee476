import Foundation
import Glibc
import KVSFS
import KVStore
import Logging

/// Where a mount's control socket is: `STORE.control` in its data directory.
///
/// The socket is reached through `/proc/self/fd/N/STORE.control`, N an `O_PATH` descriptor of
/// the directory, so that a data directory of any length fits the 108 bytes of a socket
/// address. A store name over `maximumStoreNameBytes` does not always fit, and such a mount
/// has no control socket.
struct ControlAddress {
    static let maximumStoreNameBytes = 80
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
        guard name.utf8.count <= Self.maximumStoreNameBytes + ".control".utf8.count,
              reachable.count < MemoryLayout.size(ofValue: address.sun_path) else {
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
    /// What one receive takes at most: a message's memory grows with the bytes that came,
    /// not with the length its header announces.
    static let chunkBytes = 64 << 10
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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(min(count, Self.chunkBytes))
        var chunk = [UInt8](repeating: 0, count: min(count, Self.chunkBytes))
        while bytes.count < count {
            try armTimeout(SO_RCVTIMEO)
            let wanted = min(chunk.count, count - bytes.count)
            let got = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, wanted, 0) }
            if got < 0, errno == EINTR || errno == EAGAIN { continue }
            if got == 0 { throw .closed }
            guard got > 0 else { throw .system(String(cString: strerror(errno))) }
            bytes.append(contentsOf: chunk[..<got])
        }
        return bytes
    }

    /// Limits the next send or receive to the time left before the deadline.
    private func armTimeout(_ option: Int32) throws(Failure) {
        let left = deadline - .now
        guard left > .zero else { throw .deadlinePassed }
        let (seconds, attoseconds) = left.components
        var limit = timeval(tv_sec: Int(seconds), tv_usec: max(1, Int(attoseconds / 1_000_000_000_000)))
        guard setsockopt(socket, SOL_SOCKET, option, &limit, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
            throw .system("cannot set the connection's deadline: \(String(cString: strerror(errno)))")
        }
    }
}

/// A request on the control socket, as JSON.
struct ControlRequest: Codable, Equatable {
    enum Command: String, Codable {
        /// Answered with the store as one property list.
        case export
        /// Followed by a frame with the property list to import; answered with the
        /// `ImportPlan` as JSON. With `ifUnchangedSince`, made through the remote itself on that
        /// condition (`ChangeCondition.unchangedSince`), as `conditionalChange` is.
        case `import`
        /// Answered with the versions the remote keeps of `key`, as JSON `[KeyVersion]`.
        case history
        /// Answered with `version` of `key` and its value, as JSON `KeyVersion` (null when the
        /// remote keeps no such version).
        case version
        /// Answered with the store's open conflicts and the names known of their devices, as
        /// JSON `ConflictListing`.
        case conflicts
        /// Settles the open conflict of `key`, which must still be the one of changes `losers`
        /// (or `lost`, from a kvsfs that kept one) and `won`, by keeping a lost change
        /// (`keepLost`: `keepDevice`'s, or as `KeyConflict.lostChange` picks) or its won one, as
        /// a new change (`KeyValueFileSystem.settle`); answered with nothing.
        case resolve
        /// Pushes what is pending and fetches what is new (`kvsfs sync`); answered with
        /// nothing once the remote's changes show in the mount.
        case synchronize
        /// Replaces the store's values by the remote's (`kvsfs sync --replace-with-remote`),
        /// discarding local changes the remote lacks; answered with nothing.
        case replaceWithRemote = "replace-with-remote"
        /// Answered with each key's latest change after `after` (of `keys` when given), oldest
        /// first, and the names known of their devices, as JSON `WatchPage`; with no `after`,
        /// with none and the store's newest cursor (`kvsfs watch`).
        case changes
        /// Answered with the schema the store holds, as JSON `SchemaListing` (no values judged).
        case schema
        /// Followed by a frame with a schema's text, or an empty one for the schema held;
        /// answered as `schema` is, with the values that break it (nothing is set).
        case checkSchema = "check-schema"
        /// Followed by a frame with a schema's text (empty with `remove`): sets it on the
        /// remote (only while its version is still `ifVersion`, when given), then holds it;
        /// answered as `schema` is.
        case setSchema = "set-schema"
        /// Followed by a frame with the new value of `key` as a property list (empty with
        /// `remove`): the change made on `condition` through the remote itself, which judges
        /// the condition, then taken in as the remote's (`kvsfs set --if-version`, `kvsfs delete
        /// --if-version`); answered with nothing, or refused with the remote's words.
        case conditionalChange = "conditional-change"
    }

    var command: Command
    /// The form of an exported property list: xml or binary.
    var format: String?
    /// For an import: remove the keys the property list does not hold.
    var replace: Bool?
    /// For an import: say what would change, change nothing.
    var dryRun: Bool?
    /// For history, version and resolve: the key.
    var key: String?
    /// For resolve: the stamps of the conflict's changes as the command line read them (the
    /// values stay with the daemon: a request is at most 64 KiB), and which side to keep.
    var lost: ChangeStamp?
    var losers: [ChangeStamp]?
    var won: ChangeStamp?
    var keepLost: Bool?
    var keepDevice: String?
    /// For version: which one.
    var version: Int64?
    /// The device number of the directory the command named, which must be the mount's.
    var device: UInt64?
    /// For changes: the cursor to give the changes after, and the keys watched (all when nil).
    var after: Int64?
    var keys: [String]?
    /// For setSchema: remove the schema instead, and the version it must still be at. For
    /// conditionalChange: remove the key instead.
    var remove: Bool?
    var ifVersion: Int64?
    /// For conditionalChange: what the key must be on the remote.
    var condition: ChangeCondition?
    /// For an import: the cursor no key it changes may have a version after on the remote.
    var ifUnchangedSince: Int64?
}

/// The answer to `changes`: a page of the store's change feed, and the names known of the
/// devices that made its changes, by id (`DeviceName`).
struct WatchPage: Codable {
    var page: ChangeFeedPage
    var devices: [String: String]
}

/// The answer to `conflicts`: the open conflicts, and the names known of the devices that made
/// their changes, by id (`DeviceName`).
struct ConflictListing: Codable {
    var conflicts: [KeyConflict]
    var devices: [String: String]
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
