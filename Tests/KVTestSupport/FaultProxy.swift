import Foundation

/// A loopback TCP proxy in front of a test server that fails like a bad network, on command:
/// it stalls every byte, cuts connections part-way through a request or a response, cuts every
/// open connection, or refuses new ones. Controls may be set at any time, from any thread.
///
/// One thread relays every connection (poll(2) over non-blocking sockets). At most
/// `maximumConnections` are open at once (another is closed on accept) and each holds at most
/// one `chunk` of bytes per direction, read only once the previous one is written on: the
/// proxy never buffers more than a peer would. `stop()` closes every socket and ends the thread.
public final class FaultProxy: @unchecked Sendable {
    /// Where a connection is cut (closed on both sides, with FIN): once this many bytes have
    /// gone from the client to the server (part-way through a request: a push) or from the
    /// server to the client (part-way through a response: an event stream).
    public enum Cut: Sendable, Equatable, CustomStringConvertible {
        case request(afterBytes: Int)
        case response(afterBytes: Int)

        public var description: String {
            switch self {
            case .request(let bytes): "request after \(bytes) bytes"
            case .response(let bytes): "response after \(bytes) bytes"
            }
        }
    }

    /// What the proxy has done so far.
    public struct Figures: Sendable, CustomStringConvertible {
        /// Connections accepted, refused ones included.
        public var connections = 0
        /// Connections closed on accept (refusing, or at the limit).
        public var refused = 0
        /// Connections cut by a planned cut or by `cutAll()`.
        public var cuts = 0
        /// Times `stall()` stopped the traffic.
        public var stalls = 0

        public var description: String { "connections \(connections), cuts \(cuts), refused \(refused), stalls \(stalls)" }
    }

    public let port: Int
    public let targetPort: Int
    public let maximumConnections: Int
    /// http://127.0.0.1:PORT
    public var url: String { "http://127.0.0.1:\(port)" }

    private static let chunk = 64 << 10

    /// What the test asks for, read by the relay thread on each turn.
    private struct Controls {
        var stalled = false
        var refusing = false
        var nextCut: Cut?
        var randomCuts: RandomCuts?
        var cutAllRequested = false
        var stopping = false
        var figures = Figures()
    }

    private struct RandomCuts {
        var probability: Double
        var maximumBytes: Int
        var generator: SeededGenerator
    }

    private let controls = NSLock()
    private var state = Controls()
    private let listener: Int32
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let finished = DispatchSemaphore(value: 0)
    private var stopped = false

    /// Listens on 127.0.0.1 on a free port and relays each connection to 127.0.0.1:`targetPort`
    /// (which need not be listening: a connection it refuses is closed).
    public init(targetPort: Int, maximumConnections: Int = 64) throws {
        self.targetPort = targetPort
        self.maximumConnections = maximumConnections
        // Its wake-up pipe and sockets are written to after their other end may have gone: in
        // the test process, that is an error to handle, never a signal that ends every test.
        signal(SIGPIPE, SIG_IGN)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DaemonError(description: "socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0, listen(fd, 128) == 0 else {
            close(fd)
            throw DaemonError(description: "cannot listen on loopback: \(String(cString: strerror(errno)))")
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            close(fd)
            throw DaemonError(description: "pipe: \(String(cString: strerror(errno)))")
        }
        (wakeRead, wakeWrite) = (ends[0], ends[1])
        for fd in [listener, wakeRead, wakeWrite] { Self.makeNonBlocking(fd) }
        let thread = Thread { [self] in
            relayLoop()
            finished.signal()
        }
        thread.name = "FaultProxy"
        thread.start()
    }

    // MARK: - Controls

    /// Relays every byte as it comes: releases a stall, stops refusing and forgets planned cuts.
    public func passThrough() {
        change { state in
            state.stalled = false
            state.refusing = false
            state.nextCut = nil
            state.randomCuts = nil
        }
    }

    /// Holds every byte, in both directions and on every connection, until `release()`; new
    /// connections are accepted and held too.
    public func stall() {
        change { state in
            if !state.stalled { state.figures.stalls += 1 }
            state.stalled = true
        }
    }

    public func release() {
        change { $0.stalled = false }
    }

    /// Cuts the next connection accepted at `cut`.
    public func cutNext(_ cut: Cut) {
        change { $0.nextCut = cut }
    }

    /// Cuts each new connection with `probability`, in the request or the response (even
    /// odds) after 0 to `maximumBytes` bytes, drawn from a generator seeded with `seed`.
    public func cutAtRandom(probability: Double, maximumBytes: Int, seed: UInt64) {
        change { $0.randomCuts = RandomCuts(probability: probability, maximumBytes: maximumBytes, generator: SeededGenerator(seed: seed)) }
    }

    /// Plans no more cuts of new connections.
    public func stopCutting() {
        change { state in
            state.nextCut = nil
            state.randomCuts = nil
        }
    }

    /// Cuts every open connection now.
    public func cutAll() {
        change { $0.cutAllRequested = true }
    }

    /// Closes each new connection as soon as it is accepted, while `refusing` is true.
    public func refuse(_ refusing: Bool) {
        change { $0.refusing = refusing }
    }

    public var figures: Figures { controls.withLock { state.figures } }

    /// Closes the listener and every connection, and ends the relay thread.
    public func stop() {
        let first = controls.withLock {
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        change { $0.stopping = true }
        finished.wait()
        close(listener)
        close(wakeRead)
        close(wakeWrite)
    }

    private func change(_ body: (inout Controls) -> Void) {
        controls.withLock { body(&state) }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    // MARK: - The relay thread

    /// One direction of a connection: bytes read from `source`, written on to the destination.
    private struct Flow {
        var buffer: [UInt8] = []
        var written = 0
        /// Bytes read from the source so far.
        var total = 0
        /// The connection is cut once this many bytes have been read and written on.
        var limit: Int?
        /// The source reached its end (its write side shut, or the peer closed).
        var ended = false
        /// The destination's write side is shut after `ended`.
        var shut = false

        var pending: Bool { written < buffer.count }
        var reachedLimit: Bool { limit.map { total >= $0 } ?? false }
        var wantsToRead: Bool { !pending && !ended && !reachedLimit }
    }

    private final class Relay {
        let client: Int32
        let server: Int32
        var connected = false
        var upstream = Flow()
        var downstream = Flow()

        init(client: Int32, server: Int32) {
            self.client = client
            self.server = server
        }

        func closeBoth() {
            close(client)
            close(server)
        }
    }

    /// How one turn left a relay.
    private enum Outcome {
        case open, finished, failed, cut
    }

    private func relayLoop() {
        var relays: [Relay] = []
        var scratch = [UInt8](repeating: 0, count: Self.chunk)
        while true {
            let (stalled, cutAll, stopping) = controls.withLock {
                defer { state.cutAllRequested = false }
                return (state.stalled, state.cutAllRequested, state.stopping)
            }
            if stopping || cutAll {
                relays.forEach { $0.closeBoth() }
                if cutAll { controls.withLock { state.figures.cuts += relays.count } }
                relays.removeAll()
                if stopping { return }
            }
            var fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            if relays.count < maximumConnections { fds.append(pollfd(fd: listener, events: Int16(POLLIN), revents: 0)) }
            // A stalled relay is not polled at all: poll(2) reports a hang-up whatever it is asked.
            if !stalled {
                for relay in relays {
                    let (client, server) = Self.interest(relay)
                    fds.append(pollfd(fd: relay.client, events: client, revents: 0))
                    fds.append(pollfd(fd: relay.server, events: server, revents: 0))
                }
            }
            _ = poll(&fds, nfds_t(fds.count), 200)
            while read(wakeRead, &scratch, scratch.count) > 0 {}
            let polled = fds.suffix(stalled ? 0 : 2 * relays.count).map { $0.revents & Int16(POLLHUP | POLLERR) != 0 }
            relays += acceptAll(room: maximumConnections - relays.count)
            guard !stalled else { continue }
            var kept: [Relay] = []
            for (index, relay) in relays.enumerated() {
                let hungUp = index < polled.count / 2 && (polled[2 * index] || polled[2 * index + 1])
                switch turn(relay, hungUp: hungUp, scratch: &scratch) {
                case .open: kept.append(relay)
                case .finished, .failed: relay.closeBoth()
                case .cut:
                    relay.closeBoth()
                    controls.withLock { state.figures.cuts += 1 }
                }
            }
            relays = kept
        }
    }

    /// The poll events each side of `relay` waits for.
    private static func interest(_ relay: Relay) -> (client: Int16, server: Int16) {
        guard relay.connected else { return (0, Int16(POLLOUT)) }
        func events(reading: Flow, writing: Flow) -> Int16 {
            (reading.wantsToRead ? Int16(POLLIN) : 0) | (writing.pending ? Int16(POLLOUT) : 0)
        }
        return (events(reading: relay.upstream, writing: relay.downstream), events(reading: relay.downstream, writing: relay.upstream))
    }

    /// Accepts what waits on the listener; each connection is refused, or connected to the
    /// target (without waiting) with the cut it is planned to get.
    private func acceptAll(room: Int) -> [Relay] {
        var accepted: [Relay] = []
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return accepted }
            let (refusing, cut) = controls.withLock {
                state.figures.connections += 1
                let refusing = state.refusing || accepted.count >= room
                if refusing { state.figures.refused += 1 }
                return (refusing, refusing ? nil : plannedCut(&state))
            }
            let server = refusing ? -1 : socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard server >= 0 else {
                close(client)
                continue
            }
            Self.makeNonBlocking(client)
            Self.makeNonBlocking(server)
            var address = Self.loopback(port: targetPort)
            let started = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            let relay = Relay(client: client, server: server)
            guard started == 0 || errno == EINPROGRESS else {
                relay.closeBoth()
                continue
            }
            switch cut {
            case .request(let bytes): relay.upstream.limit = bytes
            case .response(let bytes): relay.downstream.limit = bytes
            case nil: break
            }
            accepted.append(relay)
        }
    }

    private func plannedCut(_ state: inout Controls) -> Cut? {
        if let cut = state.nextCut {
            state.nextCut = nil
            return cut
        }
        guard var random = state.randomCuts else { return nil }
        defer { state.randomCuts = random }
        guard Double(random.generator.next() >> 11) / Double(1 << 53) < random.probability else { return nil }
        let bytes = Int(random.generator.next() % UInt64(random.maximumBytes + 1))
        return random.generator.next() % 2 == 0 ? .request(afterBytes: bytes) : .response(afterBytes: bytes)
    }

    /// Moves what it can of `relay` without blocking. A relay one of whose sockets hung up
    /// (poll reports it whatever it is asked) and that is still open afterwards is done with:
    /// polling it again would only spin.
    private func turn(_ relay: Relay, hungUp: Bool, scratch: inout [UInt8]) -> Outcome {
        if !relay.connected {
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(relay.server, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error == 0 else { return .failed }
            var peer = sockaddr_in()
            var peerLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            let connected = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(relay.server, $0, &peerLength) }
            }
            guard connected == 0 else { return errno == ENOTCONN ? .open : .failed }
            relay.connected = true
        }
        for outcome in [Self.move(&relay.upstream, from: relay.client, to: relay.server, scratch: &scratch),
                        Self.move(&relay.downstream, from: relay.server, to: relay.client, scratch: &scratch)] where outcome != .open {
            return outcome
        }
        if relay.upstream.shut && relay.downstream.shut { return .finished }
        return hungUp ? .failed : .open
    }

    /// Writes what `flow` holds, then reads the next chunk (no further than its limit) and
    /// writes that; shuts the destination once the source ended and everything is written on.
    private static func move(_ flow: inout Flow, from source: Int32, to destination: Int32, scratch: inout [UInt8]) -> Outcome {
        while true {
            if flow.pending {
                // MSG_NOSIGNAL: a peer that closed is a failed flow, not a SIGPIPE that ends the
                // whole test process.
                let count = flow.buffer[flow.written...].withUnsafeBytes { send(destination, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK ? .open : .failed }
                flow.written += count
                if flow.pending { return .open }
            }
            if flow.reachedLimit { return .cut }
            if flow.ended {
                if !flow.shut {
                    shutdown(destination, Int32(SHUT_WR))
                    flow.shut = true
                }
                return .open
            }
            let room = min(chunk, (flow.limit ?? Int.max) - flow.total)
            let count = read(source, &scratch, room)
            if count < 0 { return errno == EAGAIN || errno == EWOULDBLOCK ? .open : .failed }
            if count == 0 {
                flow.ended = true
                continue
            }
            flow.buffer = Array(scratch[0..<count])
            flow.written = 0
            flow.total += count
        }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }

    private static func makeNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }
}
