import Dispatch
import Synchronization

/// Runs async `work` from a synchronous caller (a command, a FUSE request thread) and waits for it.
func waitFor<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) throws -> T {
    try waitFor(work, timeout: nil)!.get()
}

/// Runs async `work` and waits for it at most `timeout` (nil: for ever); nil when the time
/// ran out. The work is not cancelled then: a round of sync goes on in the background.
func waitFor<T: Sendable>(_ work: @escaping @Sendable () async throws -> T, timeout: Duration?) -> Result<T, any Error>? {
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        let outcome: Result<T, any Error>
        do { outcome = .success(try await work()) } catch { outcome = .failure(error) }
        result.withLock { $0 = outcome }
        done.signal()
    }
    if let timeout {
        let (seconds, attoseconds) = timeout.components
        let deadline = DispatchTime.now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
        guard done.wait(timeout: deadline) == .success else { return nil }
    } else {
        done.wait()
    }
    return result.withLock { $0 }
}
