import Foundation
import KVStore

/// Changes as a replica takes them in from elsewhere, before any row is read: each one that
/// meets the change rule, in the form the replica keeps (its key in NFC, its value the
/// canonical XML of what was sent), and a refusal with its reason for each one that does not.
/// The stamp's skew, which depends on the key's current stamp, is checked by the decision.
package struct Admission: Sendable {
    /// Each change in the order given: admitted, or refused with the reason.
    package var entries: [Result<StampedChange, RefusedChange>] = []
    /// The value of each entry as decoded when it was admitted, at the entry's index (as many
    /// as `entries`): nil for a deletion or a refused change. What the store's schema is
    /// checked against, without decoding the value again.
    package var values: [PropertyListValue?] = []
    /// Why a change's `lost` was left out (it broke the change rule): the change itself is
    /// admitted without it, so that a broken conflict never holds its winner back.
    package var droppedConflicts: [String] = []
    /// The stamp rule and the clock reading the skew is measured against.
    package var stamps: StampRule
    package var now: Int64

    package struct RefusedChange: Error {
        package var refusal: Refusal
    }

    /// The admitted changes.
    package var changes: [StampedChange] {
        entries.compactMap { entry in
            guard case .success(let change) = entry else { return nil }
            return change
        }
    }

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

/// The change rule at a replica's door: `KeyName`, the fields of `StampRule`, `DeviceName`, and
/// the value rule of `PropertyListCodec`.
package enum ChangeAdmission {
    /// The most one value may decode to at any replica, whatever its store's quota.
    package static let largestValue = 64 << 20
    /// What a whole batch may decode to beyond twice the bytes it carries: shared references
    /// cannot make a push of a few megabytes cost the replica more than this.
    package static let batchAllowance = 8 << 20

    /// Checks `changes` against the change rule, before any storage reads a row for them.
    package static func admit(_ changes: [StampedChange], policy: AdmissionPolicy) -> Admission {
        let now = policy.now()
        var admission = Admission(stamps: policy.stamps, now: now)
        let carried = changes.reduce(0) { total, change in
            change.lost.reduce(total &+ change.size) { $0 &+ $1.size }
        }
        var budget = batchAllowance &+ min(carried, Int.max / 4) &* 2
        for change in changes {
            do {
                var decoded: PropertyListValue?
                var admitted = try admit(change, rule: policy.stamps, budget: &budget, decoded: &decoded)
                admitted.lost = []
                if change.lost.count > KeptChangeList.maximumCount {
                    admission.droppedConflicts.append("\(change.key.debugDescription): \(change.lost.count) changes are kept as its "
                        + "conflict, over the limit of \(KeptChangeList.maximumCount): the oldest are left out")
                }
                for lost in change.lost.prefix(KeptChangeList.maximumCount) {
                    do {
                        try policy.stamps.checkFields(lost.stamp)
                        if let newer = admitted.lost.last, !(lost.stamp < newer.stamp) {
                            throw StoreError.invalidStamp("the changes that lost are not newest first")
                        }
                        var kept = lost
                        var ignored: PropertyListValue?
                        kept.value = try admit(lost.value, of: lost.type, budget: &budget, decoded: &ignored)
                        admitted.lost.append(kept)
                    } catch {
                        admission.droppedConflicts.append("\(change.key.debugDescription): a change kept as its conflict breaks the rule: \(error)")
                    }
                }
                admission.values.append(decoded)
                admission.entries.append(.success(admitted))
            } catch {
                admission.values.append(nil)
                admission.entries.append(.failure(.init(refusal: Refusal(change: change, current: nil, reason: String(describing: error)))))
            }
        }
        return admission
    }

    /// The change and what it replaced, by the same rule (what lost to it is the caller's);
    /// `decoded`: its value as decoded.
    private static func admit(_ change: StampedChange, rule: StampRule, budget: inout Int,
                              decoded: inout PropertyListValue?) throws(StoreError) -> StampedChange {
        try rule.checkFields(change.stamp)
        guard !change.key.isEmpty else { throw .emptyKey }
        if case .change(let replaced) = change.replaces { try rule.checkFields(replaced) }
        if let name = change.deviceName { try DeviceName.check(name) }
        for settled in change.settles { try rule.checkFields(settled) }
        try change.condition?.check()
        var admitted = change
        admitted.key = KeyName.canonical(change.key)
        admitted.value = try admit(change.value, of: change.type, budget: &budget, decoded: &decoded)
        return admitted
    }

    /// A value (nil for a removal) as the replica keeps it, the canonical XML of what was sent;
    /// `decoded`: the value read.
    private static func admit(_ value: Data?, of type: ValueType?, budget: inout Int,
                              decoded read: inout PropertyListValue?) throws(StoreError) -> Data? {
        guard let value else {
            if type != nil { throw .invalidPropertyList("a tombstone has no type") }
            return nil
        }
        guard value.count <= largestValue else { throw .valueTooLarge(size: value.count, limit: largestValue) }
        let limit = min(largestValue, budget)
        let decoded: PropertyListValue
        do {
            decoded = try PropertyListCodec.decode([UInt8](value), limits: PropertyListDecodingLimits(maxBytes: limit))
        } catch {
            // A refused value spends the allowance too, so that many of them cost no more.
            guard case .valueTooLarge(let size, _) = error else {
                budget -= value.count
                throw error
            }
            budget -= size
            if limit < largestValue {
                throw .invalidPropertyList("the values of this batch decode to more than their allowance (\(size) bytes here)")
            }
            throw error
        }
        guard decoded.type == type else {
            throw .invalidPropertyList("the value is a \(decoded.type.rawValue), not of type \(type?.rawValue ?? "none")")
        }
        let canonical = Data(try PropertyListCodec.encodeXML(decoded))
        budget -= canonical.count
        read = decoded
        return canonical == value ? value : canonical  // Data's == compares memory at once
    }
}
