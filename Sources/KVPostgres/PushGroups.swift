import KVCloud
import Synchronization

/// Group commit: pushes that arrive while a group is being committed wait together and then
/// commit as the next group, one transaction and one WAL flush for all of them, from any
/// stores. Each push is answered only once its group's transaction has committed (or with the
/// group's error when it did not).
///
/// Invariants: at most one group is committing at a time (in this instance); pushes are
/// committed in the order they arrived; a group holds at most `maxChanges` changes (a push
/// larger than that commits alone), which bounds a transaction's work, not its statements
/// (they send arrays, whatever their length).
final class PushGroups: Sendable {
    /// A push waiting for its group.
    struct Waiting: Sendable {
        let push: GroupedPush
        let answer: CheckedContinuation<Result<PushOutcome, CloudError>, Never>
    }

    static let maxChanges = 4096

    private struct Queue {
        var waiting: [Waiting] = []
        var committing = false
    }

    private let queue = Mutex(Queue())
    /// Groups committed (or failed) and the pushes in them, since the storage opened.
    private let tally = Mutex((groups: 0, pushes: 0))

    var committed: (groups: Int, pushes: Int) { tally.withLock { $0 } }

    /// Queues `push` and returns its outcome once its group has committed. `commit` commits a
    /// group and answers each of its pushes, in order.
    func submit(_ push: GroupedPush,
                commit: @escaping @Sendable ([GroupedPush]) async -> [Result<PushOutcome, CloudError>]) async throws(CloudError) -> PushOutcome {
        let result = await withCheckedContinuation { answer in
            let leads = queue.withLock { queue in
                queue.waiting.append(Waiting(push: push, answer: answer))
                if queue.committing { return false }
                queue.committing = true
                return true
            }
            if leads { Task { await self.drain(commit) } }
        }
        return try result.get()
    }

    /// Commits groups until none waits.
    private func drain(_ commit: @Sendable ([GroupedPush]) async -> [Result<PushOutcome, CloudError>]) async {
        while true {
            let group = queue.withLock { queue in
                let group = Self.nextGroup(of: queue.waiting)
                queue.waiting.removeFirst(group.count)
                if group.isEmpty { queue.committing = false }
                return group
            }
            guard !group.isEmpty else { return }
            let results = await commit(group.map(\.push))
            tally.withLock { $0.groups += 1; $0.pushes += group.count }
            for (index, waiting) in group.enumerated() {
                waiting.answer.resume(returning: index < results.count ? results[index] : .failure(.unavailable("the push's group ended early")))
            }
        }
    }

    /// The longest prefix of `waiting` within `maxChanges` changes, and at least one push.
    private static func nextGroup(of waiting: [Waiting]) -> [Waiting] {
        var changes = 0
        var count = 0
        for item in waiting {
            changes += item.push.admitted.entries.count
            if count > 0, changes > maxChanges { break }
            count += 1
        }
        return Array(waiting.prefix(count))
    }
}

/// One push as its group commits it: the admitted changes, and the keys whose rows decide it.
struct GroupedPush: Sendable {
    let store: String
    let admitted: Admission
    /// The keys the push writes.
    let pushedKeys: Set<String>
    /// The rows to read under the lock: the pushed keys and the mark's (none holding NUL,
    /// which PostgreSQL's text cannot hold).
    let keys: [String]
    let mark: HistoryMark?
}
