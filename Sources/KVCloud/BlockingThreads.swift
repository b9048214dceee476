import Foundation
import Synchronization

/// A few threads of their own for calls that block (SQLite through GRDB's synchronous API),
/// so that a request task waiting for the database suspends instead of holding one of
/// Swift's cooperative threads, of which there are only as many as cores.
///
/// Calls run in the order they come, at most `count` at once; the rest wait in the queue, not
/// on a thread. The threads live as long as the process.
public final class BlockingThreads: Sendable {
    private let jobs = Mutex(JobQueue())
    /// Signalled once per job queued.
    private let queued = DispatchSemaphore(value: 0)

    package init(count: Int, name: String) {
        for index in 0..<count {
            let thread = Thread { [self] in
                while true {
                    queued.wait()
                    jobs.withLock { $0.next() }()
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

    /// For a server's accounts and tokens, apart from its stores: every request looks its
    /// token up first, and must not wait behind the stores' reads.
    package static let sqliteAccounts = BlockingThreads(count: 2, name: "kvsfs-sqlite-accounts")
}

/// Jobs in the order they came, each taken in constant time however many wait (thousands do,
/// under load).
private struct JobQueue {
    private var incoming: [@Sendable () -> Void] = []
    /// Taken from the end: the oldest is last.
    private var outgoing: [@Sendable () -> Void] = []

    mutating func append(_ job: @escaping @Sendable () -> Void) {
        incoming.append(job)
    }

    /// The oldest job; one must be queued (each is signalled once).
    mutating func next() -> @Sendable () -> Void {
        if outgoing.isEmpty {
            outgoing = incoming.reversed()
            incoming.removeAll(keepingCapacity: true)
        }
        return outgoing.removeLast()
    }
}
