import Foundation
import KVStore
import Synchronization

/// A `ChangeLog` whose data lives in a `CloudStorage` this process opens itself: the embedded
/// file remote (`SQLiteCloudStorage`, shared by every process that opens the same file) or the
/// in-memory one for tests. The storage is opened on first use, again after a failure, so
/// a storage that cannot be opened now is retried rather than fatal, and again when what it
/// opened was replaced (`CloudStorage.replaced`). Its calls block on the
/// disk: they run on `threads` when given (a server's, whose request tasks share as few
/// threads as there are cores), else on the caller's (a mount, whose sync engine is the only
/// user of its cooperative threads, and which would pay a thread hop and the threads' memory
/// for every call).
public final class EmbeddedChangeLog<C: Clock>: ChangeLog where C.Duration == Duration {
    public let description: String
    private let open: @Sendable () throws(CloudError) -> any CloudStorage
    private let storage = Mutex<(any CloudStorage)?>(nil)
    private let clock: C
    private let pollInterval: Duration
    private let watchedFiles: [String]
    private let watchedFallback: Duration
    private let threads: BlockingThreads?

    /// `pollInterval` is how often `waitForChanges` looks at the storage's cursor. With
    /// `watchedFiles` (the files every commit to the storage writes), it looks when one of them
    /// is written instead, and every `watchedFallback` in case a write went unseen.
    public init(description: String, clock: C, pollInterval: Duration = .milliseconds(5),
                watchedFiles: [String] = [], watchedFallback: Duration = .seconds(1), threads: BlockingThreads? = nil,
                open: @escaping @Sendable () throws(CloudError) -> any CloudStorage) {
        self.description = description
        self.threads = threads
        self.open = open
        self.clock = clock
        self.pollInterval = pollInterval
        self.watchedFiles = watchedFiles
        self.watchedFallback = watchedFallback
    }

    public func identity() async throws(CloudError) -> String {
        try await withStorage { storage throws(CloudError) in try storage.identity() }
    }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try await withStorage { storage throws(CloudError) in try storage.renewIdentity(replacing: seen) }
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try await withStorage { storage throws(CloudError) in try storage.push(changes, to: store, mark: mark) }
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try await withStorage { storage throws(CloudError) in try storage.changes(in: store, after: cursor, mark: mark, limit: limit) }
    }

    public func cursor(of store: String) async throws(CloudError) -> Int64 {
        try await withStorage { storage throws(CloudError) in try storage.cursor(of: store) }
    }

    public func history(of key: String, in store: String) async throws(CloudError) -> [KeyVersion] {
        try await withStorage { storage throws(CloudError) in try storage.history(of: key, in: store) }
    }

    public func version(_ version: Int64, of key: String, in store: String) async throws(CloudError) -> KeyVersion? {
        try await withStorage { storage throws(CloudError) in try storage.version(version, of: key, in: store) }
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try await withStorage { storage throws(CloudError) in try storage.schema(of: store) }
    }

    /// A waiter is not woken into a new round by it: waits compare cursors, and a schema moves
    /// none. A mount learns of it from the `schemaVersion` of its next fetch.
    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try await withStorage { storage throws(CloudError) in try storage.setSchema(text, of: store, ifVersion: ifVersion) }
    }

    /// The mark is checked by the fetch that follows a wake-up.
    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        let deadline = clock.now.advanced(by: timeout)
        func changed() async throws(CloudError) -> Bool {
            try await self.cursor(of: store) > cursor
        }
        if try await changed() { return true }
        // Made once the storage is open (its files exist) and before the next look: a commit
        // after that look rings it. One per call, so that callers never share a waiter.
        var bell = makeBell()
        // A commit that wrote the log before the bell was made rang nobody, and may show only
        // once its flush ends, after the first look: look again a few times, as after a ring.
        // (A mount that pushes at once commits just as the other mounts' watchers look again.)
        var settling: [Duration] = bell == nil ? [] : Self.settlingLooks
        while true {
            if Task.isCancelled { return false }
            if try await changed() { return true }
            let now = clock.now
            if now >= deadline { return false }
            if !settling.isEmpty {
                if !(await sleep(for: settling.removeFirst())) { return false }
            } else if let listening = bell, !listening.isBroken {
                // A commit writes the log first and shows in SQLite's shared-memory index just
                // after, which raises no event: when a ring comes before the commit shows (or
                // the committing process is descheduled in between), look again a few times.
                if await listening.wait(upTo: min(watchedFallback, now.duration(to: deadline)), on: clock) {
                    settling = Self.settlingLooks
                }
            } else {
                if bell != nil { bell = makeBell() }  // its file went away: watch what is there now
                if !(await sleep(for: pollInterval)) { return false }
            }
        }
    }

    /// The waits between looks at the cursor while a commit may be written but not yet shown
    /// (its log being flushed to disk at `synchronous = FULL`, which raises no event): every
    /// millisecond for as long as a flush mostly takes, then further apart. A look is one read
    /// of the cursor.
    private static var settlingLooks: [Duration] {
        Array(repeating: .milliseconds(1), count: 24) + [.milliseconds(8), .milliseconds(16), .milliseconds(64), .milliseconds(250)]
    }

    /// False when the sleep was cancelled: the waiter gave up.
    private func sleep(for duration: Duration) async -> Bool {
        do {
            try await clock.sleep(for: duration)
            return true
        } catch {
            return false
        }
    }

    private func makeBell() -> FileChangeBell? {
        watchedFiles.isEmpty ? nil : FileChangeBell(paths: watchedFiles)
    }

    /// Runs `body` on the storage, opening it first if need be; a failure other than a
    /// history mismatch or a refusal of the request closes it, to be opened again next time.
    private func withStorage<T: Sendable>(_ body: @escaping @Sendable (any CloudStorage) throws(CloudError) -> T) async throws(CloudError) -> T {
        let call: @Sendable () throws(CloudError) -> T = { () throws(CloudError) -> T in
            do throws(CloudError) {
                let opened = try self.storage.withLock { (current: inout (any CloudStorage)?) throws(CloudError) -> any CloudStorage in
                    // One stat a call: a file remote replaced is noticed at the next round.
                    if let current, !current.replaced { return current }
                    let made = try self.open()
                    current = made
                    return made
                }
                return try body(opened)
            } catch {
                if case .unavailable = error { self.storage.withLock { $0 = nil } }
                throw error
            }
        }
        guard let threads else { return try call() }
        return try await threads.run(call)
    }
}

extension EmbeddedChangeLog where C == ContinuousClock {
    /// The embedded remote: a shared SQLite database at `path`. `limits`, and the parts of the
    /// history policy `history` names, become `store`'s each time it is opened.
    public static func file(path: String, store: String, limits: QuotaLimits? = nil,
                            history: HistoryPolicyChange = HistoryPolicyChange()) -> EmbeddedChangeLog<ContinuousClock> {
        // Every commit writes the write-ahead log (and a checkpoint, the database).
        EmbeddedChangeLog(description: "file://\(path)", clock: ContinuousClock(), watchedFiles: [path + "-wal", path]) { () throws(CloudError) in
            guard FileManager.default.fileExists(atPath: (path as NSString).deletingLastPathComponent) else {
                throw .unavailable("the directory of \(path) does not exist")
            }
            let storage = try SQLiteCloudStorage(path: path)
            if let limits { try storage.setLimits(limits, of: store) }
            if !history.isEmpty { _ = try storage.changeHistoryPolicy(history, of: store) }
            return storage
        }
    }
}
