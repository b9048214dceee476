import Foundation
import KVTestSupport
import Testing

/// Two mounts syncing through a proxy that stalls and cuts their connections, while the server
/// stops, restarts, and comes back from a backup. Once the network heals, both mounts hold the
/// same keys and bytes, and every write a mount acknowledged is there unless a later write to
/// the key replaced it. The schedule is drawn from a seed, printed with the figures;
/// KVSFS_PROXY_SEED=N replays it (the timing of the daemons aside).
@Suite("Sync through a faulty network", .serialized)
struct ProxyFaultTests {
    @Test("stalls, cuts mid-push and mid-event-stream, restarts and a restore from a backup lose no acknowledged write",
          .hangGuard, arguments: ServerBackend.allCases)
    func faultyNetwork(backend: ServerBackend) async throws {
        let seed = ProcessInfo.processInfo.environment["KVSFS_PROXY_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...999_999)
        print("proxy faults on \(backend): seed \(seed)")
        let outcome = try await onOwnThread { try Self.run(backend, seed: seed) }
        #expect(outcome.differences.isEmpty, "the mounts differ (seed \(seed)): \(outcome.differences.joined(separator: "; "))")
        #expect(outcome.lost.isEmpty,
                "acknowledged writes lost or deleted keys back (seed \(seed)): \(outcome.lost.map(\.description).joined(separator: "; "))")
        #expect(outcome.syncStates.allSatisfy { $0.hasPrefix("synced") }, "A, B: \(outcome.syncStates) (seed \(seed))")
        #expect(outcome.daemonsRunning)
    }

    /// What the schedule left: what the checks look at.
    private struct Outcome: Sendable {
        var differences: [String]
        var lost: [LostWrite]
        var syncStates: [String]
        var daemonsRunning: Bool
    }

    /// Plays one schedule and heals; blocks for its whole length.
    private static func run(_ backend: ServerBackend, seed: UInt64) throws -> Outcome {
        let started = Date()
        return try withTestServer(backend, label: "kvsfs-proxy") { fixture in
            let proxy = try FaultProxy(targetPort: fixture.server.port)
            defer { proxy.stop() }
            let a = try fixture.mount("a", remote: proxy.url)
            defer { a.stop() }
            let b = try fixture.mount("b", remote: proxy.url)
            defer { b.stop() }
            let backup = DatabaseBackup(of: fixture.database, in: fixture.directory)
            defer { backup.remove() }
            var run = FaultRun(seed: seed, a: a, b: b, server: fixture, proxy: proxy, backup: backup)
            try run.play()
            let attempts = run.heal()
            let (shownA, shownB) = (try Replica(a), try Replica(b))
            let lost = run.ledger.lost(on: [shownA, shownB])
            print("""
                proxy faults on \(backend), seed \(seed): \(proxy.figures), restarts \(run.restarts), \
                writes \(run.ledger.acknowledged) acknowledged (\(run.ledger.failed) failed) to \(run.ledger.keys.count) keys, \
                keys lost \(lost.count), server cursor \(run.restore.before) restored to \(run.restore.after), \
                sync calls \(attempts), \(Int(Date().timeIntervalSince(started))) s; \
                A: \(shownA.syncState); B: \(shownB.syncState)
                """)
            let differences = shownA.differences(from: shownB)
            if !differences.isEmpty { run.describe(shownA.differingKeys(from: shownB)) }
            return Outcome(differences: differences, lost: lost, syncStates: [shownA.syncState, shownB.syncState],
                           daemonsRunning: a.process.isRunning && b.process.isRunning)
        }
    }

    @Test("the proxy relays, stalls, cuts a request or a response where told, cuts what is open, and refuses, as curl sees it",
          .hangGuard)
    func proxyControls() throws {
        try withTestServer(label: "kvsfs-proxy") { fixture in
            let proxy = try FaultProxy(targetPort: fixture.server.port)
            defer { proxy.stop() }
            /// curl's exit status and what it read of /health through the proxy.
            func health() throws -> String {
                let result = try shell("curl -s --max-time 1 \(proxy.url)/health; echo -n \" $?\"")
                return result.standardOutput
            }
            #expect(try health() == "ok\n 0")
            proxy.stall()
            #expect(try health() == " 28", "held until curl gives up")
            proxy.release()
            proxy.cutNext(.request(afterBytes: 5))
            let requestCut = try health()
            #expect(requestCut == " 56", "the server got `GET /`; curl a reset (the rest of its request was unread): \(requestCut)")
            proxy.cutNext(.response(afterBytes: 12))
            let responseCut = try health()
            #expect(responseCut == " 52", "curl got `HTTP/1.1 200` and the end, not a whole reply: \(responseCut)")
            #expect(try health() == "ok\n 0", "a cut is made once")
            proxy.refuse(true)
            #expect(try health() != "ok\n 0")
            proxy.refuse(false)
            let streamEnded = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var stream: CommandResult?
            let connectionsBefore = proxy.figures.connections
            DispatchQueue.global().async {
                stream = try? shell("curl -s -N --max-time 5 -H 'Authorization: Bearer \(fixture.token)' \(proxy.url)/v1/alice/default/events; echo -n \" $?\"")
                streamEnded.signal()
            }
            // Cut once the stream's connection is through the proxy and its answer under way: on
            // a busy machine curl may take longer than any fixed pause to start.
            let connected = ContinuousClock.now + .seconds(10)
            while proxy.figures.connections == connectionsBefore, ContinuousClock.now < connected { usleep(10_000) }
            usleep(500_000)
            proxy.cutAll()
            // Uncut, the stream would end only at curl's --max-time, with another exit status.
            #expect(streamEnded.wait(timeout: .now() + 10) == .success, "an event stream ends when it is cut")
            #expect(stream?.standardOutput.hasSuffix(" 18") == true, "a chunked response ends early: \(String(describing: stream))")
            proxy.cutAtRandom(probability: 1, maximumBytes: 0, seed: 1)
            let randomCut = try health()
            #expect(randomCut == " 52" || randomCut == " 56", "each new connection cut before a byte goes through: \(randomCut)")
            proxy.passThrough()
            #expect(try health() == "ok\n 0")
            let figures = proxy.figures
            #expect(figures.cuts == 4 && figures.refused == 1 && figures.stalls == 1 && figures.connections == 9, "\(figures)")
        }
    }
}

/// One seeded run of writes on mounts A and B while the proxy and the server fail.
private struct FaultRun {
    let a: DaemonMount
    let b: DaemonMount
    let server: ServerProcess
    let token: String
    let proxy: FaultProxy
    let backup: DatabaseBackup
    var generator: SeededGenerator
    var ledger = WriteLedger()
    var restarts = 0
    /// The server's cursor of the store before it was stopped to be restored from the backup,
    /// and as it started again.
    var restore = (before: "", after: "")

    /// Steps of the schedule, about 20 ms each, and the steps at which the server stops, its
    /// database is copied while it is down, it starts again, and it is stopped to be restored
    /// from that copy and started again. Writes go on throughout.
    static let steps = 240
    static let stop = 40
    static let backUp = 48
    static let restart = 56
    static let stopToRestore = 120
    static let restored = 130

    init(seed: UInt64, a: DaemonMount, b: DaemonMount, server: ServerFixture, proxy: FaultProxy, backup: DatabaseBackup) {
        (self.a, self.b, self.server, self.token, self.proxy, self.backup) = (a, b, server.server, server.token, proxy, backup)
        generator = SeededGenerator(seed: seed)
        proxy.cutAtRandom(probability: 0.35, maximumBytes: 1500, seed: seed &+ 1)
    }

    mutating func play() throws {
        var stallLeft = 0
        var refusalLeft = 0
        for step in 0..<Self.steps {
            switch step {
            case Self.stop:
                #expect(server.stop() == 0, "SIGTERM ends the server cleanly")
            case Self.stopToRestore:
                restore.before = try cursor()
                #expect(server.stop() == 0, "SIGTERM ends the server cleanly")
                try backup.restore()
            case Self.backUp:
                try backup.take()
            case Self.restart, Self.restored:
                try server.start()
                restarts += 1
                if step == Self.restored { restore.after = try cursor() }
            default:
                break
            }
            for _ in 0...Int.random(in: 0...2, using: &generator) { writeSomething(step: step) }
            if stallLeft > 0 {
                stallLeft -= 1
                if stallLeft == 0 { proxy.release() }
            } else if chance(0.06) {
                stallLeft = Int.random(in: 3...20, using: &generator)
                proxy.stall()
            }
            if refusalLeft > 0 {
                refusalLeft -= 1
                if refusalLeft == 0 { proxy.refuse(false) }
            } else if chance(0.03) {
                refusalLeft = Int.random(in: 2...8, using: &generator)
                proxy.refuse(true)
            }
            if chance(0.04) { proxy.cutAll() }
            usleep(15_000)
        }
    }

    /// For keys the mounts disagree on: the server's rows for them (from the start of its
    /// history), each mount's sync state of the key, and each daemon's position, printed so
    /// that a divergence says which side missed what.
    func describe(_ keys: [String]) {
        let rows = (try? shell("curl -s -H 'Authorization: Bearer \(token)' '\(server.url)/v1/alice/default/changes?after=0&limit=10000'").standardOutput) ?? ""
        for key in keys {
            let held = rows.components(separatedBy: "{").filter { $0.contains("\"key\":\"\(key)\"") }.map { "{" + $0 }
            print("diverged \(key): server \(held.isEmpty ? "holds no row" : held.joined())")
            for mount in [a, b] {
                let state = (try? shell("getfattr --absolute-names --only-values -n user.kvsfs.sync \(mount.path(key)) 2>&1").standardOutput) ?? "unreadable"
                print("diverged \(key): \((mount.mountpoint as NSString).lastPathComponent) \(state)")
            }
        }
        for mount in [a, b] {
            let position = (try? shell("getfattr --absolute-names -d -m user.kvsfs \(mount.mountpoint) 2>&1").standardOutput) ?? "unreadable"
            print("diverged: \((mount.mountpoint as NSString).lastPathComponent) root \(position)")
        }
    }

    /// The store's cursor, asked of the server itself.
    private func cursor() throws -> String {
        let answer = try shell("curl -s -H 'Authorization: Bearer \(token)' \(server.url)/v1/alice/default/cursor").standardOutput
        return answer.filter(\.isNumber)
    }

    /// A write (or, now and then, a deletion) of one of a mount's own keys (`a0`..., `b0`...)
    /// or of a key both write (`s0`...).
    private mutating func writeSomething(step: Int) {
        let (name, mount) = chance(0.5) ? ("a", a) : ("b", b)
        let key = chance(0.2) ? "s\(Int.random(in: 0..<8, using: &generator))" : "\(name)\(Int.random(in: 0..<40, using: &generator))"
        let path = mount.path(key)
        if !key.hasPrefix("s"), chance(0.05), ledger.holds(key, by: name) {
            ledger.record(key, by: name, value: nil, acknowledged: unlink(path) == 0)
            return
        }
        let value = "\(name)-\(step)-\(ledger.acknowledged + ledger.failed)"
        let acknowledged = Self.acknowledgedWrite("\"\(value)\"\n", to: path)
        if !acknowledged { print("writing \(value) to \(key) on \(name) failed: \(String(cString: strerror(errno)))") }
        ledger.record(key, by: name, value: value, acknowledged: acknowledged)
    }

    /// Writes as a program does (open with O_TRUNC, write, close): true when every call
    /// succeeded, that is, the write is acknowledged.
    private static func acknowledgedWrite(_ text: String, to path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { return false }
        let bytes = Array(text.utf8)
        let written = write(fd, bytes, bytes.count)
        return close(fd) == 0 && written == bytes.count
    }

    private mutating func chance(_ probability: Double) -> Bool {
        Double.random(in: 0..<1, using: &generator) < probability
    }

    /// Lets every byte through and runs `kvsfs sync` on A, B, A and B (each again, a bounded
    /// number of times, while it fails), then waits (at most 10 s, syncing again each second)
    /// until both mounts hold the same values and say they are synced. Returns how many
    /// `kvsfs sync` it ran.
    func heal() -> Int {
        proxy.passThrough()
        var calls = 0
        func sync(_ mount: DaemonMount) -> Bool {
            calls += 1
            return (try? run(kvsfsBinary, ["sync", mount.mountpoint], timeout: 40))?.status == 0
        }
        for mount in [a, b, a, b] {
            var failures = 0
            while !sync(mount), failures < 8 {
                failures += 1
                usleep(500_000)
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let one = try? Replica(a), let other = try? Replica(b), one.values == other.values,
               one.syncState.hasPrefix("synced"), other.syncState.hasPrefix("synced") { break }
            sleep(1)
            _ = (sync(a), sync(b))
        }
        return calls
    }
}

/// The values each mount may end with for each key: the last one it acknowledged, and any it
/// tried since whose write failed (its outcome is not known). Each mount's later write to a
/// key is stamped after its earlier ones, so a key ends with one of these, from the mount
/// whose last write has the greater stamp; nil stands for a deletion (or no write yet).
private struct WriteLedger {
    private var outcomes: [String: [String: [String?]]] = [:]
    var acknowledged = 0
    var failed = 0
    var keys: Set<String> { Set(outcomes.keys) }

    mutating func record(_ key: String, by mount: String, value: String?, acknowledged: Bool) {
        if acknowledged {
            self.acknowledged += 1
            outcomes[key, default: [:]][mount] = [value]
        } else {
            failed += 1
            outcomes[key, default: [:]][mount, default: [nil]].append(value)
        }
    }

    /// Whether `mount`'s last acknowledged change to `key` wrote it (and did not delete it).
    func holds(_ key: String, by mount: String) -> Bool {
        outcomes[key]?[mount]?.first.map { $0 != nil } ?? false
    }

    /// Each key whose value on a replica is none of those it may end with.
    func lost(on replicas: [Replica]) -> [LostWrite] {
        var lost: [LostWrite] = []
        for (key, byMount) in outcomes.sorted(by: { $0.key < $1.key }) {
            let allowed = byMount.values.flatMap { $0 }
            for replica in replicas where !allowed.contains(replica.text(of: key)) {
                lost.append(LostWrite(
                    description: "\(key) on \(replica.name) is \(replica.text(of: key) ?? "absent"), not one of \(allowed.map { $0 ?? "absent" })",
                    resurrected: replica.text(of: key) != nil && allowed.allSatisfy { $0 == nil }))
            }
        }
        return lost
    }
}

/// A key whose value on a replica is none of those it may end with.
struct LostWrite: Sendable {
    var description: String
    /// Every acknowledged last change deleted the key, yet the replica shows a value.
    var resurrected: Bool
}

/// What a mount shows: each key's bytes, and its root's `user.kvsfs.sync` (as `getfattr` reads it).
private struct Replica {
    let mount: DaemonMount
    let values: [String: Data]
    let syncState: String
    var name: String { (mount.mountpoint as NSString).lastPathComponent }

    init(_ mount: DaemonMount) throws {
        self.mount = mount
        var values: [String: Data] = [:]
        for key in try FileManager.default.contentsOfDirectory(atPath: mount.mountpoint) {
            values[key] = try Data(contentsOf: URL(fileURLWithPath: mount.path(key)))
        }
        self.values = values
        syncState = (try? shell("getfattr --only-values -n user.kvsfs.sync \(mount.mountpoint)").standardOutput) ?? "unreadable"
    }

    /// The string a key holds (its canonical XML's `<string>`), nil when it is absent.
    func text(of key: String) -> String? {
        guard let data = values[key] else { return nil }
        let xml = String(decoding: data, as: UTF8.self)
        guard let start = xml.range(of: "<string>"), let end = xml.range(of: "</string>", range: start.upperBound..<xml.endIndex) else { return xml }
        return String(xml[start.upperBound..<end.lowerBound])
    }

    /// The keys whose bytes differ between the two mounts (one absent counts), sorted.
    func differingKeys(from other: Replica) -> [String] {
        Set(values.keys).union(other.values.keys).sorted().filter { values[$0] != other.values[$0] }
    }

    func differences(from other: Replica) -> [String] {
        differingKeys(from: other).map { key in
            "\(key): \(name) \(text(of: key) ?? "absent"), \(other.name) \(other.text(of: key) ?? "absent")"
        }
    }
}

/// A copy of a stopped server's database, put back by `restore()` under a stopped server: the
/// SQLite file and its write-ahead log copied aside, or on PostgreSQL a database made from it
/// as a template.
private struct DatabaseBackup {
    let database: TestDatabase
    let directory: String
    private static let sqliteSuffixes = ["", "-wal", "-shm"]

    init(of database: TestDatabase, in directory: TemporaryDirectory) {
        self.database = database
        self.directory = directory.subdirectory("backup")
    }

    private var sqlitePath: String? {
        database.url.hasPrefix("sqlite://") ? String(database.url.dropFirst("sqlite://".count)) : nil
    }

    /// The PostgreSQL database's name, the last part of its URL.
    private var postgresName: String { String(database.url.split(separator: "/").last ?? "") }

    func take() throws {
        guard let path = sqlitePath else { return try Self.psql("CREATE DATABASE \(postgresName)_backup TEMPLATE \(postgresName)") }
        for suffix in Self.sqliteSuffixes where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: directory + "/server.sqlite" + suffix)
        }
    }

    func restore() throws {
        guard let path = sqlitePath else {
            try Self.psql("DROP DATABASE \(postgresName) WITH (FORCE)")
            return try Self.psql("CREATE DATABASE \(postgresName) TEMPLATE \(postgresName)_backup")
        }
        for suffix in Self.sqliteSuffixes {
            try? FileManager.default.removeItem(atPath: path + suffix)
            if FileManager.default.fileExists(atPath: directory + "/server.sqlite" + suffix) {
                try FileManager.default.copyItem(atPath: directory + "/server.sqlite" + suffix, toPath: path + suffix)
            }
        }
    }

    func remove() {
        if sqlitePath == nil { try? Self.psql("DROP DATABASE IF EXISTS \(postgresName)_backup WITH (FORCE)") }
    }

    private static func psql(_ statement: String) throws {
        let server = ProcessInfo.processInfo.environment["KVSFS_TEST_POSTGRES"] ?? ""
        let result = try run("/usr/bin/psql", ["\(server)/postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", statement])
        guard result.status == 0 else { throw BackupError(description: "psql \(statement): \(result)") }
    }

    struct BackupError: Error, CustomStringConvertible {
        let description: String
    }
}
