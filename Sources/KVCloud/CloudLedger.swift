import Foundation
import KVStore

/// A store's totals as a push finds them (and leaves them).
package struct CloudStoreState: Sendable {
    package var limits: QuotaLimits
    package var usage: QuotaUsage
    /// The cursor of the store's newest accepted change.
    package var cursor: Int64
    /// The bytes the store keeps for its keys' open conflicts, as stored (`KeptLayout.bytes`,
    /// counted by the storage's triggers): at most
    /// `limits.totalBytes` (`CloudLedger.checkKeptBytes`).
    package var keptBytes: Int
    /// The store's schema, read in the push's transaction (`RemoteSchema`, decoded once per
    /// version by `DecodedSchemas`): what each pushed value must meet. Nil when it has none.
    package var schema: KeySchema?

    package init(limits: QuotaLimits, usage: QuotaUsage, cursor: Int64, keptBytes: Int, schema: KeySchema? = nil) {
        self.limits = limits
        self.usage = usage
        self.cursor = cursor
        self.keptBytes = keptBytes
        self.schema = schema
    }
}

/// What a push does: the answer, the rows to write (each change with the cursor it is
/// accepted at) and the store's totals afterwards.
package struct PushDecision: Sendable {
    package var outcome: PushOutcome
    package var writes: [Write] = []
    package var state: CloudStoreState

    /// A key's row as the push leaves it, at a new cursor.
    package struct Write: Sendable {
        /// The key's change, with its open conflict (`lost`).
        package var change: StampedChange
        package var cursor: Int64
        /// Whether the change is a new version of the key; false when the row is the key's
        /// change given again with the conflict a change that lost to it opened.
        package var isVersion: Bool
    }
}

/// The merge rule, the conflict rule and the quotas, as the remote applies them: a pure decision over the rows a
/// push touches, so that every storage (SQLite, memory, a network database) reads those rows,
/// decides here, and writes the result in one transaction.
package enum CloudLedger {
    /// Decides admitted changes in order against `current` (the stored latest change of each
    /// key they name) and the store's totals; the admission's refusals come first in the outcome.
    /// `storesNUL`: whether the storage can hold a key with a NUL character in it (PostgreSQL's
    /// text cannot); when not, such a change is refused, so that it cannot hold up the others.
    /// `unreadable`: keys whose stored row cannot be read (a row another program wrote), with
    /// why; their changes are refused (`Refusal.rowUnreadable`), so that the others go through.
    /// `kept`: how the storage keeps the changes that lost, which says what they count against
    /// the store's allowance for them (`CloudStoreState.keptBytes`, which its triggers keep).
    /// A value that breaks the store's schema (`CloudStoreState.schema`) is refused with the
    /// schema's words (the key, the value's type and the rule); a deletion never is, nor a
    /// change the store holds already (pushed again), so that values stored before the schema
    /// stay as they are. A superseded change is judged too: it may be kept as a conflict.
    ///
    /// A conditional change (`StampedChange.condition`) is judged against `versions`: the
    /// version (`KeyVersion.version`, the cursor of the key's newest accepted change, which a
    /// change given again with a conflict does not move) of each current row it names. It is
    /// stored, as a new version and never as a conflict, exactly when its condition holds, and
    /// refused with words saying where the key stands otherwise; the conditional changes of one
    /// push are stored together or not at all, whatever refused one of them.
    package static func decide(_ admission: Admission, current: [String: StampedChange], versions: [String: Int64] = [:],
                               state: CloudStoreState, storesNUL: Bool = true, unreadable: [String: String] = [:],
                               kept layout: KeptLayout = .list) -> PushDecision {
        let decision = decideEach(admission, current: current, versions: versions, state: state, storesNUL: storesNUL,
                                  unreadable: unreadable, kept: layout)
        guard let first = decision.outcome.refused.first(where: { $0.change.condition != nil }),
              decision.writes.contains(where: { written in
                  admission.changes.contains { $0.condition != nil && $0.key == written.change.key && $0.stamp == written.change.stamp }
              }) else { return decision }
        // One was refused and others would be stored: decided again with every conditional
        // change refused, so that the rows and totals are those of the others alone.
        var held = admission
        for (index, entry) in held.entries.enumerated() {
            guard case .success(let change) = entry, change.condition != nil else { continue }
            let own = decision.outcome.refused.first { $0.change.key == change.key && $0.change.stamp == change.stamp }
            held.entries[index] = .failure(.init(refusal: own ?? Refusal(change: change, current: nil, reason:
                "not stored: it was pushed together with a change of \(first.change.key.debugDescription), which was refused: \(first.reason)")))
        }
        return decideEach(held, current: current, versions: versions, state: state, storesNUL: storesNUL, unreadable: unreadable, kept: layout)
    }

    /// `decide`, each change on its own.
    private static func decideEach(_ admission: Admission, current: [String: StampedChange], versions: [String: Int64],
                                   state: CloudStoreState, storesNUL: Bool, unreadable: [String: String],
                                   kept layout: KeptLayout) -> PushDecision {
        var decision = PushDecision(outcome: PushOutcome(cursorBefore: state.cursor), state: state)
        var latest = current
        var versions = versions
        // Whether a row this push writes is not a change as the pusher sent it.
        var notAsPushed = false
        let ledger = QuotaLedger(limits: state.limits)
        for (index, entry) in admission.entries.enumerated() {
            let change: StampedChange
            switch entry {
            case .success(let admitted):
                change = admitted
            case .failure(var refused):
                let key = KeyName.canonical(refused.refusal.change.key)
                refused.refusal.current = latest[key]
                // Whatever rule it broke, nothing here says what the key holds.
                refused.refusal.rowUnreadable = unreadable[key] != nil
                decision.outcome.refused.append(refused.refusal)
                continue
            }
            let current = latest[change.key]
            if let reason = unreadable[change.key] {
                decision.outcome.refused.append(Refusal(change: change, current: nil, reason: "the remote's row for this key cannot be read: \(reason)",
                                                        rowUnreadable: true))
                continue
            }
            do {
                try admission.stamps.checkSkew(change.stamp, now: admission.now, current: current?.stamp)
            } catch {
                decision.outcome.refused.append(Refusal(change: change, current: current, reason: String(describing: error)))
                continue
            }
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
            if let schema = state.schema, current?.stamp != change.stamp, let xml = change.value {
                // The value as admission decoded it; decoded here should the two lists ever
                // disagree, so that no value passes unjudged.
                let value: PropertyListValue
                if index < admission.values.count, let decoded = admission.values[index] {
                    value = decoded
                } else {
                    do {
                        value = try PropertyListCodec.decode(xml)
                    } catch {
                        decision.outcome.refused.append(Refusal(change: change, current: current, reason: "the value cannot be judged against the store's schema: \(error)"))
                        continue
                    }
                }
                if let violation = schema.violation(key: change.key, value: value) {
                    decision.outcome.refused.append(Refusal(change: change, current: current, reason: violation.description))
                    continue
                }
            }
            if let condition = change.condition {
                if let current, current.stamp == change.stamp {
                    // Stored already (pushed again after its answer was lost): as it was.
                    decision.outcome.accepted.append(change)
                    continue
                }
                if let violation = condition.violation(current: current, version: current == nil ? nil : versions[change.key]) {
                    decision.outcome.refused.append(Refusal(change: change, current: current, reason: violation))
                    continue
                }
                if let current, current.stamp > change.stamp {
                    // Stored, it would be passed over by every replica that holds the newer.
                    decision.outcome.refused.append(Refusal(change: change, current: current, reason:
                        "the key's latest change on the remote is stamped later than this one (its device's clock is ahead): nothing was stored; sync, then try again"))
                    continue
                }
            }
            if let current, current.stamp >= change.stamp {
                // A repeat, or superseded: the client fetches the winner. One that conflicts
                // with it is kept with the key's conflict, and the winner given again with it,
                // at a new cursor and as no new version, for every mount to see.
                if current.stamp > change.stamp, ConflictRule.conflict(change, with: current) {
                    let lost = ConflictRule.losers(current.lost + [change.kept], winner: current, pushed: change)
                    if lost != current.lost {
                        // Kept outside the values' quotas: at most one value per device, and
                        // all the store keeps so at most its total quota.
                        let grown = layout.bytes(lost) - layout.bytes(current.lost)
                        do {
                            if !change.isTombstone { try ledger.checkValueSize(change.size) }
                            try Self.checkKept(lost)
                            try Self.checkKeptBytes(decision.state, growing: grown)
                        } catch {
                            decision.outcome.refused.append(Refusal(change: change, current: current, reason: String(describing: error)))
                            continue
                        }
                        var given = current
                        given.lost = lost
                        decision.state.keptBytes += grown
                        decision.state.cursor += 1
                        decision.writes.append(.init(change: given, cursor: decision.state.cursor, isVersion: false))
                        latest[change.key] = given
                        notAsPushed = true
                    }
                }
                decision.outcome.accepted.append(change)
                continue
            }
            // A deletion of a key the store does not hold is stored too: the store may have
            // lost the key (restored from a backup) while a mount that still holds its value
            // will push it back; the deletion, newer, must pass it over. What lost to it
            // concurrently is the rule's, not the pusher's, and is kept outside the quotas;
            // what lost to the key's change goes on with it, but for what its writer held.
            var lost: [KeptChange] = []
            if let current {
                // A conditional change replaced exactly what it names: never a conflict.
                let concurrent = change.condition == nil && ConflictRule.isConcurrent(change, with: current)
                lost = ConflictRule.losers(current.lost + (concurrent ? [current.kept] : []), winner: change, pushed: change)
            }
            let usage = decision.state.usage
            let grown = layout.bytes(lost) - layout.bytes(current?.lost ?? [])
            let after: QuotaUsage
            do {
                try ledger.checkKeyName(change.key)
                after = try ledger.checkReplacing(bytes: current?.counted, with: change.counted, usage: usage)
                try Self.checkKept(lost)
                try Self.checkKeptBytes(decision.state, growing: grown)
            } catch {
                decision.outcome.refused.append(Refusal(change: change, current: current, reason: String(describing: error)))
                continue
            }
            // What it replaced served its decision.
            var stored = change
            stored.replaces = nil
            stored.settles = []
            // The name goes to the device's, not the row's (`PushOutcome.deviceNames`).
            stored.deviceName = nil
            stored.condition = nil
            stored.lost = lost
            if !stored.lost.isEmpty || !(current?.lost.isEmpty ?? true) { notAsPushed = true }
            decision.state.cursor += 1
            decision.state.usage = after
            decision.state.keptBytes += grown
            decision.writes.append(.init(change: stored, cursor: decision.state.cursor, isVersion: true))
            latest[change.key] = stored
            versions[change.key] = decision.state.cursor
            decision.outcome.accepted.append(change)
        }
        // Such rows (a winner given again, a conflict opened or settled) the pusher must fetch.
        if notAsPushed { decision.outcome.cursorBefore = nil }
        decision.outcome.cursorAfter = decision.state.cursor
        decision.outcome.mark = decision.writes.last.map { HistoryMark(key: $0.change.key, cursor: $0.cursor, stamp: $0.change.stamp) }
        return decision
    }
}

extension CloudLedger {
    /// Refuses the change that would make a key keep more changes that lost than it can: its
    /// pusher reports it, so that no change is dropped unseen.
    static func checkKept(_ lost: [KeptChange]) throws(ConflictFull) {
        guard lost.count <= KeptChangeList.maximumCount else { throw ConflictFull() }
    }

    /// Refuses the change that would make the store keep more bytes of changes that lost than
    /// its total quota: made-up devices cannot make a writer keep more than the quota twice
    /// over. A change that keeps no more than before is never refused by it.
    static func checkKeptBytes(_ state: CloudStoreState, growing grown: Int) throws(KeptBytesFull) {
        guard grown > 0, state.keptBytes + grown > state.limits.totalBytes else { return }
        throw KeptBytesFull(kept: state.keptBytes, added: grown, limit: state.limits.totalBytes)
    }

    struct KeptBytesFull: Error, CustomStringConvertible {
        var kept: Int
        var added: Int
        var limit: Int

        var description: String {
            "the store keeps \(kept) bytes of changes that lost to others, and this conflict would add \(added), past the "
                + "\(limit) its quota allows: settle conflicts first (kvsfs resolve)"
        }
    }

    struct ConflictFull: Error, CustomStringConvertible {
        var description: String {
            "the key keeps \(KeptChangeList.maximumCount) changes that lost to its value, the most it can: settle its conflict first (kvsfs resolve)"
        }
    }
}

/// How a storage keeps a key's changes that lost, and so what they count against the store's
/// allowance for them: the bytes it stores for them, as its triggers count them.
package enum KeptLayout: Sendable {
    /// Beside the key's change in its row, the newest's value in a column and the others as a
    /// list (`KeptChangeList`): the memory and SQLite storages.
    case list
    /// Each in a row of its own: PostgreSQL's `kvsfs_lost` (migration v8), whose triggers
    /// count each row's value (the twin of `bytes` in SQL).
    case rows

    package func bytes(_ lost: [KeptChange]) -> Int {
        switch self {
        case .list: KeptChangeList.storedBytes(lost)
        case .rows: lost.reduce(0) { $0 + $1.size }
        }
    }
}

/// Store ids: the local store's rule.
package enum StoreName {
    package static func check(_ name: String) throws(CloudError) {
        guard StoreLocation.isValidStoreID(name) else { throw .invalidStoreName(name) }
    }
}
