import Foundation
import Synchronization

/// Wakes the requests waiting for a store's next change (long polls) when a push lands.
///
/// Each store has a version that every notification raises. A waiter reads the version
/// first, then looks at the storage, then waits "since" that version: a change that lands
/// between the look and the wait has raised the version, so the wait ends at once and no
/// notification is missed.
///
/// A wait's timeout costs no timer of its own: one task sleeps until the soonest deadline
/// (`WaitDeadlines`), and after it ends sleeps at least `slack` before the next, so that
/// thousands of event streams with their keep-alive waits wake it a few times a second, not
/// once per wait. A wait ends at most `slack` after its timeout.
public final class ChangeNotifier: Sendable {
    private struct State {
        var versions: [String: UInt64] = [:]
        /// Raised by `notifyAll`: part of every store's version.
        var epoch: UInt64 = 0
        var waiters: [String: [UUID: CheckedContinuation<Void, Never>]] = [:]
        /// How many `waiters` there are, over all stores.
        var waitingCount = 0
        /// One entry per wait, and those of waits already ended until they come up or the
        /// heap is compacted: at most twice the waits, plus `compactionFloor`.
        var deadlines = WaitDeadlines<UUID>()
        /// The task sleeping until `timerTarget`, which ends the waits due by then.
        var timer: Task<Void, Never>?
        var timerTarget: Duration?
        var closed = false
    }

    /// How late past its timeout a wait may end, so that deadlines close together share a wake.
    public static let slack = Duration.milliseconds(50)
    /// Entries of ended waits the heap may keep beyond the live ones before it is compacted.
    static let compactionFloor = 1024

    private let state = Mutex(State())
    /// The time since the notifier was made, on the clock that times the waits.
    private let elapsed: @Sendable () -> Duration
    private let sleep: @Sendable (Duration) async throws -> Void

    public init<C: Clock>(clock: C = ContinuousClock()) where C.Duration == Duration {
        let origin = clock.now
        elapsed = { origin.duration(to: clock.now) }
        sleep = { duration in try await clock.sleep(for: duration) }
    }

    /// Ends every wait now and every later one at once: for a graceful shutdown, which waits
    /// for the requests in progress.
    public func close() {
        let all = state.withLock { state in
            state.closed = true
            state.timer?.cancel()
            state.timer = nil
            state.timerTarget = nil
            state.deadlines.removeAll()
            state.waitingCount = 0
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap(\.values)
        }
        for continuation in all { continuation.resume() }
    }

    public var isClosed: Bool { state.withLock { $0.closed } }

    /// How many requests are waiting, over all stores.
    public var waiting: Int { state.withLock { $0.waitingCount } }

    /// How many deadlines the timer keeps, those of ended waits included.
    public var keptDeadlines: Int { state.withLock { $0.deadlines.count } }

    public func version(of store: String) -> UInt64 {
        state.withLock { $0.versions[store, default: 0] &+ $0.epoch }
    }

    public func notify(_ store: String) {
        let woken = state.withLock { state in
            state.versions[store, default: 0] &+= 1
            let woken = state.waiters.removeValue(forKey: store) ?? [:]
            state.waitingCount -= woken.count
            return woken
        }
        for continuation in woken.values { continuation.resume() }
    }

    /// Wakes every waiter of every store (their changes may have been missed).
    public func notifyAll() {
        let woken = state.withLock { state in
            state.epoch &+= 1
            state.waitingCount = 0
            defer { state.waiters = [:] }
            return state.waiters.values.flatMap(\.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns when `store` is notified after `version` (at once if it was already), after
    /// `timeout` (within `slack`), or when the task is cancelled.
    public func wait(for store: String, since version: UInt64, timeout: Duration) async {
        let id = UUID()
        let deadline = elapsed() + timeout
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = state.withLock { state in
                    guard !state.closed, state.versions[store, default: 0] &+ state.epoch == version else { return false }
                    state.waiters[store, default: [:]][id] = continuation
                    state.waitingCount += 1
                    state.deadlines.insert(.init(deadline: deadline, store: store, id: id))
                    if state.deadlines.count > 2 * state.waitingCount + Self.compactionFloor {
                        let waiters = state.waiters
                        state.deadlines.keep { waiters[$0.store]?[$0.id] != nil }
                    }
                    arm(at: deadline, in: &state)
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
    }

    /// Makes the timer wake by `deadline` (within `slack`): started if none sleeps, started
    /// again earlier if the one sleeping wakes later than that.
    private func arm(at deadline: Duration, in state: inout State) {
        if let target = state.timerTarget, target <= deadline + Self.slack { return }
        state.timer?.cancel()
        state.timerTarget = deadline
        state.timer = Task { [weak self] in await self?.endWaits(dueBy: deadline) }
    }

    /// Sleeps until `target`, then ends every wait due by then and arms the timer for the next,
    /// no sooner than `slack` from now. Does nothing when cancelled: another timer took over.
    private func endWaits(dueBy target: Duration) async {
        let now = elapsed()
        if target > now {
            do {
                try await sleep(target - now)
            } catch {
                return
            }
        }
        let due = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard state.timerTarget == target else { return [] }
            state.timer = nil
            state.timerTarget = nil
            let now = elapsed()
            let due = state.deadlines.popExpired(at: now).compactMap { entry in
                state.waiters[entry.store]?.removeValue(forKey: entry.id)
            }
            state.waitingCount -= due.count
            if let soonest = state.deadlines.soonest { arm(at: max(soonest, now + Self.slack), in: &state) }
            return due
        }
        for continuation in due { continuation.resume() }
    }

    private func resume(_ store: String, _ id: UUID) {
        let continuation = state.withLock { state in
            let continuation = state.waiters[store]?.removeValue(forKey: id)
            if continuation != nil { state.waitingCount -= 1 }
            return continuation
        }
        continuation?.resume()
    }
}
