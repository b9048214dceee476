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
///
/// A round (`round()`) checks the account, pushes (`SyncPush.swift`), then fetches and applies
/// (`SyncFetch.swift`); `SyncLoop.swift` runs rounds in the background, and
/// `Resynchronisation.swift` handles a remote whose history is not the one this mount saw.
public final class SyncEngine: Sendable {
    let store: KeyValueStore
    /// The remote's change log, and the name of the store this mount syncs in it. Its errors
    /// (`CloudError`) say what the engine does next: retry after a backoff or the remote's
    /// Retry-After, or resynchronise on a history mismatch.
    let remote: any ChangeLog
    let remoteStore: String
    let applier: any ExternalChangeApplying
    let onEvent: @Sendable (SyncEvent) -> Void
    /// While changes come faster than rounds (`SyncLoop.swift`'s `pause`), how long a local
    /// change waits for others to join it before the push. An idle mount pushes a change at once.
    let debounce: Duration
    /// While changes come faster than rounds, rounds start at least this far apart, so that
    /// each carries many changes. Rounds that move one change each are not spaced.
    let minimumInterval: Duration = .milliseconds(10)
    /// After a round that pushed a burst, the next starts at least this long after it began.
    /// A push costs a few transactions however many changes it carries (the remote's, and the
    /// store's record of it), and so does the fetch after it; under a stream of writes, paying
    /// them less often leaves the cores to the writes. The price: while a mount writes bursts,
    /// what it writes next reaches other mounts, and what they write reaches it, up to 40 ms
    /// later than under the minimum interval alone.
    let burstInterval: Duration = .milliseconds(50)
    /// A round that pushed this many changes or more pushed a burst; a few changes keep the
    /// minimum interval, and single edits, as people make them, no interval at all.
    let burstSize = 32
    /// How often a round runs with nothing else asking for one.
    let keepAliveInterval: Duration = .seconds(30)
    /// How often a round asks the remote's identity and whether this device may write.
    let accountCheckInterval: Duration = .seconds(60)
    let clock: SyncClock
    /// Draws the backoff's jitter.
    let jitter: Mutex<any RandomNumberGenerator>
    /// Held by each round and each replacement: they never overlap.
    let roundLock = AsyncLock()
    /// Rings when a round is wanted; the loop waits on it.
    let wake = WakeSignal()
    /// Whether a local change was made since the current round began: the loop lets others
    /// join it before the next round, while changes come faster than rounds.
    let localChangeWaiting = Atomic<Bool>(false)
    let tasks = Mutex<[Task<Void, Never>]>([])
    /// What `status` reports; the watcher waits on it for the first round to succeed.
    let state = Watched(Status())
    /// Held while a change of standing is decided and told, so that the log and the event log
    /// say them in the order the state took them (a push outside a round may race a round).
    let telling = Mutex(())
    /// The position last recorded, nil until the watcher has read the stored one.
    let knownPosition = Watched<SyncPosition?>(nil)
    /// When (on `clock`) the account was last checked; nil asks the next round to check it.
    let lastAccountCheck = Mutex<Duration?>(nil)
    /// Gaps in the contact with the remote, and the audits that covered them (`auditIfDue`).
    let auditCount = Mutex(AuditCount())
    /// The version of a schema the remote gave that the store could not take (`takeSchema`):
    /// not asked for again, nor told again, until the remote's version moves on.
    let refusedSchemaVersion = Mutex<Int64?>(nil)
    /// The changes the last push could not get judged, already reported (`reportDeferred`).
    let deferredReported = Mutex<Set<ChangeName>>([])

    /// `debounce` is how long a local change waits for others to join it before the push,
    /// while changes come faster than rounds;
    /// `clock` times every wait (debounce, backoff, retry-after, the periodic round, the
    /// account check); `jitter` draws the backoff's random part.
    public init(store: KeyValueStore, remote: any ChangeLog, remoteStore: String, applier: any ExternalChangeApplying,
                debounce: Duration = .milliseconds(2), clock: any Clock<Duration> = ContinuousClock(),
                jitter: sending any RandomNumberGenerator = SystemRandomNumberGenerator(),
                onEvent: @escaping @Sendable (SyncEvent) -> Void = { _ in }) {
        self.clock = SyncClock(clock)
        self.jitter = Mutex(jitter)
        self.store = store
        self.remote = remote
        self.remoteStore = remoteStore
        self.applier = applier
        self.onEvent = onEvent
        self.debounce = debounce
    }


    /// The cursor of the remote's history up to which the mount has taken in every change;
    /// nil until the engine has read where it stands.
    public var remoteCursor: Int64? { knownPosition.value?.cursor }

    /// The position recorded in the store; nil before the first fetch (or for a setting that
    /// is not a position, which the next fetch from the start then replaces).
    func storedPosition() throws -> SyncPosition? {
        try store.setting(.syncPosition).flatMap { SyncPosition(setting: $0) }
    }

    /// Records where the mount now stands, in the store and for the watcher.
    func record(_ position: SyncPosition) throws {
        try store.setSetting(.syncPosition, to: try position.setting)
        knownPosition.update { $0 = position }
    }

    /// Pushes what is pending now and starts a round that fetches and applies, without
    /// waiting for that round or applying anything itself: for callers that hold something an
    /// apply needs (fsync of the mount's root holds the directory's lock). Refusals are left to
    /// the round, which pushes again and rolls back.
    public func pushNow() async throws {
        defer { wake.signal() }
        let pending = store.changesToPush()
        do {
            if pending.isEmpty {
                _ = try await remote.identity()  // reachable?
            } else {
                _ = try await send(pending)
            }
        } catch {
            if !Self.isCancellation(error) { noteFailure(error) }
            throw error
        }
    }

    /// Whether `error` only says the engine is stopping (the mount unmounts): no failure of
    /// the remote, so nothing to tell.
    static func isCancellation(_ error: any Error) -> Bool {
        Task.isCancelled || error is CancellationError
    }

    /// `synchronize()`: pushes what is pending and fetches what is new, now. Throws the
    /// remote's error when it cannot be reached.
    public func synchronize() async throws {
        // A batch an event stream delivered before this call may not be all the remote has now;
        // and the remote's identity may have changed since it was last looked at (another
        // mount found its history was not the one they saw).
        remote.discardPrefetched()
        lastAccountCheck.withLock { $0 = nil }
        try await round()
    }

    /// One round: account check, push, audit after a gap, fetch. Rounds never overlap.
    /// Returns how many changes it moved, for the loop to pace the next.
    @discardableResult
    func round() async throws -> RoundTraffic {
        try await roundLock.withLock {
            do {
                try await checkAccount()
                let pushed = try await push()
                try await auditIfDue()
                let fetched = try await pull()
                noteSuccess()
                return RoundTraffic(pushed: pushed, fetched: fetched)
            } catch {
                if !Self.isCancellation(error) { noteFailure(error) }
                throw error
            }
        }
    }
}

/// How many changes a round moved: the loop spaces rounds only while they move more than one.
struct RoundTraffic {
    /// The local changes it pushed.
    var pushed: Int
    /// The changes made elsewhere that it took in (this mount's own, which the remote gives
    /// back, are not counted).
    var fetched: Int
}
