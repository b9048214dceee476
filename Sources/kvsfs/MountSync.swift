import Dispatch
import Foundation
import KVCloud
import KVSFS
import KVStore
import KVSync
import Synchronization

/// `--remote` values.
enum RemoteLocation {
    /// The path of a file:// remote; nil for anything else.
    static func filePath(_ url: String) -> String? {
        guard url.hasPrefix("file:///") else { return nil }
        return String(url.dropFirst("file://".count))
    }

    /// Whether `url` names a sync server: https://HOST:PORT[/ACCOUNT], or http:// on loopback.
    static func isServer(_ url: String) -> Bool {
        if url.hasPrefix("https://") { return true }
        guard url.hasPrefix("http://") else { return false }
        let host = url.dropFirst("http://".count).split(separator: "/").first.map { String($0) } ?? ""
        let name = host.hasPrefix("[") ? String(host.prefix { $0 != "]" }.dropFirst()) : String(host.split(separator: ":").first ?? "")
        return ["127.0.0.1", "localhost", "::1"].contains(name)
    }
}

/// Sync for one mount: the engine, the thread that applies remote changes through the mount,
/// the event log, and the hooks the file system calls.
final class MountSync: Sendable {
    let engine: SyncEngine
    let hooks: SyncHooks
    private let store: KeyValueStore

    init(store: KeyValueStore, remote: any Remote, mountpoint: String, eventLogPath: String) throws {
        self.store = store
        let events: EventLog
        do {
            events = try EventLog(path: eventLogPath)
        } catch {
            throw CommandFailure("cannot open the event log \(eventLogPath): \(error.localizedDescription)")
        }
        let registry = ExternalChangeRegistry()
        let waits = RemoteWaits()
        let applier = MountApplier(mountpoint: mountpoint, fileName: { KeyFileName.fileName(forKey: $0) }, store: store, registry: registry)
        let engine = SyncEngine(store: store, remote: remote, applier: applier) { event in
            events.append(event)
            switch event.reason {
            case .refusedRemoteChange:
                FileHandleOutput.standardError.write("kvsfs: a change from the remote was refused: \(event.message ?? "")\n")
            case .applyFailed:
                FileHandleOutput.standardError.write("kvsfs: remote changes to \(event.keys) could not be applied, retrying: \(event.message ?? "")\n")
            default:
                break
            }
        }
        self.engine = engine
        hooks = SyncHooks(
            externalChanges: registry,
            synchronize: { [waits] in try MountSync.wait(in: waits) { try await engine.synchronize() } },
            pushNow: { [waits] in try MountSync.wait(in: waits) { try await engine.pushNow() } },
            replaceWithRemote: { [waits] in try MountSync.wait(in: waits) { try await engine.replaceWithRemote() } },
            rootAttributes: {
                [
                    "user.kvsfs.events": events.path,
                    "user.kvsfs.remote": remote.description,
                    "user.kvsfs.sync": MountSync.summary(engine.status, pending: store.pendingCount),
                ]
            })
    }

    func start() { engine.start() }
    func stop() { engine.stop() }

    /// Runs `work` from a FUSE request thread, waiting for it within `waits`' bounds; errors
    /// become the file system's.
    private static func wait(in waits: RemoteWaits, for work: @escaping @Sendable () async throws -> Void) throws {
        do {
            try waits.run(work)
        } catch let error as FileSystemError {
            throw error
        } catch let error as RemoteError where error.retryAfter != nil {
            throw FileSystemError.remoteBusy(error.description)
        } catch RemoteError.authorizationRefused(let reason) {
            throw FileSystemError.authorizationRefused(reason)
        } catch {
            throw FileSystemError.remoteUnreachable(String(describing: error))
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
