import Synchronization

/// A lock held across suspension points, granted in arrival order.
final class AsyncLock: Sendable {
    private struct State {
        var held = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if !state.held {
                    state.held = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
        defer {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if state.waiters.isEmpty {
                    state.held = false
                    return nil
                }
                return state.waiters.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}

/// Exponential backoff with full jitter: waits grow from `initial` to at most `maximum`.
struct Backoff {
    let initial: Duration
    let maximum: Duration
    private var failures = 0

    init(initial: Duration = .milliseconds(50), maximum: Duration = .seconds(30)) {
        self.initial = initial
        self.maximum = maximum
    }

    mutating func reset() { failures = 0 }

    /// The wait before the next attempt: random in [ceiling/2, ceiling], the ceiling doubling
    /// with each failure.
    mutating func next<G: RandomNumberGenerator>(using generator: inout G) -> Duration {
        let ceiling = min(maximum, initial * (1 << min(failures, 20)))
        failures += 1
        let fraction = Double.random(in: 0.5...1, using: &generator)
        return ceiling * fraction
    }
}
