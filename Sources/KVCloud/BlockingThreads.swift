import Foundation
import Synchronization

/// A few threads of their own for calls that block (SQLite through GRDB's synchronous API),
/// so that a request task waiting for the database suspends instead of holding one of
/// Swift's cooperative threads, of which there are only as many as cores.
///
/// Calls run in the order they come, at most `count` at once; the rest wait in the queue, not
/// on a thread. The threads live as long as the process.
public final class BlockingThreads: Sendable {
    private let jobs = Mutex<[@Sendable () -> Void]>([])
    /// Signalled once per job queued.
    private let queued = DispatchSemaphore(value: 0)

    package init(count: Int, name: String) {
        for index in 0..<count {
            let thread = Thread { [self] in
                while true {
                    queued.wait()
                    jobs.withLock { $0.removeFirst() }()
                }
            }
            thread.name = "\(name)-\(index)"
            thread.start()
        }
    }

    /// Runs `body` on one of the threads and returns what it returns, suspending the caller
    /// meanwhile; its error is thrown as it is.
    package func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            jobs.withLock { $0.append { continuation.resume(returning: Result { () throws(E) in try body() }) } }
            queued.signal()
        }
        return try result.get()
    }

    /// For SQLite storages: as many threads as a server's storage has connections (four
    /// readers and the writer); more would only wait for a connection.
    package static let sqlite = BlockingThreads(count: 5, name: "kvsfs-sqlite")
}
