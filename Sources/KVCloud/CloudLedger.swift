import Foundation
import KVStore

/// One store's rows as a storage holds them, inside one write transaction.
protocol CloudTable {
    var limits: QuotaLimits { get }
    var usage: QuotaUsage { get }
    var cursor: Int64 { get }
    func current(_ key: String) throws -> StampedChange?
    /// Records `change` as the key's latest, accepted at `cursor`, the store using `usage`.
    mutating func record(_ change: StampedChange, cursor: Int64, usage: QuotaUsage) throws
}

/// The merge rule and the quotas, as the remote applies them. Storages differ only in where
/// the rows live.
enum CloudLedger {
    static func push(_ changes: [StampedChange], into table: inout some CloudTable) throws -> PushOutcome {
        var outcome = PushOutcome(cursorBefore: table.cursor)
        var usage = table.usage
        var cursor = table.cursor
        let ledger = QuotaLedger(limits: table.limits)
        for change in changes {
            let current = try table.current(change.key)
            if let current, current.stamp >= change.stamp {
                outcome.accepted.append(change)  // a repeat, or superseded: the client fetches the winner
                continue
            }
            let wasLive = current.map { !$0.isTombstone } ?? false
            let after = QuotaUsage(
                bytes: usage.bytes + change.size - (current?.size ?? 0),
                keys: usage.keys + (change.isTombstone ? 0 : 1) - (wasLive ? 1 : 0))
            do {
                try check(change, ledger: ledger, before: usage, after: after)
            } catch {
                outcome.refused.append(Refusal(change: change, current: current, reason: String(describing: error)))
                continue
            }
            cursor += 1
            usage = after
            try table.record(change, cursor: cursor, usage: usage)
            outcome.accepted.append(change)
        }
        outcome.cursorAfter = cursor
        return outcome
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

/// Store ids as both the local store and the remote accept them.
enum StoreName {
    static func check(_ name: String) throws(CloudError) {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !name.isEmpty, name.count <= 128, name.allSatisfy(allowed.contains), name != ".", name != ".." else {
            throw .invalidStoreName(name)
        }
    }
}
