import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Synchronization
import Testing

/// When the engine talks to the remote, on a manual clock: what it does is decided by the
/// time the test sets, never by how long anything takes. The only tasks asleep on the clock
/// are the engine's ticker and its loop (a debounce, an interval between rounds, a backoff or
/// a retry-after), and the watcher once it has woken the loop: the remote's waits for changes
/// are timed by a clock of their own that nobody advances, so they end only when the remote
/// has changes as they start, or (with `ringing`) when the test rings.
@Suite("The sync engine's timing", .hangGuard)
struct SyncTimingTests {
    @Test("after each failure in a row the wait grows from 50 ms, doubling, to at most 30 s, drawn from the generator given")
    func backoffGrowsAndIsCapped() async throws {
        let waits = try await backoffWaits(seed: 7)
        var generator = SeededGenerator(seed: 7)
        for (failures, wait) in waits.enumerated() {
            let ceiling = min(.seconds(30), .milliseconds(50) * (1 << failures))
            #expect(wait >= ceiling / 2 && wait <= ceiling, "wait \(failures): \(wait), ceiling \(ceiling)")
            #expect(wait == ceiling * Double.random(in: 0.5...1, using: &generator), "wait \(failures): the jitter is the generator's")
        }
        #expect(waits.suffix(3).allSatisfy { $0 >= .seconds(15) && $0 <= .seconds(30) }, "\(waits)")
    }

    /// The waits between 14 attempts of an engine whose remote cannot be reached.
    private func backoffWaits(seed: UInt64) async throws -> [Duration] {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir, seed: seed)
            rig.link.setOnline(false)
            rig.engine.start()
            // The ticker and the backoff: advancing to the earlier wakes it; the loop tries
            // again only when it was the backoff.
            try await rig.clock.waitForSleepers(2)
            while rig.log.calls("identity").count < 14 {
                rig.clock.advanceToNextDeadline()
                try await rig.clock.waitForSleepers(2)
            }
            let attempts = rig.log.calls("identity").map(\.time)
            return zip(attempts, attempts.dropFirst()).map { $0.duration(to: $1) }
        }
    }

    @Test("a 503 with a retry-after: no request before it has passed, one as soon as it has")
    func retryAfterIsHonoured() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            try await rig.startSynchronized()
            rig.link.answerBusy(retryAfter: .seconds(7))
            try rig.store.put(.string("v"), forKey: "k")
            try await rig.waitForLog { $0.calls("push").count == 1 }  // at once: the mount was idle
            try await rig.clock.waitForSleepers(2)  // the retry-after
            let refused = try #require(rig.log.calls("push").first).time

            #expect(rig.clock.advance(by: .seconds(7) - .nanoseconds(1)) == 0, "nothing is due before the retry-after")
            #expect(rig.log.calls("push").count == 1)
            #expect(rig.clock.advance(by: .nanoseconds(1)) == 1)
            try await rig.waitForLog { $0.calls("push").count == 2 }
            #expect(rig.log.calls("push")[1].time == refused.advanced(by: .seconds(7)))
            // The round fetches once the remote's acceptance is recorded.
            try await rig.waitForLog { $0.calls("fetch").contains { $0.time.offset == .seconds(7) } }
            #expect(rig.store.syncState(forKey: "k") == .synced)
        }
    }

    @Test("a single change made less than 10 ms after a round that moved at most one is pushed at once; one after another, each reaches the remote when it is made")
    func singleChangesArePushedAtOnce() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            try await rig.startSynchronized()
            for index in 1...3 {
                // Less than the minimum interval and more than the debounce after the last round.
                rig.clock.advance(by: .milliseconds(3))
                try rig.store.put(.integer(index), forKey: "k")
                try await rig.waitForLogUnstuck { $0.calls("push").count == index }
                let push = rig.log.calls("push")[index - 1]
                #expect(push.time.offset == .milliseconds(3 * index), "change \(index) made at \(Duration.milliseconds(3 * index)), pushed at \(push.time)")
                #expect(push.changes == 1)
            }
        }
    }

    @Test("a change made elsewhere, less than 10 ms after a round that moved nothing, is fetched as soon as the remote tells of it")
    func remoteChangeIsFetchedAtOnce() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir, ringing: true)
            try await rig.startSynchronized()
            try await rig.waitForLog { !$0.calls("wait").isEmpty }  // the watcher listens
            rig.clock.advance(by: .milliseconds(3))
            try await rig.writeElsewhere(.string("elsewhere"), forKey: "k")
            let fetches = rig.log.calls("fetch").count
            rig.log.bell?.ring()
            try await rig.waitForLogUnstuck { $0.calls("fetch").count > fetches }
            let fetch = rig.log.calls("fetch")[fetches]
            #expect(fetch.time.offset == .milliseconds(3), "told at t+3 ms, fetched at \(fetch.time)")
            let told = await rig.nextEvent { $0.reason == .serverChange }
            #expect(told?.keys == ["k"])
            let held = try rig.store.entry(forKey: "k").map { try PropertyListCodec.decode($0.xml) }
            #expect(held == .string("elsewhere"))
        }
    }

    @Test("after a round that moved several changes, the changes made next wait for the debounce, and travel in one push when it ends")
    func burstIsOnePush() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir, debounce: .seconds(1))
            try await rig.startSynchronized()
            try rig.store.apply([.put("a", .integer(1)), .put("b", .integer(2))])
            try await rig.waitForLogUnstuck { $0.calls("push").count == 1 }
            try rig.store.put(.integer(0), forKey: "k0")
            try await rig.clock.waitForSleepers(2)  // the window opened by the first change
            for index in 1..<10 { try rig.store.put(.integer(index), forKey: "k\(index)") }
            #expect(rig.clock.advance(by: .seconds(1) - .nanoseconds(1)) == 0)
            #expect(rig.log.calls("push").count == 1)
            #expect(rig.clock.advance(by: .nanoseconds(1)) == 1)
            try await rig.waitForLog { $0.calls("push").count == 2 }
            #expect(rig.log.calls("push").map(\.changes) == [2, 10])
        }
    }

    @Test("a change made after a push of 32 changes reaches the remote 50 ms after that push began; after a push of 2, 10 ms after; after a push of one, at once")
    func burstSpacesRounds() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            try await rig.startSynchronized()
            // The watcher has looked, and waits on a clock of its own: the only sleepers on the
            // test's clock are the ticker and the loop.
            try await rig.waitForLog { !$0.calls("wait").isEmpty }
            try rig.store.apply((0..<32).map { .put("k\($0)", .integer($0)) })
            try await rig.waitForLogUnstuck { $0.calls("push").count == 1 }  // at once: the round at start moved nothing
            let burst = try #require(rig.log.calls("push").first)
            #expect(burst.changes == 32 && burst.time.offset == .zero)

            // Changes made once the last push has reached the remote: the round that pushes them
            // starts when the interval that push's round set has passed, and not a nanosecond
            // sooner (at once for none).
            func pushOf(_ changes: [KeyChange], waiting interval: Duration) async throws -> CallLog.Call {
                let pushes = rig.log.calls("push").count
                try rig.store.apply(changes)
                if interval > .zero {
                    try await rig.clock.waitForSleepers(2)  // the loop, and the ticker
                    try #require(rig.clock.advance(by: interval - .nanoseconds(1)) == 0, "nothing is due before \(interval)")
                    try #require(rig.clock.advance(by: .nanoseconds(1)) == 1)
                }
                try await rig.waitForLogUnstuck { $0.calls("push").count == pushes + 1 }
                return rig.log.calls("push")[pushes]
            }
            let afterBurst = try await pushOf([.put("late", .integer(1))], waiting: .milliseconds(50))
            #expect(afterBurst.time == burst.time.advanced(by: .milliseconds(50)) && afterBurst.changes == 1)
            let afterSingle = try await pushOf([.put("late", .integer(2)), .put("other", .integer(2))], waiting: .zero)
            #expect(afterSingle.time == afterBurst.time && afterSingle.changes == 2)
            let afterTwo = try await pushOf([.put("late", .integer(3))], waiting: .milliseconds(10))
            #expect(afterTwo.time == afterSingle.time.advanced(by: .milliseconds(10)))
            let afterOne = try await pushOf([.put("late", .integer(4))], waiting: .zero)
            #expect(afterOne.time == afterTwo.time)
        }
    }

    @Test("with nothing asking for one, a round runs when the clock passes 30 s, and not before")
    func periodicRound() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            try await rig.startSynchronized()
            try await rig.clock.waitForSleepers(1)  // the ticker
            #expect(rig.clock.advance(by: .seconds(30) - .nanoseconds(1)) == 0, "nothing is due before 30 s")
            #expect(rig.log.calls("fetch").count == 2)
            #expect(rig.clock.advance(by: .nanoseconds(1)) == 1, "the ticker")
            try await rig.waitForLog { $0.calls("fetch").count == 3 }
            #expect(try #require(rig.log.calls("fetch").last).time.offset == .seconds(30), "at once: the last round moved nothing")
        }
    }

    @Test("the first round of a daemon, and the first after the remote failed, fetch the whole history; others do not")
    func auditOnlyAfterAGap() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            func fetchesFromStart(_ round: () async throws -> Void) async rethrows -> Int {
                let before = rig.log.calls("fetch").count
                try await round()
                return rig.log.calls("fetch").dropFirst(before).filter { $0.after == 0 }.count
            }
            try rig.store.put(.string("v"), forKey: "k")
            try await rig.engine.synchronize()
            #expect(try await fetchesFromStart { try await rig.engine.synchronize() } == 0)
            // The daemon's start is a gap: an engine started again on the store audits.
            let restarted = SyncEngine(store: rig.store, remote: rig.log, remoteStore: "default", applier: StoreApplier(store: rig.store), clock: rig.clock)
            #expect(try await fetchesFromStart { try await restarted.synchronize() } == 1)
            #expect(try await fetchesFromStart { try await restarted.synchronize() } == 0)
            rig.link.setOnline(false)
            await #expect(throws: (any Error).self) { try await restarted.synchronize() }
            await #expect(throws: (any Error).self) { try await restarted.synchronize() }
            rig.link.setOnline(true)
            #expect(try await fetchesFromStart { try await restarted.synchronize() } == 1, "one audit for two failures")
            #expect(try await fetchesFromStart { try await restarted.synchronize() } == 0)
            // A server whose storage is down answers 503.
            try rig.store.put(.string("w"), forKey: "k")
            rig.link.answerBusy(retryAfter: .seconds(1))
            await #expect(throws: (any Error).self) { try await restarted.synchronize() }
            #expect(try await fetchesFromStart { try await restarted.synchronize() } == 1, "a 503 is a gap")
            #expect(rig.store.syncState(forKey: "k") == .synced)
        }
    }

    @Test("the account is checked on the first round, then not again until 60 s have passed")
    func accountCheckInterval() async throws {
        try await withTemporaryDirectory { dir in
            let rig = try Rig(in: dir)
            try await rig.startSynchronized()
            for seconds in [1.0, 29.0, 30.0, 45.0, 59.9] {
                try await rig.round(at: .seconds(seconds))
                #expect(rig.log.calls("identity").count == 1, "a round at \(seconds) s does not ask the account again")
            }
            try await rig.round(at: .seconds(60))
            #expect(rig.log.calls("identity").map(\.time.offset.components.seconds) == [0, 60])
            try await rig.round(at: .seconds(119))
            #expect(rig.log.calls("identity").count == 2)
        }
    }
}

/// An engine on a manual clock over an in-memory remote (behind a link that can be cut or
/// made busy) whose calls are noted.
private final class Rig {
    let clock = ManualClock()
    let link: InterruptibleRemote
    let log: CallLog
    let store: KeyValueStore
    let engine: SyncEngine
    private let dir: TemporaryDirectory
    private let cloud = MemoryCloudStorage()
    private var arrivals: AsyncStream<CallLog.Call>.Iterator
    private var events: AsyncStream<SyncEvent>.Iterator

    /// `ringing`: the watcher's waits for remote changes answer when the test rings.
    init(in dir: TemporaryDirectory, debounce: Duration = .milliseconds(2), seed: UInt64 = 1, ringing: Bool = false) throws {
        self.dir = dir
        link = InterruptibleRemote(EmbeddedChangeLog(description: "memory", clock: ManualClock()) { [cloud] in cloud })
        log = CallLog(link, clock: clock, bell: ringing ? RemoteBell() : nil)
        arrivals = log.arrivals.makeAsyncIterator()
        store = try makeStore(in: dir)
        let (told, tell) = AsyncStream.makeStream(of: SyncEvent.self)
        events = told.makeAsyncIterator()
        engine = SyncEngine(store: store, remote: log, remoteStore: "default", applier: StoreApplier(store: store), debounce: debounce,
                            clock: clock, jitter: SeededGenerator(seed: seed), onEvent: { tell.yield($0) })
    }

    deinit { engine.stop() }

    /// Synchronises at time 0, starts the engine, and returns once the round it runs at start
    /// has fetched (and so pushed, had there been anything to push).
    func startSynchronized() async throws {
        try await engine.synchronize()
        engine.start()
        try await waitForLog { $0.calls("fetch").count == 2 }
    }

    /// Returns once `condition` holds for the calls noted so far, waiting for each new one.
    func waitForLog(_ condition: (CallLog) -> Bool) async throws {
        while !condition(log) {
            guard await arrivals.next() != nil else { throw CancellationError() }
        }
    }

    /// As `waitForLog`, for what the engine should do without waiting: should it sleep on the
    /// clock instead, the clock is moved on to the next deadline every 60 s of real time, so
    /// that the test fails on the times noted rather than hanging.
    func waitForLogUnstuck(_ condition: (CallLog) -> Bool) async throws {
        // Long enough that a machine slowed by the rest of the suite is not taken for an engine
        // asleep: a nudge moves the clock, and every time the test records after it.
        let nudger = Task { [clock] in
            while true {
                try await Task.sleep(for: .seconds(60))
                clock.advanceToNextDeadline()
            }
        }
        defer { nudger.cancel() }
        try await waitForLog(condition)
    }

    /// The next event the engine tells that `matching` picks, nil once it has stopped.
    func nextEvent(_ matching: (SyncEvent) -> Bool) async -> SyncEvent? {
        while let event = await events.next() {
            if matching(event) { return event }
        }
        return nil
    }

    /// Moves the clock to `time`, asks for a round, and returns once a round started there has
    /// fetched: at once, as the rounds of these tests move nothing.
    func round(at time: Duration) async throws {
        clock.advance(to: ManualClock.Instant(offset: time))
        engine.requestSync()
        try await waitForLog { $0.calls("fetch").contains { $0.time.offset >= time } }
    }

    /// Another mount writes `value` to `key` and pushes it, through a remote of its own on the
    /// same storage: nothing this engine's remote notes.
    func writeElsewhere(_ value: PropertyListValue, forKey key: String) async throws {
        let other = try KeyValueStore(path: (dir.path as NSString).appendingPathComponent("elsewhere.sqlite"))
        try other.put(value, forKey: key)
        let remote = EmbeddedChangeLog(description: "memory", clock: ManualClock()) { [cloud] in cloud }
        try await SyncEngine(store: other, remote: remote, remoteStore: "default", applier: StoreApplier(store: other)).synchronize()
    }
}

/// A remote that notes every call reaching it (when, on the test's clock, and how many changes
/// a push carried) around a real one, and hands each to a test waiting for it.
final class CallLog: ChangeLogWrapper {
    struct Call: Sendable {
        let name: String
        let time: ManualClock.Instant
        let changes: Int
        /// The cursor a fetch asked after.
        var after: Int64?
    }

    let base: any ChangeLog
    /// When set, the watcher's waits for changes answer true when it rings, and never else.
    let bell: RemoteBell?
    private let clock: ManualClock
    private let recorded = Mutex<[Call]>([])
    /// Every call as it reaches the remote.
    let arrivals: AsyncStream<Call>
    private let arrival: AsyncStream<Call>.Continuation

    init(_ base: any ChangeLog, clock: ManualClock, bell: RemoteBell? = nil) {
        self.base = base
        self.clock = clock
        self.bell = bell
        (arrivals, arrival) = AsyncStream.makeStream(of: Call.self)
    }

    func calls(_ name: String) -> [Call] {
        recorded.withLock { $0.filter { $0.name == name } }
    }

    private func note(_ name: String, changes: Int = 0, after: Int64? = nil) {
        let call = Call(name: name, time: clock.now, changes: changes, after: after)
        recorded.withLock { $0.append(call) }
        arrival.yield(call)
    }

    func identity() async throws(CloudError) -> String {
        note("identity")
        return try await base.identity()
    }

    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        note("push", changes: changes.count)
        return try await base.push(changes, to: store, mark: mark)
    }

    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        note("fetch", after: cursor)
        return try await base.changes(in: store, after: cursor, mark: mark, limit: limit)
    }

    func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws(CloudError) -> Bool {
        note("wait")
        if let bell { return await bell.wait() }
        return try await base.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
    }

    func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        note("renew")
        return try await base.renewIdentity(replacing: seen)
    }
}

/// The test's word that the remote has changes: each ring answers one wait.
final class RemoteBell: Sendable {
    private let rings: AsyncStream<Void>
    private let ringer: AsyncStream<Void>.Continuation

    init() {
        (rings, ringer) = AsyncStream.makeStream(of: Void.self)
    }

    func ring() {
        ringer.yield()
    }

    /// True after a ring; false once the waiting task is cancelled (the engine stops).
    func wait() async -> Bool {
        var next = rings.makeAsyncIterator()
        return await next.next() != nil
    }
}
