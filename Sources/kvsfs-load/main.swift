// kvsfs-load: a load generator for `kvsfs serve` (bench/load.sh runs it).
//
// Watchers speak the protocol exactly as mounts do: each holds the store's event stream
// (GET .../events?after=N, server-sent events) and reads the batches of changes it brings. Writers push one change at a time at a steady rate, each to
// a random store; a change's value is the time it was pushed, so every watcher that fetches it
// knows how long it took to arrive. Prints propagation percentiles, push latency, and the server's
// CPU and memory over the measured window.
import AsyncHTTPClient
import Foundation
import KVCloud
import KVStore
import KVSync
import KVWire
import NIOCore
import Synchronization

struct Options {
    var url = "http://127.0.0.1:18790"
    var token = ""
    var account = "load"
    var stores = 250
    var watchers = 1000
    var rate = 500.0
    var seconds = 30.0
    var serverPID: Int32?

    init(_ arguments: [String]) {
        var iterator = arguments.makeIterator()
        while let name = iterator.next() {
            guard let value = iterator.next() else { Self.usage() }
            func number<T: LosslessStringConvertible>(_: T.Type) -> T {
                guard let number = T(value) else { Self.usage() }
                return number
            }
            switch name {
            case "--url": url = value
            case "--token": token = value
            case "--account": account = value
            case "--stores": stores = number(Int.self)
            case "--watchers": watchers = number(Int.self)
            case "--rate": rate = number(Double.self)
            case "--seconds": seconds = number(Double.self)
            case "--server-pid": serverPID = number(Int32.self)
            default: Self.usage()
            }
        }
        if token.isEmpty { Self.usage() }
    }

    static func usage() -> Never {
        FileHandle.standardError.write(Data("""
            usage: kvsfs-load --token TOKEN [--url URL] [--account A] [--stores N] [--watchers N]
                              [--rate CHANGES_PER_SECOND] [--seconds S] [--server-pid PID]

            """.utf8))
        exit(64)
    }
}

/// Microseconds since the generator started, as a change's value carries it.
let origin = ContinuousClock.now
func elapsedMicroseconds() -> Int64 {
    let d = ContinuousClock.now - origin
    return d.components.seconds * 1_000_000 + d.components.attoseconds / 1_000_000_000_000
}

/// What the run saw, over the measured window only.
final class Tally: Sendable {
    private struct State {
        var measuring = false
        /// When measuring began (µs): changes pushed before do not count.
        var start: Int64 = .max
        var propagation: [Int64] = []
        var pushLatency: [Int64] = []
        var pushed = 0
        /// Deliveries the accepted pushes owe: one per watcher of the store pushed to.
        var expected = 0
        var pushErrors = 0
        var watchErrors = 0
        var connected = 0
    }
    private let state = Mutex(State())

    func startMeasuring() {
        let now = elapsedMicroseconds()
        state.withLock {
            $0.measuring = true
            $0.start = now
        }
    }
    func stopMeasuring() { state.withLock { $0.measuring = false } }
    func connected() { state.withLock { $0.connected += 1 } }
    var connectedCount: Int { state.withLock { $0.connected } }

    /// A change pushed at `sent` (µs) reached a watcher now.
    func delivered(sentAt sent: Int64) {
        let now = elapsedMicroseconds()
        state.withLock { if $0.measuring, sent >= $0.start { $0.propagation.append(now - sent) } }
    }

    func pushed(latency: Int64?, watchers: Int) {
        state.withLock { state in
            guard state.measuring else { return }
            if let latency {
                state.pushed += 1
                state.expected += watchers
                state.pushLatency.append(latency)
            } else {
                state.pushErrors += 1
            }
        }
    }

    func watchFailed() { state.withLock { $0.watchErrors += 1 } }

    var snapshot: (propagation: [Int64], pushLatency: [Int64], pushed: Int, expected: Int, pushErrors: Int, watchErrors: Int) {
        state.withLock { ($0.propagation, $0.pushLatency, $0.pushed, $0.expected, $0.pushErrors, $0.watchErrors) }
    }
}

struct LoadClient: Sendable {
    let client: HTTPClient
    let options: Options

    func url(_ store: String, _ resource: WirePath.StoreResource, _ query: String = "") -> String {
        options.url + WirePath.store(account: options.account, store: store, resource) + query
    }

    func get<T: Decodable>(_ url: String, as type: T.Type, timeout: TimeAmount = .seconds(90)) async throws -> T {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(options.token)")
        let response = try await client.execute(request, timeout: timeout)
        let body = try await response.body.collect(upTo: 64 << 20)
        guard response.status == .ok else { throw LoadError(status: Int(response.status.code)) }
        return try JSONDecoder().decode(T.self, from: Data(body.readableBytesView))
    }

    /// A mount's watch: the store's event stream, each batch's changes noted with their delay;
    /// opened again from the last cursor if it fails.
    func watch(_ store: String, until deadline: ContinuousClock.Instant, tally: Tally) async {
        var cursor: Int64 = (try? await get(url(store, .cursor, WireQuery.encode(after: 0, wait: 0)), as: CursorResponse.self).cursor) ?? 0
        var connected = false
        while ContinuousClock.now < deadline {
            do {
                var request = HTTPClientRequest(url: url(store, .events, WireQuery.encode(after: cursor)))
                request.headers.add(name: "Authorization", value: "Bearer \(options.token)")
                let response = try await client.execute(request, deadline: .now() + .seconds(Int64(options.seconds) + 60))
                guard response.status == .ok else { throw LoadError(status: Int(response.status.code)) }
                if !connected {
                    connected = true
                    tally.connected()
                }
                var pending = ByteBuffer()
                for try await chunk in response.body {
                    var chunk = chunk
                    pending.writeBuffer(&chunk)
                    while let event = ServerSentEvents.next(in: &pending) {
                        guard let batch = try ChangeEvent.batch(in: event) else { continue }
                        for change in batch.changes {
                            if let sent = change.value.flatMap(Self.sentTime) { tally.delivered(sentAt: sent) }
                        }
                        cursor = batch.cursor
                    }
                    if ContinuousClock.now >= deadline { return }
                }
            } catch {
                tally.watchFailed()
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// One change, timed from the push's start to its answer.
    func push(key: String, to storeIndex: Int, sequence: Int32, tally: Tally) async {
        let store = "s\(storeIndex)"
        // Watcher w watches store w % stores.
        let watchers = options.watchers / options.stores + (storeIndex < options.watchers % options.stores ? 1 : 0)
        let sent = elapsedMicroseconds()
        let value = Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<string>\(sent)</string>\n</plist>\n".utf8)
        let change = StampedChange(key: key, value: value, type: .string,
                                   stamp: ChangeStamp(time: Int64(Date().timeIntervalSince1970 * 1000), counter: sequence, device: "load-writer"))
        do {
            var request = HTTPClientRequest(url: url(store, .changes))
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(options.token)")
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(PushRequest(changes: [change]))))
            let response = try await client.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            tally.pushed(latency: response.status == .ok ? elapsedMicroseconds() - sent : nil, watchers: watchers)
        } catch {
            tally.pushed(latency: nil, watchers: 0)
        }
    }

    static func sentTime(_ value: Data) -> Int64? {
        guard let text = String(data: value, encoding: .utf8), let open = text.range(of: "<string>"),
              let close = text.range(of: "</string>") else { return nil }
        return Int64(text[open.upperBound..<close.lowerBound])
    }
}

struct LoadError: Error { var status: Int }

/// CPU seconds (user + system) and resident memory of a process.
func processUsage(_ pid: Int32) -> (cpu: Double, rssKB: Int, peakKB: Int)? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
    let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
    let cpu = (Double(fields[11])! + Double(fields[12])!) / ticks
    func kilobytes(_ name: String) -> Int {
        status.split(separator: "\n").first { $0.hasPrefix(name) }.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    }
    return (cpu, kilobytes("VmRSS:"), kilobytes("VmHWM:"))
}

func percentile(_ sorted: [Int64], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1000
}

let options = Options(Array(CommandLine.arguments.dropFirst()))
var configuration = HTTPClient.Configuration()
configuration.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: options.watchers + 256)
configuration.timeout.connect = .seconds(10)
let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
let load = LoadClient(client: client, options: options)
let tally = Tally()
let warmup = 5.0
let deadline = ContinuousClock.now + .seconds(warmup + options.seconds + 2)

await withTaskGroup(of: Void.self) { group in
    for watcher in 0..<options.watchers {
        group.addTask { await load.watch("s\(watcher % options.stores)", until: deadline, tally: tally) }
    }
    group.addTask {
        // Writers start once every watcher has connected (or after the warm-up), at a steady rate.
        let connectBy = ContinuousClock.now + .seconds(warmup)
        while tally.connectedCount < options.watchers, ContinuousClock.now < connectBy { try? await Task.sleep(for: .milliseconds(50)) }
        try? await Task.sleep(for: .seconds(1))
        let before = options.serverPID.flatMap(processUsage)
        let started = ContinuousClock.now
        tally.startMeasuring()
        let interval = Duration.seconds(1 / options.rate)
        let total = Int(options.rate * options.seconds)
        await withTaskGroup(of: Void.self) { pushes in
            for n in 0..<total {
                try? await Task.sleep(until: started + interval * n, clock: .continuous)
                let store = Int.random(in: 0..<options.stores)
                pushes.addTask { await load.push(key: "k\(n % 64)", to: store, sequence: Int32(n), tally: tally) }
            }
        }
        // Let the last changes arrive, then stop counting.
        try? await Task.sleep(for: .seconds(1))
        tally.stopMeasuring()
        let wall = (ContinuousClock.now - started)
        let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        let after = options.serverPID.flatMap(processUsage)
        let mine = processUsage(getpid())
        let result = tally.snapshot
        let propagation = result.propagation.sorted()
        let pushes = result.pushLatency.sorted()
        print("""
            load: \(options.watchers) watchers (\(tally.connectedCount) connected) on \(options.stores) stores, \
            \(options.rate) changes/s for \(options.seconds) s
              pushed \(result.pushed) changes (\(result.pushErrors) failed); push latency p50 \(percentile(pushes, 0.5)) ms, \
            p99 \(percentile(pushes, 0.99)) ms
              deliveries \(propagation.count) of \(result.expected) expected (\(result.watchErrors) watch errors)
              propagation push -> watcher: p50 \(percentile(propagation, 0.5)) ms, p99 \(percentile(propagation, 0.99)) ms, \
            max \(percentile(propagation, 1)) ms (target p99 <= 250 ms: \(String(format: "%.2f", percentile(propagation, 0.99) / 250)) of it)
            """)
        if let before, let after {
            print(String(format: "  server: CPU %.0f%% of one core over %.1f s, RSS %.1f MB at the end, peak %.1f MB",
                         (after.cpu - before.cpu) / seconds * 100, seconds, Double(after.rssKB) / 1024, Double(after.peakKB) / 1024))
        }
        if let mine {
            print(String(format: "  this generator: CPU %.1f s in all, RSS %.1f MB", mine.cpu, Double(mine.rssKB) / 1024))
        }
    }
}
try await client.shutdown().get()
