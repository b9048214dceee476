/// The sync engine's time: every instant it reads and every wait it makes come from the one
/// clock it was given, so that a test's clock decides all of its timing.
///
/// Instants are the time elapsed on that clock since the engine was made: one type whatever
/// the clock's own instants are.
struct SyncClock: Sendable {
    private let elapsedNow: @Sendable () -> Duration
    private let sleepUntil: @Sendable (Duration) async throws -> Void

    init<C: Clock<Duration>>(_ clock: C) {
        let origin = clock.now
        elapsedNow = { origin.duration(to: clock.now) }
        sleepUntil = { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
    }

    /// The time elapsed on the clock since the engine was made.
    var elapsed: Duration { elapsedNow() }

    /// Throws `CancellationError` when the waiting task is cancelled.
    func sleep(for duration: Duration) async throws {
        try await sleepUntil(elapsed + duration)
    }

    /// Waits until `event` returns or `timeout` has passed on the clock, whichever comes first.
    /// `event` must return once its task is cancelled.
    func wait(upTo timeout: Duration, for event: @escaping @Sendable () async -> Void) async {
        let deadline = elapsed + timeout
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await event() }
            group.addTask { [sleepUntil] in try? await sleepUntil(deadline) }  // cancelled: the event came first
            await group.next()
            group.cancelAll()
        }
    }
}
