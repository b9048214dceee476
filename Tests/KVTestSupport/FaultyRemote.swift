import Foundation
import KVCloud
import KVStore
import KVSync
import Synchronization

/// A remote whose every call meets a fault drawn from a seeded schedule, around a real change log:
/// the request is lost (nothing happens), the answer is lost (the call took effect but the
/// caller hears "unreachable"), a push arrives twice, a fetched batch comes with its changes
/// shuffled and some repeated, an answer given earlier arrives again instead of the one asked
/// for, the call is delayed, or the remote answers 503 with a Retry-After. `partition` cuts it
/// off altogether. The same seed gives the same faults for the same sequence of calls.
public final class FaultyRemote: ChangeLogWrapper {
    /// How many calls met each fault.
    public struct Tally: Sendable, Equatable, CustomStringConvertible {
        public var calls = 0
        public var lostRequests = 0
        public var lostAnswers = 0
        public var duplicatedPushes = 0
        public var shuffledBatches = 0
        public var staleBatches = 0
        public var delays = 0
        public var busy = 0
        public var partitioned = 0

        public init() {}

        public static func + (left: Tally, right: Tally) -> Tally {
            var sum = left
            sum.calls += right.calls
            sum.lostRequests += right.lostRequests
            sum.lostAnswers += right.lostAnswers
            sum.duplicatedPushes += right.duplicatedPushes
            sum.shuffledBatches += right.shuffledBatches
            sum.staleBatches += right.staleBatches
            sum.delays += right.delays
            sum.busy += right.busy
            sum.partitioned += right.partitioned
            return sum
        }

        public var faults: Int {
            lostRequests + lostAnswers + duplicatedPushes + shuffledBatches + staleBatches + delays + busy + partitioned
        }

        public var description: String {
            "\(calls) calls: \(lostRequests) requests lost, \(lostAnswers) answers lost, \(duplicatedPushes) pushes twice, "
                + "\(shuffledBatches) batches shuffled, \(staleBatches) stale batches, \(delays) delays, \(busy) busy, "
                + "\(partitioned) refused by a partition"
        }
    }

    private enum Fault {
        case none, lostRequest, lostAnswer, duplicate, shuffle, stale, delay(Duration), busy(Duration)
    }

    private struct State {
        var generator: SeededGenerator
        var partitioned = false
        var healed = false
        var tally = Tally()
        /// Batches served before, one of which may be served again in place of a fresh one.
        var served: [ChangeBatch] = []
    }

    public let base: any ChangeLog
    private let state: Mutex<State>
    /// The chance, out of 100, that a call meets a fault.
    private let faultPercent: UInt64

    public init(_ base: any ChangeLog, seed: UInt64, faultPercent: Int = 30) {
        self.base = base
        state = Mutex(State(generator: SeededGenerator(seed: seed)))
        self.faultPercent = UInt64(faultPercent)
    }

    public var tally: Tally { state.withLock { $0.tally } }

    /// Cuts the remote off (every call fails as unreachable) or joins it again.
    public func partition(_ cut: Bool) {
        state.withLock { $0.partitioned = cut }
    }

    /// No more faults of any kind, partition included.
    public func heal() {
        state.withLock {
            $0.healed = true
            $0.partitioned = false
        }
    }

    private func draw(for call: String) throws(CloudError) -> Fault {
        try state.withLock { (state: inout State) throws(CloudError) -> Fault in
            state.tally.calls += 1
            if state.partitioned {
                state.tally.partitioned += 1
                throw .unavailable("partitioned (test)")
            }
            guard !state.healed, state.generator.next() % 100 < faultPercent else { return .none }
            let milliseconds = Int(state.generator.next() % 20) + 1
            switch state.generator.next() % 8 {
            case 0:
                state.tally.lostRequests += 1
                return .lostRequest
            case 1:
                state.tally.lostAnswers += 1
                return .lostAnswer
            case 2 where call == "push":
                state.tally.duplicatedPushes += 1
                return .duplicate
            case 3 where call == "fetch":
                state.tally.shuffledBatches += 1
                return .shuffle
            case 4 where call == "fetch" && !state.served.isEmpty:
                state.tally.staleBatches += 1
                return .stale
            case 5, 6:
                state.tally.delays += 1
                return .delay(.milliseconds(milliseconds))
            case 7:
                state.tally.busy += 1
                return .busy(.milliseconds(milliseconds))
            default:
                return .none
            }
        }
    }

    /// Runs `call` under the fault drawn for it.
    private func faulty<T>(_ name: String, _ call: () async throws(CloudError) -> T) async throws(CloudError) -> T {
        switch try draw(for: name) {
        case .lostRequest:
            throw .unavailable("the request was lost (test)")
        case .lostAnswer:
            _ = try await call()
            throw .unavailable("the answer was lost (test)")
        case .delay(let delay):
            await Self.sleep(for: delay)
            return try await call()
        case .busy(let after):
            throw .busy(retryAfter: after, "busy (test)")
        case .duplicate:
            _ = try await call()
            return try await call()
        case .none, .shuffle, .stale:
            return try await call()
        }
    }

    /// A delay, cut short when the task is cancelled: the call goes ahead, as a slow answer would.
    private static func sleep(for delay: Duration) async {
        do { try await Task.sleep(for: delay) } catch {}
    }

    public func identity() async throws(CloudError) -> String {
        try await faulty("identity") { () async throws(CloudError) in try await base.identity() }
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        try await faulty("push") { () async throws(CloudError) in try await base.push(changes, to: store, mark: mark) }
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        let fault = try draw(for: "fetch")
        switch fault {
        case .lostRequest:
            throw .unavailable("the request was lost (test)")
        case .busy(let after):
            throw .busy(retryAfter: after, "busy (test)")
        case .delay(let delay):
            await Self.sleep(for: delay)
        case .stale:
            // An earlier answer, arriving late: a batch from an older cursor.
            if let old = state.withLock({ state in state.served.randomElement(using: &state.generator) }) { return old }
        default:
            break
        }
        var batch = try await base.changes(in: store, after: cursor, mark: mark, limit: limit)
        state.withLock { state in
            state.served.append(batch)
            if state.served.count > 8 { state.served.removeFirst() }
        }
        if case .lostAnswer = fault { throw .unavailable("the answer was lost (test)") }
        if case .shuffle = fault {
            state.withLock { state in
                let repeats = batch.changes.filter { _ in state.generator.next() % 3 == 0 }
                batch.changes += repeats
                batch.changes.shuffle(using: &state.generator)
            }
        }
        return batch
    }

    public func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?,
                               timeout: Duration) async throws(CloudError) -> Bool {
        try await faulty("wait") { () async throws(CloudError) in
            try await base.waitForChanges(in: store, after: cursor, mark: mark, timeout: timeout)
        }
    }

    public func renewIdentity(replacing seen: String) async throws(CloudError) -> Bool {
        try await faulty("renew") { () async throws(CloudError) in try await base.renewIdentity(replacing: seen) }
    }

    public func schema(of store: String) async throws(CloudError) -> RemoteSchema {
        try await faulty("schema") { () async throws(CloudError) in try await base.schema(of: store) }
    }

    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) async throws(CloudError) -> RemoteSchema {
        try await faulty("set schema") { () async throws(CloudError) in try await base.setSchema(text, of: store, ifVersion: ifVersion) }
    }
}
