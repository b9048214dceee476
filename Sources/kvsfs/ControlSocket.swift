import Foundation
import FuseKit
import Glibc
import KVSFS
import KVCloud
import KVStore
import KVSync
import Logging
import Synchronization

/// The mount's side of the control socket: a thread that takes one connection at a time from
/// the mounting user (or root), reads one request, answers and closes.
///
/// Invariant: the socket exists only while the mount serves; a stale one, left by a daemon
/// that died, is replaced at the next mount (the store lock says no other daemon owns it).
final class ControlSocket: @unchecked Sendable {
    private let address: ControlAddress
    private let listener: Int32
    let fileSystem: KeyValueFileSystem
    /// The change log of the mount's remote, which keeps past versions, and the mount's store
    /// in it; nil for a mount without a remote.
    private let history: (log: any ChangeLog, store: String)?
    /// The mount's sync; nil for a mount without a remote.
    let sync: MountSync?
    /// The mount's directory: a request names it by its device.
    let mountpoint: String
    private let logger: Logger
    /// Signalled when the serving thread has ended, its last request answered.
    private let ended = DispatchSemaphore(value: 0)
    /// Where the serving thread is, so that `stop` can cut a connection that only talks.
    private let serving = Mutex(Serving.waiting)

    /// What the serving thread does.
    private enum Serving {
        /// Waiting for a connection.
        case waiting
        /// Reading a request from, or answering, this connection: cut at unmount, so that a
        /// peer that sends nothing cannot hold the unmount for its deadline.
        case exchanging(Int32)
        /// Acting on a request read whole, then answering it: finished before the store closes,
        /// its answer within its own deadline.
        case working
        /// Unmounting: no more connections.
        case stopped
    }
    /// How long one connection may take to send its request or read its answer.
    static let connectionDeadline = 10

    init(address: ControlAddress, fileSystem: KeyValueFileSystem, history: (log: any ChangeLog, store: String)?, sync: MountSync?,
         mountpoint: String, logger: Logger) throws {
        self.address = address
        self.fileSystem = fileSystem
        self.history = history
        self.sync = sync
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

    /// Stops taking connections, removes the socket, and waits for the request being
    /// answered, if any: an import is in the store, or refused, before the store is closed.
    func stop() {
        serving.withLock { state in
            if case .exchanging(let connection) = state { _ = shutdown(connection, Int32(SHUT_RDWR)) }
            state = .stopped
        }
        _ = shutdown(listener, Int32(SHUT_RDWR))
        _ = unlink(address.path)
        ended.wait()
    }

    private func serve() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                close(listener)  // shut down by `stop`
                ended.signal()
                return
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            guard moving(to: .exchanging(connection)) else {
                close(connection)
                continue  // stopped: the listener is shut down, and accept ends the loop
            }
            answer(connection)
            _ = moving(to: .waiting)
            close(connection)
        }
    }

    /// Moves the serving thread to `next`, unless the socket is stopped; returns whether it moved.
    private func moving(to next: Serving) -> Bool {
        serving.withLock { state in
            if case .stopped = state { return false }
            state = next
            return true
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
            // An import's property list is read before any check that may refuse it: a peer
            // whose data is left unread sees a reset connection, not the refusal.
            let body: [UInt8]
            switch request.command {
            case .import, .conditionalChange: body = try incoming.read(limit: ControlConnection.maximumImportBytes)
            case .checkSchema, .setSchema: body = try incoming.read(limit: SchemaLimits.bytes)
            default: body = []
            }
            try checkDevice(request.device)
            // From here the act is done or refused, and its answer is owed: no longer cut.
            guard moving(to: .working) else { throw CommandFailure("the mount is being unmounted") }
            reply = ControlAnswer.success(try perform(request, body: body))
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

    private func perform(_ request: ControlRequest, body bytes: [UInt8]) throws -> [UInt8] {
        switch request.command {
        case .export:
            guard let format = ValueFormat(rawValue: request.format ?? "xml") else {
                throw CommandFailure("the format must be xml or binary")
            }
            return try fileSystem.store.exportedPropertyList(as: format)
        case .import:
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
            if let cursor = request.ifUnchangedSince, request.dryRun != true {
                return Array(try JSONEncoder().encode(try importOnCondition(values, replacing: request.replace ?? false, unchangedSince: cursor)))
            }
            let plan = try fileSystem.importValues(values, replacing: request.replace ?? false, dryRun: request.dryRun ?? false)
            return Array(try JSONEncoder().encode(plan))
        case .conditionalChange:
            let key = try requestedKey(request)
            guard let condition = request.condition else { throw CommandFailure("the request names no condition") }
            do {
                try condition.check()
            } catch {
                throw CommandFailure(error.description)
            }
            var value: PropertyListValue?
            if request.remove != true {
                do {
                    value = try PropertyListCodec.decode(bytes)
                } catch {
                    throw CommandFailure("not a value the store accepts: \(error)")
                }
            }
            try changeOnCondition(key, to: value, condition)
            return []
        case .history:
            let key = try requestedKey(request)
            let versions = try askRemote(what: "history is kept by a remote") { log, store in try await log.history(of: key, in: store) }
            // A device the remote keeps no name of may be known here: this one's own, or one a
            // fetch named.
            let known = try fileSystem.store.deviceNames(of: versions.filter { $0.deviceName == nil }.map(\.stamp.device))
            return Array(try JSONEncoder().encode(versions.named(by: known)))
        case .version:
            let key = try requestedKey(request)
            guard let version = request.version, version > 0 else { throw CommandFailure("the request names no version") }
            return Array(try JSONEncoder().encode(try askRemote(what: "history is kept by a remote") { log, store in
                try await log.version(version, of: key, in: store)
            }))
        case .conflicts:
            let conflicts = fileSystem.store.conflicts()
            let devices = try fileSystem.store.deviceNames(of: conflicts.flatMap(\.devices))
            return Array(try JSONEncoder().encode(ConflictListing(conflicts: conflicts, devices: devices)))
        case .resolve:
            let key = try requestedKey(request)
            guard let losers = request.losers ?? request.lost.map({ [$0] }), let won = request.won, let keepLost = request.keepLost else {
                throw CommandFailure("the request names no conflict, or no side to keep")
            }
            guard let conflict = fileSystem.store.conflict(forKey: key), conflict.lost.map(\.stamp) == losers, conflict.won.stamp == won else {
                throw CommandFailure("\(key.debugDescription) has no open conflict of those changes: it changed since it was read")
            }
            var side = conflict.won
            if keepLost {
                guard let lost = conflict.lostChange(of: request.keepDevice, local: fileSystem.store.deviceID) else {
                    let devices = conflict.lost.map(\.stamp.device.debugDescription).joined(separator: ", ")
                    throw CommandFailure(request.keepDevice.map { "no change of device \($0.debugDescription) lost in the conflict of \(key.debugDescription)" }
                        ?? "changes of several devices lost in the conflict of \(key.debugDescription) (\(devices)): name one with --device")
                }
                side = lost
            }
            do {
                try fileSystem.settle(conflict, keeping: side)
            } catch {
                throw CommandFailure("cannot settle the conflict of \(conflict.key.debugDescription): \(error)")
            }
            // Settled here; the other devices learn of it when the remote takes the change.
            guard let sync, case .offline(let reason) = sync.standing().reachability else { return [] }
            return Array(("the conflict of \(conflict.key.debugDescription) is settled on this mount, but the resolution is "
                + "pending: \(reason); it is pushed when the remote answers").utf8)
        case .changes:
            let store = fileSystem.store
            let keys = request.keys.map { Swift.Set($0.map(KeyName.canonical)) }
            let newest = store.newestCursor
            if let after = request.after, after > newest {
                throw CommandFailure("the cursor \(after) is past the store's newest change (\(newest)): it is not one this store gave (was the store made again?)")
            }
            let page = store.changes(after: request.after ?? newest, keys: keys)
            let devices = try store.deviceNames(of: page.changes.map(\.device))
            return Array(try JSONEncoder().encode(WatchPage(page: page, devices: devices)))
        case .setSchema:
            let text: [UInt8]? = request.remove == true ? nil : bytes
            if let text {
                do {
                    _ = try KeySchema(decoding: text)
                } catch {
                    throw CommandFailure("the schema sent cannot be read: \(error)")
                }
            }
            let given = try askRemote(what: "a schema is kept by a remote") { log, store in
                do {
                    return try await log.setSchema(text, of: store, ifVersion: request.ifVersion)
                } catch CloudError.schemaMoved(let current) {
                    throw CommandFailure("the store's schema is at version \(current), not \(request.ifVersion ?? 0): it changed since; nothing was set")
                } catch CloudError.refused(let reason) {
                    throw CommandFailure("the remote refused the schema: \(reason)")
                }
            }
            // Sync may have taken a newer one meanwhile: the newest stays.
            let held = fileSystem.store.schema.version > given.version
                ? fileSystem.store.schema : try fileSystem.store.takeSchema(version: given.version, text: given.text)
            let violations = fileSystem.store.violations().map(\.description)
            sync?.record(schemaSet: held, breaking: violations.count)
            return Array(try JSONEncoder().encode(SchemaListing(version: held.version, text: held.text, unreadable: held.unreadable,
                                                                violations: violations, keys: fileSystem.store.usage.keys)))
        case .schema, .checkSchema:
            let store = fileSystem.store
            let held = store.schema
            // Values are judged for a check alone: against the schema sent, or the one held.
            var judged: KeySchema?
            if request.command == .checkSchema {
                do {
                    judged = bytes.isEmpty ? held.rules : try KeySchema(decoding: bytes)
                } catch {
                    throw CommandFailure("the schema sent cannot be read: \(error)")
                }
            }
            let violations = judged.map { store.violations(of: $0).map(\.description) } ?? []
            return Array(try JSONEncoder().encode(SchemaListing(version: held.version, text: held.text, unreadable: held.unreadable,
                                                                violations: violations, keys: store.usage.keys)))
        case .synchronize, .replaceWithRemote:
            guard let sync else { throw CommandFailure("\(mountpoint) is not a kvsfs mount that syncs: it has no remote") }
            try Self.retryingWhileBusy(for: .seconds(Self.remoteDeadline)) {
                try request.command == .synchronize ? sync.synchronize() : sync.replaceWithRemote()
            }
            return []
        }
    }

    /// Runs `work` again while the remote says it is busy (or other requests already wait on
    /// it), backing off from 50 ms to 500 ms, for at most `limit`; then its failure, in words.
    static func retryingWhileBusy(for limit: Duration, _ work: () throws -> Void) throws {
        let deadline = ContinuousClock.now + limit
        var pause = Duration.milliseconds(50)
        while true {
            do {
                return try work()
            } catch SyncFailure.busy where ContinuousClock.now + pause < deadline {
                Thread.sleep(forTimeInterval: Double(pause.components.seconds) + Double(pause.components.attoseconds) / 1e18)
                pause = min(pause * 2, .milliseconds(500))
            } catch let failure as SyncFailure {
                throw CommandFailure("sync failed: \(failure.description)")
            }
        }
    }

    private func requestedKey(_ request: ControlRequest) throws -> String {
        guard let key = request.key else { throw CommandFailure("the request names no key") }
        do {
            return try HistoryPolicy.requestedKey(key)
        } catch {
            throw CommandFailure(error.description)
        }
    }

    /// Asks the remote, which keeps what the request wants (`what` says so to a mount without
    /// one), for at most `remoteDeadline`.
    func askRemote<T: Sendable>(what: String, _ question: @escaping @Sendable (any ChangeLog, String) async throws -> T) throws -> T {
        guard let history else { throw CommandFailure("this mount has no remote, and \(what)") }
        guard let answer = waitFor({ try await question(history.log, history.store) }, timeout: .seconds(Self.remoteDeadline)) else {
            throw CommandFailure("the remote did not answer within \(Self.remoteDeadline) s")
        }
        do {
            return try answer.get()
        } catch let failure as CommandFailure {
            throw failure
        } catch let error as CloudError {
            throw CommandFailure("the remote could not answer: \(error.reason)")
        } catch {
            throw CommandFailure("the remote could not answer: \(error)")
        }
    }

    /// How long a history request may wait for the remote: less than the client waits.
    static let remoteDeadline = 30

    /// The user id of the process at the other end of `connection` (`SO_PEERCRED`: pid, uid,
    /// gid as three 32-bit numbers).
    static func peerUser(of connection: Int32) -> uid_t? {
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
        // What the attributes name is a socket anyone may have made: give a store's values
        // only to a daemon of this user (or root).
        guard let peer = ControlSocket.peerUser(of: connection), peer == 0 || peer == getuid() else {
            throw CommandFailure("the control socket \(address.path) belongs to another user: \(mountpoint) is not a mount of yours")
        }
        let exchange = ControlConnection(connection, seconds: answerDeadline)
        var request = request
        request.device = try fuseMountDevice(mountpoint)
        do {
            try exchange.write(Array(try JSONEncoder().encode(request)))
            if let body { try exchange.write(body) }
            return try ControlAnswer.result(of: try exchange.read(limit: ControlConnection.maximumAnswerBytes)).get()
        } catch let failure as ControlConnection.Failure {
            throw CommandFailure("the mount at \(mountpoint) did not answer: \(failure)")
        }
    }

    /// The device of `mountpoint`, which must be the root of a kvsfs mount (`fuse.kvsfs` in
    /// /proc/self/mountinfo).
    private static func fuseMountDevice(_ mountpoint: String) throws -> UInt64 {
        var info = stat()
        guard let resolved = realpath(mountpoint, nil), stat(mountpoint, &info) == 0 else {
            throw CommandFailure("cannot read \(mountpoint): \(String(cString: strerror(errno)))")
        }
        let path = String(cString: resolved)
        free(resolved)
        guard isKVSFSMount(path) else { throw CommandFailure("\(mountpoint) is not a kvsfs mount") }
        return UInt64(info.st_dev)
    }

    /// Whether the mount that shows at `path` is a kvsfs mount (`fuse.kvsfs`): the one test
    /// every command, and the mount's own checks, make of a path.
    static func isKVSFSMount(_ path: String) -> Bool {
        MountTable.top(at: path)?.type == "fuse.kvsfs"
    }
}
