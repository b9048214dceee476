import Foundation

/// What an import changes, key by key, sorted: the keys it adds, those whose value it
/// replaces, those it removes (`--replace`), and how many it leaves as they were.
public struct ImportPlan: Sendable, Equatable {
    public var added: [String] = []
    public var changed: [String] = []
    public var removed: [String] = []
    public var unchanged = 0

    public init() {}

    /// Every key whose value the import changes.
    public var keys: [String] { (added + changed + removed).sorted() }
}

/// An import refused as a whole, and the key that made it so.
public struct ImportRefusal: Error, Equatable, CustomStringConvertible {
    public let key: String
    public let reason: StoreError

    public var description: String { "\(key.debugDescription): \(reason)" }
}

extension KeyValueStore {
    /// Sets every key of `values`, and with `replacing` removes every key it does not hold, as
    /// one change: one transaction, all of it or nothing. With `dryRun`, only says what it would
    /// change. Registered defaults are not the store's: an imported key becomes a real key.
    ///
    /// Refused as a whole, naming a key, when a key's name or value breaks the store's rules,
    /// or when the result would grow past the byte or key quota: the key named is the first
    /// that does not fit, taking removals first, then the keys in order.
    public func importValues(_ values: [String: PropertyListValue], replacing: Bool, dryRun: Bool) throws(ImportRefusal) -> ImportPlan {
        if !dryRun, let reason = readOnlyReason.withLock({ $0 }) { throw ImportRefusal(key: values.keys.min() ?? "", reason: .readOnly(reason)) }
        let keys = values.keys.sorted()
        let result = state.withLock { (state: inout State) -> Result<ImportPlan, ImportRefusal> in
            let removals = replacing ? state.entries.keys.filter { values[$0] == nil }.sorted() : []
            let staged: StagedChanges
            do throws(StoreError) {
                staged = try stage(keys.map { .put($0, values[$0]!) } + removals.map { .delete($0) }, in: state)
            } catch {
                // Say which key: stage each one alone to find it.
                func refuses(_ key: String) -> Bool {
                    do {
                        _ = try stage([.put(key, values[key]!)], in: state)
                        return false
                    } catch {
                        return true
                    }
                }
                let key = keys.first(where: refuses) ?? keys.first ?? ""
                return .failure(ImportRefusal(key: key, reason: error))
            }
            let ledger = QuotaLedger(limits: state.limits)
            do throws(StoreError) {
                try ledger.checkResult(before: state.usage, after: staged.usage, added: staged.addedBytes)
            } catch {
                return .failure(firstKeyOverQuota(staged, order: removals + keys, in: state, ledger: ledger) ?? ImportRefusal(key: keys.first ?? "", reason: error))
            }
            var plan = ImportPlan()
            for key in keys {
                switch (state.entries[key], staged.edits[key]) {
                case (nil, .some): plan.added.append(key)
                case (.some, .some): plan.changed.append(key)
                default: plan.unchanged += 1
                }
            }
            plan.removed = removals
            guard !dryRun, !staged.edits.isEmpty else { return .success(plan) }
            do throws(StoreError) {
                try commit(staged, in: &state)
            } catch {
                return .failure(ImportRefusal(key: plan.keys.first ?? "", reason: error))
            }
            return .success(plan)
        }
        let plan = try result.get()
        if !dryRun, !plan.keys.isEmpty { changeObserver.withLock { $0 }?.notify() }
        return plan
    }

    /// The first key, in `order`, whose change takes the running usage past a quota that the
    /// whole of `staged` breaks.
    private func firstKeyOverQuota(_ staged: StagedChanges, order: [String], in state: State, ledger: QuotaLedger) -> ImportRefusal? {
        var usage = state.usage
        var added = 0
        for key in order {
            guard let new = staged.edits[key] else { continue }
            let old = state.entries[key]
            let next = QuotaUsage(bytes: usage.bytes + (new?.size ?? 0) - (old?.size ?? 0),
                                  keys: usage.keys + (new == nil ? 0 : 1) - (old == nil ? 0 : 1))
            added += new?.size ?? 0
            do throws(StoreError) {
                try ledger.checkResult(before: state.usage, after: next, added: added)
            } catch {
                return ImportRefusal(key: key, reason: error)
            }
            usage = next
        }
        return nil
    }
}
