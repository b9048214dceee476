import Synchronization

/// A value that tasks can wait on: each waiter is resumed by the update that makes its
/// condition hold, or by its task's cancellation; nobody polls.
final class Watched<Value: Sendable>: Sendable {
    private struct Waiter {
        let condition: @Sendable (Value) -> Bool
        let continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var value: Value
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state: Mutex<State>

    init(_ value: Value) {
        state = Mutex(State(value: value))
    }

    var value: Value { state.withLock { $0.value } }

    /// Changes the value under the lock, then resumes every waiter whose condition now holds.
    func update(_ body: (inout Value) -> Void) {
        let ready = state.withLock { state in
            body(&state.value)
            let value = state.value
            let ready = state.waiters.filter { $0.value.condition(value) }
            for id in ready.keys { state.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    /// Returns once `condition` holds for the value (at once if it holds now), or once the
    /// task is cancelled.
    func wait(until condition: @escaping @Sendable (Value) -> Bool) async {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Under the lock: an update or a cancellation either came before (and is seen
                // here) or comes after and finds the waiter.
                let now = state.withLock { state in
                    if Task.isCancelled || condition(state.value) { return true }
                    state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }
}
