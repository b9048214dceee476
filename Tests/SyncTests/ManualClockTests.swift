import KVTestSupport
import Testing

/// The manual clock's sleepers, woken by its advances alone.
@Suite("The manual clock", .hangGuard)
struct ManualClockTests {
    @Test("a sleeper wakes when an advance reaches its deadline, and not before")
    func wakesAtDeadline() async throws {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(5)) }
        try await clock.waitForSleepers(1)
        #expect(clock.advance(by: .seconds(5) - .nanoseconds(1)) == 0)
        #expect(clock.sleeperCount == 1)
        #expect(clock.advance(by: .nanoseconds(1)) == 1)
        try await sleeper.value
        #expect(clock.sleeperCount == 0)
        #expect(clock.now == ManualClock.Instant(offset: .seconds(5)))
    }

    @Test("an advance wakes every sleeper it passes and leaves the later ones asleep")
    func wakesOnlyThosePassed() async throws {
        let clock = ManualClock()
        let sleepers = [3, 1, 2].map { seconds in Task { try await clock.sleep(for: .seconds(seconds)) } }
        try await clock.waitForSleepers(3)
        #expect(clock.deadlines.map(\.offset) == [.seconds(1), .seconds(2), .seconds(3)])
        #expect(clock.advance(by: .milliseconds(2500)) == 2)
        try await sleepers[1].value
        try await sleepers[2].value
        #expect(clock.deadlines.map(\.offset) == [.seconds(3)])
        #expect(clock.advanceToNextDeadline() == 1)
        try await sleepers[0].value
        #expect(clock.now.offset == .seconds(3))
        #expect(clock.advanceToNextDeadline() == 0, "nobody sleeps: the time stays")
        #expect(clock.now.offset == .seconds(3))
    }

    @Test("a sleep until a deadline already reached returns at once")
    func pastDeadline() async throws {
        let clock = ManualClock()
        clock.advance(by: .seconds(10))
        try await clock.sleep(until: ManualClock.Instant(offset: .seconds(4)))
        try await clock.sleep(for: .zero)
        #expect(clock.sleeperCount == 0)
    }

    @Test("a sleeping task that is cancelled throws CancellationError and no longer counts as a sleeper")
    func cancellation() async throws {
        let clock = ManualClock()
        let sleeper = Task { try await clock.sleep(for: .seconds(1)) }
        try await clock.waitForSleepers(1)
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(clock.sleeperCount == 0)
        #expect(clock.advance(by: .seconds(2)) == 0)

        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await clock.sleep(for: .seconds(1))
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(clock.sleeperCount == 0)
    }

    @Test("a wait for sleepers returns only once that many tasks sleep")
    func waitForSleepers() async throws {
        let clock = ManualClock()
        let first = Task { try await clock.sleep(for: .seconds(1)) }
        try await clock.waitForSleepers(1)
        let waiter = Task { try await clock.waitForSleepers(2) }
        let second = Task { try await clock.sleep(for: .seconds(1)) }
        try await waiter.value
        #expect(clock.sleeperCount == 2)
        #expect(clock.advance(by: .seconds(1)) == 2)
        try await first.value
        try await second.value
    }
}
