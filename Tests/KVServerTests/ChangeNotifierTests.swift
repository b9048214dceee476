import Foundation
import KVServer
import Testing

/// The long polls' wake-ups: a change that lands between a request's look at the storage and
/// its wait must end the wait at once.
///
/// Waits that should end at once get a long timeout (60 s) and must end well before it: other
/// suites running at the same time can hold the shared threads for seconds, so "at once" is
/// told from "at the timeout", not measured.
@Suite("Long-poll wake-ups")
struct ChangeNotifierTests {
    private let long = Duration.seconds(60)
    private let woken = Duration.seconds(30)

    /// Runs `wait`, returning how long it took.
    private func timed(_ wait: () async -> Void) async -> Duration {
        let start = ContinuousClock.now
        await wait()
        return ContinuousClock.now - start
    }

    @Test("a change notified after the version was read ends the wait at once")
    func notifiedBeforeWaiting() async {
        let notifier = ChangeNotifier()
        let seen = notifier.version(of: "a.default")
        notifier.notify("a.default")
        let took = await timed { await notifier.wait(for: "a.default", since: seen, timeout: long) }
        #expect(took < woken)
    }

    @Test("a waiter wakes when its store is notified, not when another store is")
    func wakesOnItsStore() async throws {
        let notifier = ChangeNotifier()
        let seen = notifier.version(of: "a.default")
        let waiter = Task { await timed { await notifier.wait(for: "a.default", since: seen, timeout: long) } }
        while notifier.waiting == 0 { try await Task.sleep(for: .milliseconds(10)) }
        notifier.notify("b.default")
        #expect(notifier.waiting == 1, "another store's change leaves the waiter waiting")
        notifier.notify("a.default")
        let took = await waiter.value
        #expect(took < woken)
        #expect(notifier.waiting == 0)
    }

    @Test("notifyAll wakes waiters of every store, even one never notified, and counts for a version read before it")
    func notifyAllWakesEveryone() async throws {
        let notifier = ChangeNotifier()
        let seen = notifier.version(of: "never.notified")
        notifier.notifyAll()
        let took = await timed { await notifier.wait(for: "never.notified", since: seen, timeout: long) }
        #expect(took < woken)
    }

    @Test("the timeout ends a wait with no change; close() ends every wait, now and later")
    func timeoutAndClose() async throws {
        let notifier = ChangeNotifier()
        let quiet = await timed { await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: .milliseconds(200)) }
        #expect(quiet >= .milliseconds(200) && quiet < woken)
        let waiter = Task { await timed { await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: long) } }
        try await Task.sleep(for: .milliseconds(100))
        notifier.close()
        #expect(await waiter.value < woken)
        let later = await timed { await notifier.wait(for: "a.default", since: notifier.version(of: "a.default"), timeout: long) }
        #expect(later < woken)
    }
}
