import Dispatch
import KVSFS
import Synchronization

/// The requests waiting on the remote (`kvsfs sync`, fsync of the mount's root), bounded in
/// number and in time.
///
/// Invariant: at most `limit` requests wait at once, each at most `timeout`; a caller over the
/// limit is told to retry at once (EAGAIN), and a wait past the timeout ends with EAGAIN too;
/// the round itself goes on in the background either way. No FUSE request thread waits here:
/// fsync of the root is answered later, from the task that ends its wait (`start`); only the
/// control socket's one thread blocks (`run`). The bound is on what waits hold, a task and an
/// unanswered request each, against a caller that keeps asking; it rarely binds, as the kernel
/// sends one fsync of a directory at a time and the control socket answers one request at a time.
final class RemoteWaits: Sendable {
    static let limit = 8
    static let timeout: Duration = .seconds(30)

    private let waiting = Atomic<Int>(0)

    /// Runs `work` and waits for it, or refuses at once when `limit` requests already wait:
    /// `start`, waited for, so that the bounds have one owner.
    func run(_ work: @escaping @Sendable () async throws -> Void) throws {
        let outcome = Mutex<Result<Void, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        start(work) { result in
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        try outcome.withLock { $0 }!.get()
    }

    /// Starts `work` and returns at once; `answer` is called once: with how the work ended, or
    /// with the timeout's failure if that comes first (from the task that ends the wait), or
    /// before `start` returns when `limit` requests already wait.
    func start(_ work: @escaping @Sendable () async throws -> Void, then answer: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        do {
            try admit()
        } catch {
            return answer(.failure(error))
        }
        let pending = Mutex<(@Sendable (Result<Void, any Error>) -> Void)?>({ [self] result in
            waiting.subtract(1, ordering: .acquiringAndReleasing)
            answer(result)
        })
        let end: @Sendable (Result<Void, any Error>) -> Void = { result in pending.withLock { $0.take() }?(result) }
        let timer = Task.detached {
            do { try await Task.sleep(for: Self.timeout) } catch { return }  // cancelled: the work ended first
            end(.failure(Self.timedOut))
        }
        Task.detached {
            let result: Result<Void, any Error>
            do { result = .success(try await work()) } catch { result = .failure(error) }
            timer.cancel()
            end(result)
        }
    }

    private func admit() throws {
        guard waiting.add(1, ordering: .acquiringAndReleasing).newValue <= Self.limit else {
            waiting.subtract(1, ordering: .acquiringAndReleasing)
            throw SyncFailure.busy("\(Self.limit) requests already wait on the remote: retry")
        }
    }

    private static var timedOut: SyncFailure { .busy("the remote did not answer within \(timeout)") }
}
