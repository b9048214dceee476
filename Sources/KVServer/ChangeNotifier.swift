import Foundation
import Synchronization

/// Wakes the requests waiting for a store's next change (long polls) when a push lands.
///
/// Each store has a version that every notification raises. A waiter reads the version
/// first, then looks at the storage, then waits "since" that version: a change that lands
/// between the look and the wait has raised the version, so the wait ends at once and no
/// notification is missed.
public final class ChangeNotifier: Sendable {
    private struct State {
        var versions: [String: UInt64] = [:]
        /// Raised by `notifyAll`: part of every store's version.
        var epoch: UInt64 = 0
        var waiters: [String: [UUID: CheckedContinuation<Void, Never>]] = [:]
        var closed = false
    }

    private let state = Mutex(State())
    /// Times the waits' timeouts.
    private let clock: any Clock<Duration>

    public init(clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
    }

    /// Ends every wait now and every later one at once: for a graceful shutdown, which waits
    /// for the requests in progress.
    public func close() {
        let all = state.withLock { state in
            state.closed = true
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap(\.values)
        }
        for continuation in all { continuation.resume() }
    }

    public var isClosed: Bool { state.withLock { $0.closed } }

    /// How many requests are waiting, over all stores.
    public var waiting: Int { state.withLock { $0.waiters.values.reduce(0) { $0 + $1.count } } }

    public func version(of store: String) -> UInt64 {
        state.withLock { $0.versions[store, default: 0] &+ $0.epoch }
    }

    public func notify(_ store: String) {
        let woken = state.withLock { state in
            state.versions[store, default: 0] &+= 1
            return state.waiters.removeValue(forKey: store) ?? [:]
        }
        for continuation in woken.values { continuation.resume() }
    }

    /// Wakes every waiter of every store (their changes may have been missed).
    public func notifyAll() {
        let woken = state.withLock { state in
            state.epoch &+= 1
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap(\.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns when `store` is notified after `version` (at once if it was already), after
    /// `timeout`, or when the task is cancelled.
    public func wait(for store: String, since version: UInt64, timeout: Duration) async {
        let id = UUID()
        let timer = Task { [clock] in
            // Cancelled when the wait ends first; the timeout ends it otherwise.
            try? await clock.sleep(for: timeout)
            self.resume(store, id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = state.withLock { state in
                    guard !state.closed, state.versions[store, default: 0] &+ state.epoch == version else { return false }
                    state.waiters[store, default: [:]][id] = continuation
                    return true
                }
                if !waits {
                    continuation.resume()
                } else if Task.isCancelled {
                    resume(store, id)
                }
            }
        } onCancel: {
            resume(store, id)
        }
        timer.cancel()
    }

    private func resume(_ store: String, _ id: UUID) {
        let continuation = state.withLock { $0.waiters[store]?.removeValue(forKey: id) }
        continuation?.resume()
    }
}
