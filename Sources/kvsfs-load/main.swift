// kvsfs-load: a load generator for `kvsfs serve` (bench/load.sh runs it).
//
// Watchers speak the protocol exactly as mounts do: each holds the store's event stream
// (GET .../events?after=N, server-sent events) and reads the batches of changes it brings. Writers push one change at a time at a steady rate, each to
// a random store; a change's value is the time it was pushed, so every watcher that fetches it
// knows how long it took to arrive. Prints propagation percentiles, push latency, and the server's
// CPU and memory over the measured window.
//
// Given several --url (server instances sharing one database), watchers of each store are spread
// over them, pushes take turns, and propagation is also shown for changes that crossed from one
// instance to another.
import ArgumentParser
import AsyncHTTPClient
import Foundation
import KVCloud
import KVStore
import KVSync
import KVWire
import NIOCore
import Synchronization

/// What the command line asks for.
struct Options: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvsfs-load", abstract: "Load a kvsfs sync server with watchers and pushes, and print propagation figures.")

    @Option(name: .customLong("url"), help: "A server instance (repeat for instances sharing one database).")
    var urls: [String] = []
    @Option(help: "A token of the account.")
    var token: String
    @Option(help: "The account whose stores are loaded.")
    var account = "load"
    @Option(help: "How many stores the watchers and pushes spread over.")
    var stores = 250
    @Option(help: "How many event streams are held open.")
    var watchers = 1000
    @Option(help: "Changes pushed per second.")
    var rate = 500.0
    @Option(help: "How long the pushes go on.")
    var seconds = 30.0
    @Option(name: .customLong("server-pid"), help: "A server process whose CPU and memory are reported (repeat).")
    var serverPIDs: [Int32] = []

    func validate() throws {
        guard !token.isEmpty else { throw ValidationError("--token must not be empty") }
        guard (1...1_000_000).contains(stores) else { throw ValidationError("--stores must be from 1 to 1000000") }
        guard (0...1_000_000).contains(watchers) else { throw ValidationError("--watchers must be from 0 to 1000000") }
        guard rate > 0, rate <= 1_000_000 else { throw ValidationError("--rate must be above 0 and at most 1000000") }
        guard seconds > 0, seconds <= 86_400 else { throw ValidationError("--seconds must be above 0 and at most 86400") }
    }

    /// The instances to load: those named, or the default server's address.
    var instances: [String] { urls.isEmpty ? ["http://127.0.0.1:18790"] : urls }
}

/// Microseconds since the generator started, as a change's value carries it.
let origin = ContinuousClock.now
func elapsedMicroseconds() -> Int64 {
    let d = ContinuousClock.now - origin
    return d.components.seconds * 1_000_000 + d.components.attoseconds / 1_000_000_000_000
}

/// The deliveries an event holds, read once for all the watchers of its store: they get the
/// same bytes, and reading them is most of what a watcher costs the generator.
final class EventReadings: Sendable {
    struct Reading: Sendable {
        var cursor: Int64
        /// Each change's push time (µs) and the instance it was pushed to.
        var sent: [(Int64, Int)]
    }

    /// An event's text with its hash, taken before the lock: thousands of watchers look
    /// events up at once, and hashing a whole event under the lock made them queue for it.
    private struct Key: Hashable {
        let text: String
        let hash: Int

        init(_ text: String) {
            self.text = text
            hash = text.hashValue
        }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.text == b.text }
    }

    private let readings = Mutex<[Key: Reading]>([:])

    func reading(of event: String) throws -> Reading? {
        let key = Key(event)
        if let known = readings.withLock({ $0[key] }) { return known }
        guard let batch = try ChangeEvent.batch(in: event) else { return nil }
        let reading = Reading(cursor: batch.cursor, sent: batch.changes.compactMap { $0.value.flatMap(LoadClient.sentTime) })
        readings.withLock { readings in
            if readings.count >= 4096 { readings = [:] }
            readings[key] = reading
        }
        return reading
    }
}

/// What the run saw, over the measured window only.
final class Tally: Sendable {
    private struct State {
        var measuring = false
        /// When measuring began (µs): changes pushed before do not count.
        var start: Int64 = .max
        var propagation: [Int64] = []
        /// Of those, the changes a watcher got from another instance than the one pushed to.
        var crossing: [Int64] = []
        var pushLatency: [Int64] = []
        /// How late each push began against its slot in the steady rate: the generator's own delay.
        var pushLag: [Int64] = []
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

    /// A change pushed at `sent` (µs) reached a watcher now, through another instance than
    /// the one it was pushed to when `crossed`.
    func delivered(sentAt sent: Int64, crossed: Bool) {
        let now = elapsedMicroseconds()
        state.withLock {
            guard $0.measuring, sent >= $0.start else { return }
            $0.propagation.append(now - sent)
            if crossed { $0.crossing.append(now - sent) }
        }
    }

    func pushed(latency: Int64?, lag: Int64, watchers: Int) {
        state.withLock { state in
            guard state.measuring else { return }
            state.pushLag.append(lag)
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

    var snapshot: (propagation: [Int64], crossing: [Int64], pushLatency: [Int64], pushLag: [Int64], pushed: Int, expected: Int,
                   pushErrors: Int, watchErrors: Int) {
        state.withLock { ($0.propagation, $0.crossing, $0.pushLatency, $0.pushLag, $0.pushed, $0.expected, $0.pushErrors, $0.watchErrors) }
    }
}

struct LoadClient: Sendable {
    let client: HTTPClient
    let options: Options
    let readings = EventReadings()

    func url(_ store: String, _ resource: WirePath.StoreResource, _ query: String = "", instance: Int = 0) -> String {
        options.instances[instance] + WirePath.store(account: options.account, store: store, resource) + query
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
    func watch(_ store: String, through instance: Int, until deadline: ContinuousClock.Instant, tally: Tally) async {
        var cursor: Int64 = (try? await get(url(store, .cursor, WireQuery.encode(after: 0, wait: 0), instance: instance), as: CursorResponse.self).cursor) ?? 0
        var connected = false
        while ContinuousClock.now < deadline {
            do {
                var request = HTTPClientRequest(url: url(store, .events, WireQuery.encode(after: cursor), instance: instance))
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
                        guard let reading = try readings.reading(of: event) else { continue }
                        for (sent, pushedTo) in reading.sent {
                            tally.delivered(sentAt: sent, crossed: pushedTo != instance)
                        }
                        cursor = reading.cursor
                    }
                    if ContinuousClock.now >= deadline { return }
                }
            } catch {
                tally.watchFailed()
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// One change, timed from the push's start to its answer; `slot`: when (µs) the steady rate
    /// meant it to start.
    func push(key: String, to storeIndex: Int, through instance: Int, sequence: Int32, slot: Int64, tally: Tally) async {
        let store = "s\(storeIndex)"
        // Watcher w watches store w % stores.
        let watchers = options.watchers / options.stores + (storeIndex < options.watchers % options.stores ? 1 : 0)
        let sent = elapsedMicroseconds()
        let value = Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<string>\(sent) \(instance)</string>\n</plist>\n".utf8)
        let change = StampedChange(key: key, value: value, type: .string,
                                   stamp: ChangeStamp(time: Int64(Date().timeIntervalSince1970 * 1000), counter: sequence, device: "load-writer"))
        do {
            var request = HTTPClientRequest(url: url(store, .changes, instance: instance))
            request.method = .POST
            request.headers.add(name: "Authorization", value: "Bearer \(options.token)")
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(PushRequest(changes: [change]))))
            let response = try await client.execute(request, timeout: .seconds(30))
            _ = try await response.body.collect(upTo: 1 << 20)
            tally.pushed(latency: response.status == .ok ? elapsedMicroseconds() - sent : nil, lag: sent - slot, watchers: watchers)
        } catch {
            tally.pushed(latency: nil, lag: sent - slot, watchers: 0)
        }
    }

    /// When a change was pushed (µs) and the instance it was pushed to, from its value.
    static func sentTime(_ value: Data) -> (Int64, Int)? {
        guard let text = String(data: value, encoding: .utf8), let open = text.range(of: "<string>"),
              let close = text.range(of: "</string>") else { return nil }
        let fields = text[open.upperBound..<close.lowerBound].split(separator: " ")
        guard fields.count == 2, let sent = Int64(fields[0]), let instance = Int(fields[1]) else { return nil }
        return (sent, instance)
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

let options = Options.parseOrExit()
var configuration = HTTPClient.Configuration()
configuration.connectionPool = .init(idleTimeout: .seconds(120), concurrentHTTP1ConnectionsPerHostSoftLimit: options.watchers + 256)
configuration.timeout.connect = .seconds(10)
let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
let load = LoadClient(client: client, options: options)
let tally = Tally()
// Each instance's memory before any watcher connects: what watchers add is measured from here.
let idle = options.serverPIDs.map(processUsage)
let warmup = 5.0
let deadline = ContinuousClock.now + .seconds(warmup + options.seconds + 2)

await withTaskGroup(of: Void.self) { group in
    for watcher in 0..<options.watchers {
        // Watcher w watches store w % stores, through instance (w / stores) % instances: every
        // store has watchers on every instance.
        let instance = (watcher / options.stores) % options.instances.count
        group.addTask { await load.watch("s\(watcher % options.stores)", through: instance, until: deadline, tally: tally) }
    }
    group.addTask {
        // Writers start once every watcher has connected (or after the warm-up), at a steady rate.
        let connectBy = ContinuousClock.now + .seconds(warmup)
        while tally.connectedCount < options.watchers, ContinuousClock.now < connectBy { try? await Task.sleep(for: .milliseconds(50)) }
        try? await Task.sleep(for: .seconds(1))
        let before = options.serverPIDs.map(processUsage)
        let started = ContinuousClock.now
        let startedAt = elapsedMicroseconds()
        tally.startMeasuring()
        let interval = Duration.seconds(1 / options.rate)
        let total = Int(options.rate * options.seconds)
        await withTaskGroup(of: Void.self) { pushes in
            for n in 0..<total {
                try? await Task.sleep(until: started + interval * n, clock: .continuous)
                let store = Int.random(in: 0..<options.stores)
                let instance = n % options.instances.count
                let slot = startedAt + Int64(Double(n) / options.rate * 1_000_000)
                pushes.addTask { await load.push(key: "k\(n % 64)", to: store, through: instance, sequence: Int32(n), slot: slot, tally: tally) }
            }
        }
        // Let the last changes arrive, then stop counting.
        try? await Task.sleep(for: .seconds(1))
        tally.stopMeasuring()
        let wall = (ContinuousClock.now - started)
        let seconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        let after = options.serverPIDs.map(processUsage)
        let mine = processUsage(getpid())
        let result = tally.snapshot
        let propagation = result.propagation.sorted()
        let crossing = result.crossing.sorted()
        let pushes = result.pushLatency.sorted()
        let lag = result.pushLag.sorted()
        print("""
            load: \(options.watchers) watchers (\(tally.connectedCount) connected) on \(options.stores) stores, \
            \(options.rate) changes/s for \(options.seconds) s
              pushed \(result.pushed) changes (\(result.pushErrors) failed); push latency p50 \(percentile(pushes, 0.5)) ms, \
            p99 \(percentile(pushes, 0.99)) ms
              deliveries \(propagation.count) of \(result.expected) expected (\(result.watchErrors) watch errors)
              propagation push -> watcher: p50 \(percentile(propagation, 0.5)) ms, p99 \(percentile(propagation, 0.99)) ms, \
            max \(percentile(propagation, 1)) ms (target p99 <= 250 ms: \(String(format: "%.2f", percentile(propagation, 0.99) / 250)) of it)
            """)
        if options.instances.count > 1 {
            print("""
                  across instances (\(crossing.count) deliveries): p50 \(percentile(crossing, 0.5)) ms, \
                p99 \(percentile(crossing, 0.99)) ms, max \(percentile(crossing, 1)) ms
                """)
        }
        for index in before.indices {
            guard let idle = idle[index], let before = before[index], let after = after[index] else { continue }
            // Memory per watcher: what the instance's resident memory grew by once its watchers
            // connected (before any push), over the watchers it holds.
            let held = Double(options.watchers) / Double(options.serverPIDs.count)
            print(String(format: "  server %d: CPU %.0f%% of one core over %.1f s, RSS %.1f MB idle, %.1f MB with watchers (%.1f KB per watcher), %.1f MB at the end, peak %.1f MB",
                         index + 1, (after.cpu - before.cpu) / seconds * 100, seconds, Double(idle.rssKB) / 1024,
                         Double(before.rssKB) / 1024, Double(before.rssKB - idle.rssKB) / max(1, held),
                         Double(after.rssKB) / 1024, Double(after.peakKB) / 1024))
        }
        if let mine {
            // How late pushes began is the generator's own delay: when it grows, the generator
            // (sharing the cores) is the limit, not the server.
            print(String(format: "  this generator: CPU %.1f s in all, RSS %.1f MB; pushes began late by p50 %.1f ms, p99 %.1f ms",
                         mine.cpu, Double(mine.rssKB) / 1024, percentile(lag, 0.5), percentile(lag, 0.99)))
        }
    }
}
try await client.shutdown().get()
