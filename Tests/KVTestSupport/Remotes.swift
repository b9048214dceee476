import Foundation
import KVCloud
import KVStore
import KVSync
import Synchronization

/// A remote that can be taken offline, or made to answer "retry later", on demand: the
/// outages sync must live through, around a real change log.
public final class InterruptibleRemote: ChangeLogWrapper {
    public let base: any ChangeLog
    private struct State {
        var online = true
        var busyAnswers: [Duration] = []
        var calls: [(String, ContinuousClock.Instant)] = []
    }
    private let state = Mutex(State())

    public init(_ base: any ChangeLog) {
        self.base = base
    }

    public func setOnline(_ online: Bool) {
        state.withLock { $0.online = online }
    }

    /// The next push answers "retry later" with `after`.
    public func answerBusy(retryAfter after: Duration) {
        state.withLock { $0.busyAnswers.append(after) }
    }

    /// When each push was attempted.
    public var pushAttempts: [ContinuousClock.Instant] {
        state.withLock { $0.calls.filter { $0.0 == "push" }.map(\.1) }
    }

    private func check(_ call: String) throws(CloudError) {
        let busy: Duration? = try state.withLock { (state: inout State) throws(CloudError) -> Duration? in
            state.calls.append((call, .now))
            guard state.online else { throw .unavailable("offline (test)") }
            if call == "push", !state.busyAnswers.isEmpty { return state.busyAnswers.removeFirst() }
            return nil
        }
        if let busy { throw .busy(retryAfter: busy, "busy (test)") }
    }

    public func identity() async throws(CloudError) -> String {
        try check("identity")
        return try await base.identity()
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try check("push")
        return try await base.push(changes, to: store, mark: mark)
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try check("fetch")
        return try await base.changes(in: store, after: cursor, mark: mark, limit: limit)
    }

    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        try check("wait")
        return try await base.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
    }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try check("renew")
        return try await base.renewIdentity(replacing: seen)
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try check("schema")
        return try await base.schema(of: store)
    }

    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try check("set schema")
        return try await base.setSchema(text, of: store, ifVersion: ifVersion)
    }
}

/// A remote over in-memory cloud storage.
public func memoryRemote(_ storage: MemoryCloudStorage) -> EmbeddedChangeLog<ContinuousClock> {
    EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }
}

/// Collects sync events.
public final class EventRecorder: Sendable {
    private let recorded = Mutex<[SyncEvent]>([])
    public init() {}
    public func record(_ event: SyncEvent) { recorded.withLock { $0.append(event) } }
    /// The events of changes, as the tests of changes look at them: without `online` and
    /// `offline`, which tell the remote's standing (those are in `all`).
    public var events: [SyncEvent] { all.filter { $0.reason != .online && $0.reason != .offline } }
    /// Every event, in the order the engine said them.
    public var all: [SyncEvent] { recorded.withLock { $0 } }
}

/// Waits until `condition` holds, for at most `seconds`; returns whether it held. The default
/// is generous: the whole suite shares two cores, and a test that blocks holds a thread of the
/// concurrency pool the others need.
public func eventually(within seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}

/// Waits, without holding a thread, until `condition` holds, for at most `seconds` (as
/// generous as `eventually`).
public func waitUntil(within seconds: Double = 30, _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return try condition()
}

/// Runs `body` on a thread of its own and waits for it without holding one: a test that blocks
/// for many seconds (processes, mounts, a schedule of faults) leaves the concurrency pool, which
/// has as many threads as cores, to the async tests running beside it. Expectations belong
/// after it, on the test's own task: `body` returns what they check.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.stackSize = 8 << 20
        thread.start()
    }
}
