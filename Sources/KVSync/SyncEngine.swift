import Foundation
import KVCloud
import KVStore
import Synchronization

/// Reconciles a local store with a remote: pushes local changes (the latest per key, so that
/// bursts travel as one change), fetches remote ones and hands them to the applier, reports
/// every external change as a `SyncEvent`, and retries with backoff and jitter while the
/// remote cannot be reached, honouring a retry-after the remote gives.
///
/// Settings kept in the store: `sync.cursor` (the position in the remote's history fetched up
/// to: a `SyncPosition`) and `sync.remote` (the identity of the remote synced with; another one
/// means a resynchronisation).
public final class SyncEngine: Sendable {
    /// How the engine stands, for `user.kvsfs.sync` on the mount's root.
    public struct Status: Sendable, Equatable {
        public var lastError: String?
        public var lastSync: Date?
        public var initialSyncDone: Bool
        /// The last time the remote's history was found not to be the one this mount saw, and
        /// what was done (see `resynchronise`).
        public var lastIncident: String?
    }

    private let store: KeyValueStore
    private let remote: any Remote
    private let applier: any ExternalChangeApplying
    private let onEvent: @Sendable (SyncEvent) -> Void
    private let debounce: Duration
    private let cycleLock = AsyncLock()
    private let wake = WakeSignal()
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let state = Mutex(Status(lastError: nil, lastSync: nil, initialSyncDone: false, lastIncident: nil))
    /// The position last recorded, nil until the watch has read the stored one.
    private let knownPosition = Mutex<SyncPosition?>(nil)
    private let clock: any Clock<Duration>
    private let minimumInterval: Duration = .milliseconds(10)
    private let lastAccountCheck = Mutex<ContinuousClock.Instant?>(nil)

    /// `debounce` is how long a local change waits for others to join it before the push;
    /// `clock` times the waits (debounce, backoff, retry-after, the periodic round).
    public init(store: KeyValueStore, remote: any Remote, applier: any ExternalChangeApplying,
                debounce: Duration = .milliseconds(2), clock: any Clock<Duration> = ContinuousClock(),
                onEvent: @escaping @Sendable (SyncEvent) -> Void = { _ in }) {
        self.clock = clock
        self.store = store
        self.remote = remote
        self.applier = applier
        self.onEvent = onEvent
        self.debounce = debounce
    }

    static let cursorSetting = "sync.cursor"
    static let remoteSetting = "sync.remote"

    /// The position recorded in the store; nil before the first fetch (or for a setting that
    /// is not a position, which the next fetch from the start then replaces).
    private func storedPosition() throws -> SyncPosition? {
        try store.setting(Self.cursorSetting).flatMap { SyncPosition(setting: $0) }
    }

    /// Records where the mount now stands, in the store and for the watch.
    private func record(_ position: SyncPosition) throws {
        try store.setSetting(Self.cursorSetting, to: try position.setting)
        knownPosition.withLock { $0 = position }
    }

    public var status: Status { state.withLock { $0 } }
    public var remoteDescription: String { remote.description }

    /// Starts syncing in the background: at once, then on every local change, every remote
    /// change, and every 30 seconds.
    public func start() {
        store.observeLocalChanges { [wake] in wake.signal() }
        let loop = Task.detached { [self] in await runLoop() }
        let watcher = Task.detached { [self] in await watchRemote() }
        let ticker = Task.detached { [wake, clock] in
            while !Task.isCancelled {
                try? await clock.sleep(for: .seconds(30))
                wake.signal()
            }
        }
        tasks.withLock { $0 = [loop, watcher, ticker] }
    }

    public func stop() {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        wake.signal()
    }

    /// Starts a round now without waiting for it.
    public func requestSync() {
        wake.signal()
    }

    /// Pushes what is pending now and starts a round that fetches and applies, without
    /// waiting for that round or applying anything itself: for callers that hold something an
    /// apply needs (fsync of the mount's root holds the directory's lock). Refusals are left to
    /// the round, which pushes again and rolls back.
    public func pushNow() async throws {
        defer { wake.signal() }
        let pending = store.pendingChanges()
        do {
            if pending.isEmpty {
                _ = try await remote.identity()  // reachable?
            } else {
                _ = try await send(pending)
            }
        } catch {
            state.withLock { $0.lastError = String(describing: error) }
            throw error
        }
    }

    /// `synchronize()`: pushes what is pending and fetches what is new, now. Throws the
    /// remote's error when it cannot be reached.
    public func synchronize() async throws {
        // A batch an event stream delivered before this call may not be all the remote has now;
        // and the remote's identity may have changed since it was last looked at (another
        // mount found its history was not the one they saw).
        remote.discardPrefetched()
        lastAccountCheck.withLock { $0 = nil }
        try await cycle()
    }

    /// Replaces the store's values by the remote's, on request (`kvsfs sync --replace-with-remote`):
    /// every key takes the remote's latest change, a key the remote does not hold is removed, and
    /// local changes the remote does not have, pending ones included, are discarded. The only way
    /// kvsfs discards local changes for a remote's; reported as a `remote-reset` event.
    public func replaceWithRemote() async throws {
        remote.discardPrefetched()
        try await cycleLock.withLock {
            let (remoteChanges, position) = try await fetchWholeHistory()
            let local = store.allChanges()
            let removals = local.filter { remoteChanges[$0.key] == nil && !$0.isTombstone }.map { StampedChange.tombstone($0.key, stamp: $0.stamp) }
            let held = Dictionary(uniqueKeysWithValues: local.map { ($0.key, $0) })
            let replacements = remoteChanges.values.filter { held[$0.key] != $0 }
            let changed = try await apply(replacements + removals, mode: .replace)
            // The store then holds nothing for a removed key, as the remote: its tombstone bears
            // the stamp of the value it removed, and would pass that value over should it come
            // back (pushed again by a mount that still has it).
            try store.forget(removals)
            try store.setSetting(Self.remoteSetting, to: try await remote.identity())
            try record(position)
            let message = "replaced by the remote's values on request: \(changed.count) keys changed, \(removals.count) of them removed"
            state.withLock { $0.lastIncident = "\(SyncEvent.timeFormat.string(from: Date())) \(message)" }
            onEvent(SyncEvent(reason: .remoteReset, keys: changed.sorted(), message: message))
        }
    }

    // MARK: - The loop

    private func runLoop() async {
        var backoff = Backoff()
        var generator = SystemRandomNumberGenerator()
        var lastRound = ContinuousClock.now
        while !Task.isCancelled {
            do {
                lastRound = ContinuousClock.now
                try await cycle()
                backoff.reset()
            } catch {
                let delay = (error as? RemoteError)?.retryAfter ?? backoff.next(using: &generator)
                try? await clock.sleep(for: delay)
                continue
            }
            await wake.wait()
            // A burst gathers for `debounce`; under a steady stream, rounds are at least
            // `minimumInterval` apart, so that each pushes many changes.
            let sinceLast = ContinuousClock.now - lastRound
            try? await clock.sleep(for: max(debounce, minimumInterval - sinceLast))
        }
    }

    /// Wakes the loop when the remote has changes after the cursor fetched up to, then lets
    /// the loop fetch them before looking again.
    private func watchRemote() async {
        var backoff = Backoff()
        var generator = SystemRandomNumberGenerator()
        while !Task.isCancelled {
            // Nothing is asked before a round has looked at the remote's identity: the stored
            // position may be another account's (a mount moved with --remote), which the
            // remote would take for another history.
            if state.withLock({ $0.lastSync }) == nil {
                try? await clock.sleep(for: .milliseconds(50))
                continue
            }
            do {
                if knownPosition.withLock({ $0 }) == nil {
                    let stored = try storedPosition() ?? .start
                    knownPosition.withLock { $0 = $0 ?? stored }
                }
                let seen = knownPosition.withLock { $0 } ?? .start
                if try await remote.waitForChanges(after: seen.cursor, mark: seen.mark, timeout: .seconds(10)) {
                    // A round moved the cursor meanwhile (our own push, say): look again from there.
                    guard knownPosition.withLock({ $0 }) == seen else { continue }
                    wake.signal()
                    let deadline = ContinuousClock.now + .seconds(1)
                    while knownPosition.withLock({ $0 }) == seen, ContinuousClock.now < deadline {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                }
                backoff.reset()
            } catch {
                // Another history: the round that this starts finds it too, and resynchronises.
                if case RemoteError.historyMismatch = error { wake.signal() }
                try? await clock.sleep(for: backoff.next(using: &generator))
            }
        }
    }

    /// One round: account check, push, fetch. Rounds never overlap.
    private func cycle() async throws {
        try await cycleLock.withLock {
            do {
                try await checkAccount()
                try await push()
                try await pull()
                state.withLock {
                    $0.lastError = nil
                    $0.lastSync = Date()
                    $0.initialSyncDone = true
                }
            } catch {
                state.withLock { $0.lastError = String(describing: error) }
                throw error
            }
        }
    }

    /// On the first contact with a remote, records its identity. Another identity than the one
    /// last synced with (the remote was replaced or emptied, or the mount names another account)
    /// is never obeyed by deleting local values: the mount resynchronises. Asked on the first
    /// round and then once a minute.
    private func checkAccount() async throws {
        if let last = lastAccountCheck.withLock({ $0 }), ContinuousClock.now - last < .seconds(60) { return }
        let identity = try await remote.identity()
        store.setReadOnly(try await remote.readOnlyReason())
        lastAccountCheck.withLock { $0 = ContinuousClock.now }
        let recorded = try store.setting(Self.remoteSetting)
        guard recorded != identity else { return }
        if let recorded {
            try await resynchronise(identity: identity, because: "the remote's identity changed from \(recorded) to \(identity)")
        } else {
            try store.setSetting(Self.remoteSetting, to: identity)
        }
    }

    /// Brings a remote whose history is not the one this mount saw (another identity, or a
    /// history that ends before the mount's cursor: emptied, replaced, restored from a backup)
    /// and the store together without losing anything: every local change the remote lacks
    /// (it has none, or an older one, for the key) becomes pending and is pushed again by this
    /// round, and the remote's changes are taken in by the merge rule. No local value is removed
    /// for being absent from the remote. Reported as a `remote-reset` event and in the status.
    private func resynchronise(identity: String?, because reason: String) async throws {
        // Found by this mount's own position: its other mounts may not be able to tell.
        if identity == nil, let recorded = try store.setting(Self.remoteSetting) { try await remote.renewIdentity(replacing: recorded) }
        let (remoteChanges, position) = try await fetchWholeHistory()
        let lost = store.allChanges().filter { local in
            guard let held = remoteChanges[local.key] else { return !local.isTombstone }
            return held.stamp < local.stamp
        }
        try store.markPending(lost.map(\.key))
        let changed = try await apply(Array(remoteChanges.values), mode: .merge)
        // The remote's identity as it is now: a remote that renewed it on finding another
        // history (see `CloudStorage.renewIdentity()`) need not send this mount round again.
        let current = if let identity { identity } else { try await remote.identity() }
        try store.setSetting(Self.remoteSetting, to: current)
        try record(position)
        let message = "\(reason): \(lost.count) local changes pushed again, no local value removed"
        state.withLock { $0.lastIncident = "\(SyncEvent.timeFormat.string(from: Date())) \(message)" }
        onEvent(SyncEvent(reason: .remoteReset, keys: Set(lost.map(\.key) + changed).sorted(), message: message))
    }

    /// Every key's latest change on the remote, fetched from the start, and the position that
    /// leaves the mount at.
    private func fetchWholeHistory() async throws -> (changes: [String: StampedChange], position: SyncPosition) {
        var position = SyncPosition.start
        var latest = [String: StampedChange]()
        while true {
            let batch = try await remote.fetch(after: position.cursor, mark: position.mark)
            for change in admit(batch) where latest[change.key].map({ change.stamp > $0.stamp }) ?? true {
                latest[change.key] = change
            }
            position = position.after(batch)
            if batch.complete { return (latest, position) }
        }
    }

    /// Pushes `pending` with the mount's history mark, and records what became of it.
    private func send(_ pending: [StampedChange]) async throws -> PushOutcome {
        let known = try storedPosition()
        let outcome = try await remote.push(pending, mark: known?.mark)
        try store.markPushed(outcome.accepted)
        try store.forget(outcome.notStored)
        // What the push stored is known to be in the remote's history from now on; and when
        // nobody else pushed since our last fetch, it is all ours: no need to fetch it. Before
        // the first fetch there is no position yet: that fetch is the initial sync.
        if outcome.mark != nil, let known {
            let next = known.after(outcome)
            if next != known { try record(next) }
        }
        return outcome
    }

    private func push() async throws {
        guard store.readOnly == nil else { return }
        let pending = store.pendingChanges()
        guard !pending.isEmpty else { return }
        let outcome: PushOutcome
        do {
            outcome = try await send(pending)
        } catch RemoteError.historyMismatch(let reason) {
            // Found before anything was pushed into the other history: take it in first.
            try await resynchronise(identity: nil, because: reason)
            outcome = try await send(store.pendingChanges())
        }
        guard !outcome.refused.isEmpty else { return }
        // Roll each refused change back to what the remote holds (or to nothing).
        let rollbacks = outcome.refused.map { $0.current ?? .tombstone($0.change.key, stamp: $0.change.stamp) }
        _ = try await apply(rollbacks, mode: .rollback)
        let message = outcome.refused.map { "\($0.change.key): \($0.reason)" }.joined(separator: "; ")
        onEvent(SyncEvent(reason: .quotaViolation, keys: outcome.refused.map(\.change.key).sorted(), message: message))
    }

    /// Applies through the applier; a failure is reported (an `apply-failed` event) and thrown,
    /// so that the round ends before anything records the changes as taken in.
    private func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        do {
            return try await applier.apply(changes, mode: mode)
        } catch {
            onEvent(SyncEvent(reason: .applyFailed, keys: changes.map(\.key).sorted(), message: String(describing: error)))
            throw error
        }
    }

    /// The changes of a fetched batch that meet the change rule, in the form the store keeps.
    /// Each one that does not is reported (an event with the reason) and passed over: the
    /// remote holds it as it is, so fetching it again would give the same.
    private func admit(_ batch: ChangeBatch) -> [StampedChange] {
        let admission = ChangeAdmission.admit(batch.changes, policy: .fetched)
        if !admission.refused.isEmpty || !batch.unreadable.isEmpty {
            let reasons = admission.refused.map { "\($0.change.key.debugDescription): \($0.reason)" } + batch.unreadable
            onEvent(SyncEvent(reason: .refusedRemoteChange, keys: admission.refused.map(\.change.key).sorted(),
                              message: reasons.joined(separator: "; ")))
        }
        return admission.changes
    }

    /// Fetches and applies what the remote accepted since the cursor. The very first fetch
    /// into this store is the initial sync.
    private func pull() async throws {
        let stored = try storedPosition()
        let reason: SyncEvent.Reason = stored == nil ? .initialSync : .serverChange
        var position = stored ?? .start
        var recorded = stored != nil
        while true {
            let batch: ChangeBatch
            do {
                batch = try await remote.fetch(after: position.cursor, mark: position.mark)
            } catch RemoteError.historyMismatch(let reason) {
                // Found after this round's push: push what the remote lost now.
                try await resynchronise(identity: nil, because: reason)
                try await push()
                return
            }
            var newer = [StampedChange]()
            var confirmations = [StampedChange]()
            for change in admit(batch) {
                if store.accepts(change) { newer.append(change) } else { confirmations.append(change) }
            }
            if !confirmations.isEmpty { try store.applyExternal(confirmations) }
            // A failure leaves the cursor where it was: the round fails, and the next one
            // (after backoff) fetches and applies these changes again.
            let changed = newer.isEmpty ? [] : try await apply(newer, mode: .merge)
            let next = position.after(batch)
            if next != position || !recorded {
                try record(next)
                recorded = true
            }
            position = next
            knownPosition.withLock { $0 = position }
            if !changed.isEmpty { onEvent(SyncEvent(reason: reason, keys: changed.sorted())) }
            if batch.complete { break }
        }
    }
}
