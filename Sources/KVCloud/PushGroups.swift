import Synchronization

/// Group commit: pushes that arrive while a group is being committed wait together and then
/// commit as the next group, one transaction and one flush to disk for all of them, from any
/// stores. Each push is answered only once its group's transaction has committed, with its own
/// outcome or its own error: the storage's `commit` decides each push on its own (a refused
/// push fails alone) and fails them all only when the transaction itself fails. The one owner
/// of the batching rule for every server storage (SQLite and PostgreSQL).
///
/// Invariants: at most one group is committing at a time (per `PushGroups`); pushes are
/// committed in the order they arrived; a group holds at most `maxChanges` changes (a push
/// larger than that commits alone), which bounds a transaction's work.
package final class PushGroups<Push: Sendable>: Sendable {
    /// A push waiting for its group.
    private struct Waiting: Sendable {
        let push: Push
        let changes: Int
        let answer: CheckedContinuation<Result<PushOutcome, CloudError>, Never>
    }

    package static var maxChanges: Int { 4096 }

    private struct Queue {
        var waiting: [Waiting] = []
        var committing = false
    }

    private let queue = Mutex(Queue())
    /// Groups committed (or failed) and the pushes in them, since the storage opened.
    private let tally = Mutex((groups: 0, pushes: 0))

    package init() {}

    /// How many transactions pushes took, and how many pushes they held: pushes per
    /// transaction is what group commit saves.
    package var committed: (groups: Int, pushes: Int) { tally.withLock { $0 } }

    /// Queues `push` (of `changes` changes) and returns its outcome once its group has
    /// committed. `commit` commits a group and answers each of its pushes, in order.
    package func submit(_ push: Push, changes: Int,
                        commit: @escaping @Sendable ([Push]) async -> [Result<PushOutcome, CloudError>]) async throws(CloudError) -> PushOutcome {
        let result = await withCheckedContinuation { answer in
            let leads = queue.withLock { queue in
                queue.waiting.append(Waiting(push: push, changes: changes, answer: answer))
                if queue.committing { return false }
                queue.committing = true
                return true
            }
            if leads { Task { await self.drain(commit) } }
        }
        return try result.get()
    }

    /// Commits groups until none waits.
    private func drain(_ commit: @Sendable ([Push]) async -> [Result<PushOutcome, CloudError>]) async {
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
            changes += item.changes
            if count > 0, changes > maxChanges { break }
            count += 1
        }
        return Array(waiting.prefix(count))
    }
}
