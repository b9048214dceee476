import Synchronization

/// A clock whose time moves only when a test advances it: a sleeper wakes when an advance
/// reaches its deadline, never on its own, so that what a timed component does is decided by
/// the test and not by how busy the machine is.
///
/// A test can wait, without wall time, for components to reach their sleeps
/// (`waitForSleepers`) and see when they are due (`deadlines`).
public final class ManualClock: Clock, Sendable {
    /// A point on the clock: the time since it was made.
    public struct Instant: InstantProtocol, CustomStringConvertible {
        public var offset: Duration

        public init(offset: Duration) { self.offset = offset }

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (left: Instant, right: Instant) -> Bool { left.offset < right.offset }
        public var description: String { "t+\(offset)" }
    }

    private struct Sleeper {
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    /// A test waiting for at least `count` sleepers.
    private struct Watcher {
        let count: Int
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [UInt64: Sleeper] = [:]
        var watchers: [UInt64: Watcher] = [:]
        var nextID: UInt64 = 0

        mutating func makeID() -> UInt64 {
            defer { nextID += 1 }
            return nextID
        }

        /// Takes out the watchers whose count of sleepers is reached.
        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, any Error>] {
            let ready = watchers.filter { $0.value.count <= sleepers.count }
            for id in ready.keys { watchers[id] = nil }
            return ready.values.map(\.continuation)
        }
    }

    private let state = Mutex(State())

    public init() {}

    public var now: Instant { state.withLock { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many tasks are asleep on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The deadlines of the tasks asleep on this clock, earliest first.
    public var deadlines: [Instant] { state.withLock { $0.sleepers.values.map(\.deadline).sorted() } }

    /// Returns at once when `deadline` has been reached; else when an advance reaches it.
    /// Throws `CancellationError` once the task is cancelled, as `ContinuousClock` does.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { $0.makeID() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Under the lock: a cancellation either came before (and is seen here) or comes
                // after and finds the sleeper.
                let (outcome, watchers) = state.withLock { state -> (Result<Void, any Error>?, [CheckedContinuation<Void, any Error>]) in
                    if Task.isCancelled { return (.failure(CancellationError()), []) }
                    if deadline <= state.now { return (.success(()), []) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return (nil, state.satisfiedWatchers())
                }
                if let outcome { continuation.resume(with: outcome) }
                for watcher in watchers { watcher.resume() }
            }
        } onCancel: {
            state.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the time on by `duration` and wakes, earliest first, every sleeper whose deadline
    /// it reaches. Returns how many woke. Time jumps: a woken task that sleeps again does so
    /// from the new time.
    @discardableResult
    public func advance(by duration: Duration) -> Int {
        precondition(duration >= .zero, "a clock's time never goes back")
        return advance(to: now.advanced(by: duration))
    }

    /// Moves the time on to `instant` (if it is later than now); see `advance(by:)`.
    @discardableResult
    public func advance(to instant: Instant) -> Int {
        let due = state.withLock { state in
            state.now = max(state.now, instant)
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
            for (id, _) in due { state.sleepers[id] = nil }
            return due.map(\.value.continuation)
        }
        for continuation in due { continuation.resume() }
        return due.count
    }

    /// Moves the time on to the earliest deadline of the tasks asleep, waking them; returns how
    /// many woke (none when nobody sleeps).
    @discardableResult
    public func advanceToNextDeadline() -> Int {
        guard let next = deadlines.first else { return 0 }
        return advance(to: next)
    }

    /// Returns once at least `count` tasks are asleep on this clock: components have reached
    /// the waits a test means to advance past. Throws `CancellationError` once the task is
    /// cancelled (a test's time limit).
    public func waitForSleepers(_ count: Int) async throws {
        let id = state.withLock { $0.makeID() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.sleepers.count >= count { return .success(()) }
                    state.watchers[id] = Watcher(count: count, continuation: continuation)
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            state.withLock { $0.watchers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }
}

/// A remote's wall clock in milliseconds since 1970, moved by the test: what an
/// `AdmissionPolicy` reads as `now`.
public final class RemoteClock: Sendable {
    private let now: Mutex<Int64>

    public init(_ start: Int64) {
        now = Mutex(start)
    }

    public func advance(_ milliseconds: Int64) { now.withLock { $0 += milliseconds } }
    public var reading: Int64 { now.withLock { $0 } }
}
