import Dispatch
import Foundation
import FuseKit
import KVCloud
import KVSFS
import KVStore
import KVSync
import Logging
import Synchronization

/// `--remote` values.
enum RemoteLocation {
    /// The path of a file:// remote; nil for anything else.
    static func filePath(_ url: String) -> String? {
        guard url.hasPrefix("file:///") else { return nil }
        return String(url.dropFirst("file://".count))
    }

    /// Whether `url` names a sync server: https://HOST:PORT[/ACCOUNT], or http:// on loopback;
    /// a port, if given, from 1 to 65535.
    static func isServer(_ url: String) -> Bool {
        guard let components = URLComponents(string: url), components.host?.isEmpty == false,
              components.port.map({ (1...65535).contains($0) }) ?? true else { return false }
        if url.hasPrefix("https://") { return true }
        guard url.hasPrefix("http://") else { return false }
        let host = url.dropFirst("http://".count).split(separator: "/").first.map { String($0) } ?? ""
        let name = host.hasPrefix("[") ? String(host.prefix { $0 != "]" }.dropFirst()) : String(host.split(separator: ":").first ?? "")
        return ["127.0.0.1", "localhost", "::1"].contains(name)
    }
}

/// Sync for one mount: the engine, which applies remote changes through the mount's applier,
/// and the event log; the mount's one door to them.
final class MountSync: MountSynchronizer {
    let engine: SyncEngine
    private let store: KeyValueStore
    private let remote: any ChangeLog
    private let applier: MountApplier
    private let events: EventLog
    private let waits = RemoteWaits()
    private let logger: Logger

    /// `remote` is the remote's change log, `remoteStore` the name of this mount's store in it.
    init(store: KeyValueStore, remote: any ChangeLog, remoteStore: String, applier: MountApplier, eventLogPath: String,
         logger: Logger) throws {
        self.store = store
        self.remote = remote
        self.logger = logger
        do {
            events = try EventLog(path: eventLogPath, keptBeside: store)
        } catch {
            throw CommandFailure("cannot open the event log \(eventLogPath): \(error)")
        }
        self.applier = applier
        engine = SyncEngine(store: store, remote: remote, remoteStore: remoteStore, applier: applier) { [events] event in
            Self.append(event, to: events, logger: logger)
            let message = event.message ?? ""
            switch event.reason {
            case .online:
                logger.info("online: \(message)")
            case .offline:
                logger.warning("offline: \(message); writes stay pending until the remote answers")
            case .remoteReset:
                logger.warning("the remote's history is not the one this mount saw: \(message)")
            case .conflict:
                logger.notice("kept \(counted(event.keys.count, "conflict")) (kvsfs conflicts lists them): \(event.keys)")
            case .quotaViolation:
                logger.warning("the remote refused local writes to \(event.keys), rolled back to its values: \(message)")
            case .schemaChange:
                logger.notice("\(message)")
            case .schemaViolation:
                logger.warning("changes from the remote hold values that break the store's schema, kept as the remote holds them: \(message)")
            case .refusedRemoteChange:
                logger.warning("a change from the remote was refused: \(event.message ?? "")")
            case .pushDeferred:
                logger.warning("the remote could not judge local writes, kept pending: \(event.message ?? "")")
            case .applyFailed:
                logger.error("remote changes to \(event.keys) could not be applied, retrying: \(event.message ?? "")")
            default:
                break
            }
        }
    }

    /// Appends `event` to the event log, which keeps its cursor beside the store.
    private static func append(_ event: SyncEvent, to events: EventLog, logger: Logger) {
        do {
            try events.append(event)
        } catch {
            logger.error("\(error); the event was \(event.reason.rawValue) for \(event.keys)")
        }
    }

    /// Tells of a schema set through this mount (`kvsfs schema set`), as a synced one is told.
    func record(schemaSet held: HeldSchema, breaking: Int) {
        let words = held.text == nil
            ? "the store's schema was removed (version \(held.version)) through this mount"
            : "the store's schema is now version \(held.version), set through this mount: \(breaking) key\(breaking == 1 ? "" : "s") hold\(breaking == 1 ? "s" : "") values that break it"
        logger.notice("\(words)")
        Self.append(SyncEvent(reason: .schemaChange, keys: [], message: words), to: events, logger: logger)
    }

    func record(refusedWriteOf key: String, reason: String) {
        Self.append(SyncEvent(reason: .refusedLocalWrite, keys: [key], message: reason), to: events, logger: logger)
    }

    func start() { engine.start() }
    /// Stops the engine and waits, at most 5 s, for a round in flight to end, so that the store
    /// is made durable after its last write; a round held up longer by its remote (a request
    /// times out after 30 s) is left to end with the process.
    func stop() {
        _ = waitFor({ [engine] in await engine.stopAndWait() }, timeout: .seconds(5))
    }

    /// Pushes what is pending and fetches and applies what is new, blocking until done, for
    /// `kvsfs sync` (the control socket's thread, never a FUSE request's). Throws `SyncFailure`.
    func synchronize() throws {
        try wait { [engine] in try await engine.synchronize() }
    }

    func pushNow(then answer: @escaping @Sendable (Result<Void, SyncFailure>) -> Void) {
        waits.start({ [engine] in try await engine.pushNow() }, then: { answer($0.mapError(Self.failure)) })
    }

    /// Takes in changes the remote accepted from this mount's own conditional push
    /// (`KeyValueStore.conditionalChanges`) as the remote's: through the applier, as a fetched
    /// change, so that they show in the mount with a writer's inotify events and the store
    /// holds them synced. Blocks until they are shown; throws `SyncFailure`.
    func takeIn(_ accepted: [StampedChange]) throws {
        let changes = accepted.map { change in
            // As the remote stored it: what travels with a push is not the row's.
            StampedChange(key: change.key, value: change.value, type: change.type, stamp: change.stamp)
        }
        try wait { [applier] in _ = try await applier.apply(changes, mode: .merge) }
    }

    /// `changes`, this device's own each with its name (`DeviceName`), for the remote to keep.
    func named(_ changes: [StampedChange]) throws -> [StampedChange] {
        try engine.named(changes)
    }

    /// Replaces the store's values by the remote's (`kvsfs sync --replace-with-remote`),
    /// blocking and throwing like `synchronize`.
    func replaceWithRemote() throws {
        try wait { [engine] in try await engine.replaceWithRemote() }
    }

    func rootAttributes() -> [String: String] {
        [
            "user.kvsfs.events": events.path,
            "user.kvsfs.remote": remote.description,
            "user.kvsfs.sync": MountSync.summary(engine.status, pending: store.pendingCount + store.unsentLosses().count),
        ]
    }

    func standing() -> SyncStanding {
        let status = engine.status
        let reachability: SyncStanding.Reachability =
            status.lastError.map { .offline($0) } ?? (status.lastSync == nil ? .connecting : .reachable)
        return SyncStanding(remote: remote.description, reachability: reachability, lastSync: status.lastSync,
                            eventLog: events.path, eventCursor: events.lastCursor, remoteCursor: engine.remoteCursor)
    }

    /// Runs `work` from the control socket's thread, waiting for it within `waits`' bounds;
    /// errors become the mount's.
    private func wait(for work: @escaping @Sendable () async throws -> Void) throws {
        do {
            try waits.run(work)
        } catch {
            throw Self.failure(error)
        }
    }

    /// The mount's failure an error of the remote is: the one map from the remote's errors to
    /// what a sync through the mount fails with (and so to its errno, `ErrnoMapping`).
    static func failure(_ error: any Error) -> SyncFailure {
        switch error {
        case let error as SyncFailure: return error
        case let error as CloudError:
            switch error {
            case .busy: return .busy(error.description)
            case .notAuthorized(let reason): return .authorizationRefused(reason)
            case .storeLimit(let reason): return .storeLimit(reason)
            case .unreachable(let cause, let words):
                switch cause {
                case .connectionRefused: return .connectionRefused(words)
                case .timedOut: return .timedOut(words)
                case .noRoute: return .unreachable(words)
                case .notTrusted: return .notTrusted(words)
                case .connectionLost: return .connectionLost(words)
                }
            case .unavailable(let reason): return .unreachable(reason)
            // Reached, and it answered: no route is missing, it cannot serve.
            case .notProtocol(let reason): return .unavailable(reason)
            default: return .unavailable(error.reason)
            }
        default: return .unavailable(String(describing: error))
        }
    }

    /// `user.kvsfs.sync` of the root: synced, pending N, or offline with the reason; then the
    /// last time the remote's history was found not to be the one the mount saw.
    static func summary(_ status: SyncEngine.Status, pending: Int) -> String {
        if let error = status.lastError { return "offline (\(pending) pending): \(error)" }
        if status.lastSync == nil { return "connecting (\(pending) pending)" }
        let state = pending == 0 ? "synced" : "pending \(pending)"
        return status.lastIncident.map { "\(state); remote reset at \($0)" } ?? state
    }

    /// The error of an "offline" summary, as the engine described it; nil for other summaries.
    static func lastError(inSummary summary: String) -> String? {
        guard summary.hasPrefix("offline ("), let colon = summary.range(of: "): ") else { return nil }
        return String(summary[colon.upperBound...])
    }
}
