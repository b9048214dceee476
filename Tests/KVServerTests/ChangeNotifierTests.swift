import Foundation
import KVServer
import KVTestSupport
import Testing

/// The long polls' wake-ups: a change that lands between a request's look at the storage and
/// its wait must end the wait at once.
///
/// The waits' timeouts are on a manual clock: a wait that ends while the clock stands still
/// ended because of a notification, never because of how long the machine took.
@Suite("Long-poll wake-ups", .hangGuard)
struct ChangeNotifierTests {
    private let timeout = Duration.seconds(60)

    /// Waits in a task of its own; `done` tells whether the wait has ended.
    private final class Waiter: Sendable {
        let task: Task<Void, Never>
        init(_ wait: @escaping @Sendable () async -> Void) { task = Task { await wait() } }
        func ended() async { await task.value }
    }

    @Test("a change notified after the version was read ends the wait at once")
    func notifiedBeforeWaiting() async {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        let seen = notifier.version(of: "a.default")
        notifier.notify("a.default")
        await notifier.wait(for: "a.default", since: seen, timeout: timeout)
        #expect(clock.now.offset == .zero)
    }

    @Test("a waiter wakes when its store is notified, not when another store is")
    func wakesOnItsStore() async throws {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        let seen = notifier.version(of: "a.default")
        let waiter = Waiter { await notifier.wait(for: "a.default", since: seen, timeout: timeout) }
        try await clock.waitForSleepers(1)  // its timeout, armed
        while notifier.waiting == 0 { await Task.yield() }
        notifier.notify("b.default")
        #expect(notifier.waiting == 1, "another store's change leaves the waiter waiting")
        notifier.notify("a.default")
        await waiter.ended()
        #expect(notifier.waiting == 0)
        #expect(clock.now.offset == .zero, "woken by the notification, the clock never moved")
    }

    @Test("notifyAll wakes waiters of every store, even one never notified, and counts for a version read before it")
    func notifyAllWakesEveryone() async {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        let seen = notifier.version(of: "never.notified")
        notifier.notifyAll()
        await notifier.wait(for: "never.notified", since: seen, timeout: timeout)
        #expect(clock.now.offset == .zero)
    }

    @Test("the timeout ends a wait with no change, not before; close() ends every wait, now and later")
    func timeoutAndClose() async throws {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        let quiet = Waiter { await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: .milliseconds(200)) }
        try await clock.waitForSleepers(1)
        while notifier.waiting == 0 { await Task.yield() }
        _ = clock.advance(by: .milliseconds(199))
        #expect(notifier.waiting == 1, "still waiting 1 ms before its timeout")
        _ = clock.advance(by: .milliseconds(1))
        await quiet.ended()
        #expect(notifier.waiting == 0)

        let held = Waiter { await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: timeout) }
        try await clock.waitForSleepers(1)
        while notifier.waiting == 0 { await Task.yield() }
        notifier.close()
        await held.ended()
        await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: timeout)
        #expect(clock.now.offset == .milliseconds(200), "close() ended both waits; the clock stood still")
        #expect(notifier.waiting == 0)
    }

    @Test("a hundred waits share one timer; each ends by its own timeout, within the slack, and not before")
    func waitsShareOneTimer() async throws {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        var waiters: [Waiter] = []
        for n in 0..<100 {
            let store = "s\(n).default"
            waiters.append(Waiter { await notifier.wait(for: store, since: notifier.version(of: store), timeout: .seconds(10) + .milliseconds(n)) })
        }
        while notifier.waiting < 100 { await Task.yield() }
        try await clock.waitForSleepers(1)
        #expect(clock.sleeperCount == 1, "one timer for all the waits, not one each")
        _ = clock.advance(by: .milliseconds(9_999))
        #expect(notifier.waiting == 100, "none ends before its timeout")
        // Each timeout, then the timer's next wake at most the slack later, until all have ended.
        var ended = 0
        while notifier.waiting > 0, ended < 1_000 {
            try await clock.waitForSleepers(1)
            clock.advanceToNextDeadline()
            ended += 1
            for _ in 0..<10 { await Task.yield() }
        }
        for waiter in waiters { await waiter.ended() }
        #expect(clock.now.offset <= .seconds(10) + .milliseconds(99) + ChangeNotifier.slack)
        #expect(ended <= 4, "deadlines within the slack share a wake: \(ended) wakes")
    }

    @Test("waits woken before their deadline do not pile up in the timer: what it keeps stays bounded by the waits")
    func wokenWaitsDoNotPileUp() async throws {
        let clock = ManualClock()
        let notifier = ChangeNotifier(clock: clock)
        for _ in 0..<5_000 {
            let seen = notifier.version(of: "hot.default")
            let waiter = Waiter { await notifier.wait(for: "hot.default", since: seen, timeout: .seconds(10)) }
            while notifier.waiting == 0 { await Task.yield() }
            notifier.notify("hot.default")
            await waiter.ended()
        }
        #expect(notifier.waiting == 0)
        #expect(notifier.keptDeadlines <= 2 * 1 + 1024, "kept \(notifier.keptDeadlines) deadlines of 5,000 woken waits")
    }
}
