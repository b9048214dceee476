import Foundation
import Synchronization

/// Wakes the requests waiting for a store's next change (long polls) when a push lands.
public final class ChangeNotifier: Sendable {
    private let waiters = Mutex<[String: [UUID: CheckedContinuation<Void, Never>]]>([:])
    private let closed = Atomic(false)

    public init() {}

    /// Ends every wait now and every later one at once: for a graceful shutdown, which waits
    /// for the requests in progress.
    public func close() {
        closed.store(true, ordering: .relaxed)
        let all = waiters.withLock { waiters in
            defer { waiters = [:] }
            return waiters.values.flatMap(\.values)
        }
        for continuation in all { continuation.resume() }
    }

    /// How many requests are waiting, over all stores.
    public var waiting: Int { waiters.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    public func notify(_ store: String) {
        let woken = waiters.withLock { $0.removeValue(forKey: store) ?? [:] }
        for continuation in woken.values { continuation.resume() }
    }

    /// Returns when `store` is notified, after `timeout`, or when the task is cancelled.
    /// `ready` is asked once the waiter is registered: when it is already true (a change landed
    /// just before), the wait ends at once, so that no notification is missed.
    public func wait(for store: String, timeout: Duration, ready: @Sendable () -> Bool) async {
        let id = UUID()
        let timer = Task {
            try? await Task.sleep(for: timeout)
            self.resume(store, id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                waiters.withLock { $0[store, default: [:]][id] = continuation }
                if ready() || Task.isCancelled || closed.load(ordering: .relaxed) { resume(store, id) }
            }
        } onCancel: {
            resume(store, id)
        }
        timer.cancel()
    }

    private func resume(_ store: String, _ id: UUID) {
        let continuation = waiters.withLock { $0[store]?.removeValue(forKey: id) }
        continuation?.resume()
    }
}
