import Foundation

/// What an import changes, key by key, sorted: the keys it adds, those whose value it
/// replaces, those it removes (`--replace`), and how many it leaves as they were.
public struct ImportPlan: Sendable, Equatable, Codable {
    public var added: [String] = []
    public var changed: [String] = []
    public var removed: [String] = []
    public var unchanged = 0

    public init() {}

    /// Every key whose value the import changes.
    public var keys: [String] { (added + changed + removed).sorted() }
}

/// An import refused as a whole, and the key that made it so (nil when the refusal is not
/// about any one key: a read-only store, a failing disk).
public struct ImportRefusal: Error, Equatable, CustomStringConvertible {
    public let key: String?
    public let reason: StoreError

    public init(key: String?, reason: StoreError) {
        self.key = key
        self.reason = reason
    }

    public var description: String { key.map { "\($0.debugDescription): \(reason)" } ?? "\(reason)" }
}

/// An import's values, checked and encoded (`KeyValueStore.prepareImport`): the slow part of
/// an import, done before any lock is taken.
public struct PreparedImport: Sendable {
    /// The keys, sorted.
    let keys: [String]
    /// Each key's value as the store keeps it.
    let entries: [String: KeyValueStore.Entry]
    let replacing: Bool
    /// The version of the schema the values were checked against: a schema taken since is
    /// checked again before the import is committed.
    let schemaVersion: Int64
}

extension KeyValueStore {
    /// Checks and encodes `values` for `importValues`, without holding the store: each key
    /// name and value against the store's rules (the quotas and the schema), and first
    /// (cheaply, before any value is encoded) whether the keys can fit the key quota at all.
    /// Refused naming a key, as `importValues` says.
    public func prepareImport(_ values: [String: PropertyListValue], replacing: Bool) throws(ImportRefusal) -> PreparedImport {
        let keys = values.keys.sorted()
        if let refusal = state.withLock({ firstKeyOverKeyQuota(keys, replacing: replacing, in: $0) }) { throw refusal }
        let (ledger, schema) = state.withLock { (QuotaLedger(limits: $0.limits), $0.schema) }
        let unstamped = Date(timeIntervalSince1970: 0)  // each gets its stamp's time when committed
        var entries = [String: Entry](minimumCapacity: keys.count)
        for key in keys {
            do throws(StoreError) {
                entries[key] = try ledger.checkedEntry(key, values[key]!, modifiedAt: unstamped)
                try schema.rules?.check(key: key, value: values[key]!)
            } catch {
                throw ImportRefusal(key: key, reason: error)
            }
        }
        return PreparedImport(keys: keys, entries: entries, replacing: replacing, schemaVersion: schema.version)
    }

    /// Sets every key of an import, and when it was prepared `replacing` removes every key it
    /// does not hold, as one change: one transaction, all of it or nothing. With `dryRun`,
    /// only says what it would change. Registered defaults are not the store's: an imported
    /// key becomes a real key.
    ///
    /// Refused as a whole, naming a key, when a key's name or value breaks the store's rules
    /// (`prepareImport`), or when the result would grow past the byte or key quota: the key
    /// named is the first that does not fit, taking removals first, then the keys in order.
    public func importValues(_ prepared: PreparedImport, dryRun: Bool) throws(ImportRefusal) -> ImportPlan {
        if !dryRun, let reason = readOnlyReason.withLock({ $0 }) { throw ImportRefusal(key: nil, reason: .readOnly(reason)) }
        let result = state.withLock { (state: inout State) -> Result<ImportPlan, ImportRefusal> in
            if state.schema.version != prepared.schemaVersion {
                for key in prepared.keys {
                    do throws(StoreError) {
                        try state.schema.check(key: key, xml: prepared.entries[key]!.xml)
                    } catch {
                        return .failure(ImportRefusal(key: key, reason: error))
                    }
                }
            }
            let plan: ImportPlan, staged: StagedChanges
            switch stage(prepared, in: state) {
            case .success(let staging): (plan, staged) = staging
            case .failure(let refusal): return .failure(refusal)
            }
            guard !dryRun, !staged.edits.isEmpty else { return .success(plan) }
            do throws(StoreError) {
                try commit(staged, in: &state)
            } catch {
                return .failure(ImportRefusal(key: nil, reason: error))
            }
            return .success(plan)
        }
        let plan = try result.get()
        if !dryRun, !plan.keys.isEmpty { changeObserver.withLock { $0 }?.notify() }
        return plan
    }

    /// What `prepared` changes in `state`: the plan and the staged edits, checked whole against
    /// the quotas (refused naming the first key that does not fit).
    private func stage(_ prepared: PreparedImport, in state: State) -> Result<(ImportPlan, StagedChanges), ImportRefusal> {
        let keys = prepared.keys
        let removals = prepared.replacing ? state.values.entries.keys.filter { prepared.entries[$0] == nil }.sorted() : []
        var edits = [String: Entry?]()
        var usage = state.usage
        for key in removals {
            edits[key] = .some(nil)
            usage = usage.replacing(state.values[key], with: nil)
        }
        var plan = ImportPlan()
        plan.removed = removals
        for key in keys {
            let new = prepared.entries[key]!
            let old = state.values[key]
            guard old?.xml != new.xml else {
                plan.unchanged += 1
                continue
            }
            edits[key] = .some(new)
            usage = usage.replacing(old, with: new)
            if old == nil { plan.added.append(key) } else { plan.changed.append(key) }
        }
        let staged = StagedChanges(edits: edits, usage: usage)
        let ledger = QuotaLedger(limits: state.limits)
        do throws(StoreError) {
            try ledger.checkResult(before: state.usage, after: staged.usage, added: staged.addedBytes)
        } catch {
            return .failure(firstKeyOverQuota(staged, order: removals + keys, in: state, ledger: ledger) ?? ImportRefusal(key: nil, reason: error))
        }
        return .success((plan, staged))
    }

    /// `prepared`'s changes on the condition that no key they set or remove has a version on
    /// the remote after `cursor` (`kvsfs import --if-unchanged-since`), stamped but not
    /// committed (`conditionalChanges`), with what they change. Refused as a whole, naming a
    /// key, as `importValues` is, and when a key it changes has a local change the remote has
    /// not taken yet.
    public func conditionalImport(_ prepared: PreparedImport, unchangedSince cursor: Int64) throws(ImportRefusal) -> (plan: ImportPlan, changes: [StampedChange]) {
        if let reason = readOnlyReason.withLock({ $0 }) { throw ImportRefusal(key: nil, reason: .readOnly(reason)) }
        let result = state.withLock { (state: inout State) -> Result<(plan: ImportPlan, changes: [StampedChange]), ImportRefusal> in
            let plan: ImportPlan, staged: StagedChanges
            switch stage(prepared, in: state) {
            case .success(let staging): (plan, staged) = staging
            case .failure(let refusal): return .failure(refusal)
            }
            do throws(StoreError) {
                return .success((plan, try stampUnsent(staged, condition: .unchangedSince(cursor), after: [:], in: &state)))
            } catch {
                if case .unpushedChange(let key) = error { return .failure(ImportRefusal(key: key, reason: error)) }
                return .failure(ImportRefusal(key: nil, reason: error))
            }
        }
        return try result.get()
    }

    /// Prepares and imports `values` in one call (see `prepareImport` and `importValues`).
    public func importValues(_ values: [String: PropertyListValue], replacing: Bool, dryRun: Bool) throws(ImportRefusal) -> ImportPlan {
        try importValues(try prepareImport(values, replacing: replacing), dryRun: dryRun)
    }

    /// The first of `keys` (sorted) that takes the key count past the quota, removals first:
    /// found from which keys exist alone, before any value is encoded.
    private func firstKeyOverKeyQuota(_ keys: [String], replacing: Bool, in state: State) -> ImportRefusal? {
        let ledger = QuotaLedger(limits: state.limits)
        let before = state.usage
        var count = replacing ? keys.reduce(0) { $0 + (state.values[$1] == nil ? 0 : 1) } : before.keys
        for key in keys where state.values[key] == nil {
            count += 1
            do throws(StoreError) {
                try ledger.checkResult(before: before, after: QuotaUsage(bytes: before.bytes, keys: count), added: 0)
            } catch {
                return ImportRefusal(key: key, reason: error)
            }
        }
        return nil
    }

    /// The first key, in `order`, whose change takes the running usage past a quota that the
    /// whole of `staged` breaks; its refusal names that key's own size and the room left for it.
    private func firstKeyOverQuota(_ staged: StagedChanges, order: [String], in state: State, ledger: QuotaLedger) -> ImportRefusal? {
        var usage = state.usage
        for key in order {
            guard let new = staged.edits[key] else { continue }
            do throws(StoreError) {
                usage = try ledger.checkReplacing(bytes: state.values[key]?.size, with: new?.size, usage: usage)
            } catch {
                return ImportRefusal(key: key, reason: error)
            }
        }
        return nil
    }
}
