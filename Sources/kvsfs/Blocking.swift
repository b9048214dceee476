import Dispatch
import Synchronization

/// Runs async `work` from a synchronous caller (a command, a FUSE request thread) and waits for it.
func waitFor(_ work: @escaping @Sendable () async throws -> Void) throws {
    let failure = Mutex<(any Error)?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do { try await work() } catch { failure.withLock { $0 = error } }
        done.signal()
    }
    done.wait()
    if let error = failure.withLock({ $0 }) { throw error }
}
