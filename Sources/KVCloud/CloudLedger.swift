import Foundation
import KVStore

/// A store's totals as a push finds them (and leaves them).
package struct CloudStoreState: Sendable {
    package var limits: QuotaLimits
    package var usage: QuotaUsage
    /// The cursor of the store's newest accepted change.
    package var cursor: Int64

    package init(limits: QuotaLimits, usage: QuotaUsage, cursor: Int64) {
        self.limits = limits
        self.usage = usage
        self.cursor = cursor
    }
}

/// What a push does: the answer, the rows to write (each change with the cursor it is
/// accepted at) and the store's totals afterwards.
package struct PushDecision: Sendable {
    package var outcome: PushOutcome
    package var writes: [(change: StampedChange, cursor: Int64)] = []
    package var state: CloudStoreState
}

/// The merge rule and the quotas, as the remote applies them: a pure decision over the rows a
/// push touches, so that every storage (SQLite, memory, a network database) reads those rows,
/// decides here, and writes the result in one transaction.
package enum CloudLedger {
    /// Decides `changes` in order against `current` (the stored latest change of each key they
    /// name) and the store's totals.
    /// `storesNUL`: whether the storage can hold a key with a NUL character in it (PostgreSQL's
    /// text cannot); when not, such a change is refused, so that it cannot hold up the others.
    package static func decide(_ changes: [StampedChange], current: [String: StampedChange], state: CloudStoreState,
                               storesNUL: Bool = true) -> PushDecision {
        var decision = PushDecision(outcome: PushOutcome(cursorBefore: state.cursor), state: state)
        var latest = current
        let ledger = QuotaLedger(limits: state.limits)
        for change in changes {
            let current = latest[change.key]
            if !storesNUL, change.key.utf8.contains(0) {
                decision.outcome.refused.append(Refusal(change: change, current: nil,
                                                        reason: "the key holds a NUL character, which this remote's database cannot store"))
                continue
            }
            if let current, current.stamp >= change.stamp {
                decision.outcome.accepted.append(change)  // a repeat, or superseded: the client fetches the winner
                continue
            }
            let usage = decision.state.usage
            let wasLive = current.map { !$0.isTombstone } ?? false
            let after = QuotaUsage(
                bytes: usage.bytes + change.size - (current?.size ?? 0),
                keys: usage.keys + (change.isTombstone ? 0 : 1) - (wasLive ? 1 : 0))
            do {
                try check(change, ledger: ledger, before: usage, after: after)
            } catch {
                decision.outcome.refused.append(Refusal(change: change, current: current, reason: String(describing: error)))
                continue
            }
            decision.state.cursor += 1
            decision.state.usage = after
            decision.writes.append((change, decision.state.cursor))
            latest[change.key] = change
            decision.outcome.accepted.append(change)
        }
        decision.outcome.cursorAfter = decision.state.cursor
        return decision
    }

    /// What the remote checks itself, trusting nothing the client measured: the name, the
    /// value's size as it arrives, that it is a property list, and the store's totals.
    private static func check(_ change: StampedChange, ledger: QuotaLedger, before: QuotaUsage, after: QuotaUsage) throws(StoreError) {
        try ledger.checkKeyName(change.key)
        guard let value = change.value else { return }
        try ledger.checkValueSize(value.count)
        let decoded = try PropertyListCodec.decode([UInt8](value))
        guard decoded.type == change.type else { throw .invalidPropertyList("the value is not of type \(change.type?.rawValue ?? "none")") }
        try ledger.checkResult(before: before, after: after, added: value.count)
    }
}

/// Store ids: the local store's rule.
package enum StoreName {
    package static func check(_ name: String) throws(CloudError) {
        guard StoreLocation.isValidStoreID(name) else { throw .invalidStoreName(name) }
    }
}
