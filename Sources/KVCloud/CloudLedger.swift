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

/// Changes as a replica takes them in from elsewhere, before any row is read: each one that
/// meets the change rule, in the form the replica keeps (its key in NFC, its value the
/// canonical XML of what was sent), and a refusal with its reason for each one that does not.
package struct Admission: Sendable {
    /// Each change in the order given: admitted, or refused with the reason.
    package var entries: [Result<StampedChange, RefusedChange>] = []

    package struct RefusedChange: Error {
        package var refusal: Refusal
    }

    /// The admitted changes.
    package var changes: [StampedChange] { entries.compactMap { try? $0.get() } }

    /// The refusals, in order.
    package var refused: [Refusal] {
        entries.compactMap { entry in
            guard case .failure(let refused) = entry else { return nil }
            return refused.refusal
        }
    }

    /// The keys whose current rows the decision needs: those of refused changes too, so that
    /// each refusal carries what the remote holds (the pusher rolls back to it).
    package var keys: Set<String> {
        Set(entries.map { entry in
            switch entry {
            case .success(let change): change.key
            case .failure(let refused): KeyName.canonical(refused.refusal.change.key)
            }
        })
    }
}

/// How a replica admits changes: the stamp rule and the clock it measures skew against.
public struct AdmissionPolicy: Sendable {
    public var stamps: StampRule
    /// Milliseconds since 1970.
    public var now: @Sendable () -> Int64

    public init(stamps: StampRule = StampRule(), now: @escaping @Sendable () -> Int64 = AdmissionPolicy.systemTime) {
        self.stamps = stamps
        self.now = now
    }

    public static let standard = AdmissionPolicy()

    /// For changes fetched from a remote, which decided them already: any time in the stamp
    /// rule's range is taken (the local clock never adopts one beyond the skew).
    public static let fetched = AdmissionPolicy(stamps: StampRule(skew: .max))

    public static let systemTime: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

/// The merge rule and the quotas, as the remote applies them: a pure decision over the rows a
/// push touches, so that every storage (SQLite, memory, a network database) reads those rows,
/// decides here, and writes the result in one transaction.
package enum CloudLedger {
    /// The most a value may decode to at any replica, whatever its store's quota: the bound on
    /// what a change from elsewhere can make a replica build.
    package static let largestValue = 64 << 20

    /// Checks `changes` against the change rule (`KeyName`, `StampRule`, the value rule of
    /// `PropertyListCodec`), before any storage reads a row for them.
    package static func admit(_ changes: [StampedChange], policy: AdmissionPolicy) -> Admission {
        var admission = Admission()
        let now = policy.now()
        for change in changes {
            do {
                admission.entries.append(.success(try admit(change, rule: policy.stamps, now: now)))
            } catch {
                admission.entries.append(.failure(.init(refusal: Refusal(change: change, current: nil, reason: String(describing: error)))))
            }
        }
        return admission
    }

    private static func admit(_ change: StampedChange, rule: StampRule, now: Int64) throws(StoreError) -> StampedChange {
        try rule.check(change.stamp, now: now)
        guard !change.key.isEmpty else { throw .emptyKey }
        var admitted = change
        admitted.key = KeyName.canonical(change.key)
        guard let value = change.value else {
            if change.type != nil { throw .invalidPropertyList("a tombstone has no type") }
            return admitted
        }
        guard value.count <= largestValue else { throw .valueTooLarge(size: value.count, limit: largestValue) }
        let decoded = try PropertyListCodec.decode([UInt8](value), limits: PropertyListDecodingLimits(maxBytes: largestValue))
        guard decoded.type == change.type else {
            throw .invalidPropertyList("the value is a \(decoded.type.rawValue), not of type \(change.type?.rawValue ?? "none")")
        }
        let canonical = try PropertyListCodec.encodeXML(decoded)
        if !canonical.elementsEqual(value) { admitted.value = Data(canonical) }
        return admitted
    }

    /// Decides admitted changes in order against `current` (the stored latest change of each
    /// key they name) and the store's totals; the admission's refusals come first in the outcome.
    /// `storesNUL`: whether the storage can hold a key with a NUL character in it (PostgreSQL's
    /// text cannot); when not, such a change is refused, so that it cannot hold up the others.
    package static func decide(_ admission: Admission, current: [String: StampedChange], state: CloudStoreState,
                               storesNUL: Bool = true) -> PushDecision {
        var decision = PushDecision(outcome: PushOutcome(cursorBefore: state.cursor), state: state)
        var latest = current
        let ledger = QuotaLedger(limits: state.limits)
        for entry in admission.entries {
            let change: StampedChange
            switch entry {
            case .success(let admitted):
                change = admitted
            case .failure(var refused):
                refused.refusal.current = latest[KeyName.canonical(refused.refusal.change.key)]
                decision.outcome.refused.append(refused.refusal)
                continue
            }
            let current = latest[change.key]
            if !storesNUL, change.key.utf8.contains(0) {
                decision.outcome.refused.append(Refusal(change: change, current: nil,
                                                        reason: "the key holds a NUL character, which this remote's database cannot store"))
                continue
            }
            if let current, current.stamp == change.stamp, current.value != change.value || current.type != change.type {
                // Stamps name changes: another value under the same stamp is not a repeat.
                decision.outcome.refused.append(Refusal(change: change, current: current,
                                                        reason: "the remote holds another change with the same stamp"))
                continue
            }
            if let current, current.stamp >= change.stamp {
                decision.outcome.accepted.append(change)  // a repeat, or superseded: the client fetches the winner
                continue
            }
            if change.isTombstone, current == nil {
                // Nothing to delete: a row would only grow the table. The pusher forgets it too.
                decision.outcome.accepted.append(change)
                decision.outcome.notStored.append(change)
                continue
            }
            let usage = decision.state.usage
            let wasLive = current.map { !$0.isTombstone } ?? false
            let after = QuotaUsage(
                bytes: usage.bytes + change.size - (current?.size ?? 0),
                keys: usage.keys + (change.isTombstone ? 0 : 1) - (wasLive ? 1 : 0))
            do {
                try ledger.checkKeyName(change.key)
                if !change.isTombstone { try ledger.checkValueSize(change.size) }
                try ledger.checkResult(before: usage, after: after, added: change.size)
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
}

/// Store ids: the local store's rule.
package enum StoreName {
    package static func check(_ name: String) throws(CloudError) {
        guard StoreLocation.isValidStoreID(name) else { throw .invalidStoreName(name) }
    }
}
