import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Synchronization
import Testing

/// The sync engine against an in-memory remote, applying straight to the store (the mount
/// tests apply through a real mount).
@Suite("The sync engine", .hangGuard)
struct SyncEngineTests {
    /// A store in its own directory with an engine on `remote`, started.
    final class Device: Sendable {
        let store: KeyValueStore
        let engine: SyncEngine
        let events = EventRecorder()

        init(_ name: String, in dir: TemporaryDirectory, remote: any ChangeLog) throws {
            store = try KeyValueStore(path: dir.subdirectory(name) + "/store.sqlite")
            let events = events
            engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            engine.start()
        }

        deinit { engine.stop() }

        func text(_ key: String) -> String? {
            guard let entry = store.entry(forKey: key), case .string(let text)? = try? PropertyListCodec.decode(entry.xml) else { return nil }
            return text
        }
    }

    @Test("a change on one device reaches the other with reason server-change; a new device's first download is initial-sync")
    func converge() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = MemoryCloudStorage()
            let one = try Device("one", in: dir, remote: memoryRemote(cloud))
            let two = try Device("two", in: dir, remote: memoryRemote(cloud))
            try await two.engine.synchronize()
            try one.store.put(.string("hello"), forKey: "greeting")
            #expect(await waitUntil { two.text("greeting") == "hello" })
            // The event follows the value into the store.
            #expect(await waitUntil { !two.events.events.isEmpty })
            #expect(two.events.events.map(\.reason) == [.serverChange])
            #expect(two.events.events.first?.keys == ["greeting"])
            #expect(await waitUntil { one.store.syncState(forKey: "greeting") == .synced })
            #expect(one.events.events.isEmpty, "a device is not told of its own writes")

            try two.store.removeValue(forKey: "greeting")
            #expect(await waitUntil { one.store.entry(forKey: "greeting") == nil })

            try one.store.put(.integer(1), forKey: "a")
            try one.store.put(.integer(2), forKey: "b")
            try await one.engine.synchronize()
            let three = try Device("three", in: dir, remote: memoryRemote(cloud))
            #expect(await waitUntil { !three.events.events.isEmpty })
            #expect(three.events.events.first?.reason == .initialSync)
            #expect(three.events.events.first?.keys == ["a", "b"])
        }
    }

    @Test("offline: writes stay pending and synchronize() fails; back online they reach the other device")
    func offline() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = MemoryCloudStorage()
            let link = InterruptibleRemote(memoryRemote(cloud))
            let one = try Device("one", in: dir, remote: link)
            let two = try Device("two", in: dir, remote: memoryRemote(cloud))
            try await one.engine.synchronize()
            link.setOnline(false)
            try one.store.put(.string("written offline"), forKey: "k")
            try two.store.put(.string("from two"), forKey: "other")
            await #expect(throws: CloudError.self) { try await one.engine.synchronize() }
            #expect(one.store.syncState(forKey: "k") == .pending)
            #expect(one.engine.status.lastError?.contains("cannot be reached") == true)

            link.setOnline(true)
            try await two.engine.synchronize()
            try await one.engine.synchronize()
            #expect(one.store.syncState(forKey: "k") == .synced)
            #expect(one.text("other") == "from two")
            #expect(await waitUntil { two.text("k") == "written offline" })
        }
    }

    @Test("a write the remote refuses for its quota is rolled back to the remote's value, with reason quota-violation")
    func quotaViolation() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = MemoryCloudStorage()
            try cloud.setLimits(QuotaLimits(totalBytes: 1000), of: "default")
            let one = try Device("one", in: dir, remote: memoryRemote(cloud))
            let link = InterruptibleRemote(memoryRemote(cloud))
            let two = try Device("two", in: dir, remote: link)
            try await two.engine.synchronize()
            link.setOnline(false)
            // Both devices add a value that fits alone but not together.
            try one.store.put(.string(String(repeating: "a", count: 600)), forKey: "first")
            try await one.engine.synchronize()
            try two.store.put(.string(String(repeating: "b", count: 600)), forKey: "second")
            try two.store.put(.string("old"), forKey: "small")
            link.setOnline(true)
            try await two.engine.synchronize()

            #expect(two.store.entry(forKey: "second") == nil, "rolled back: the remote never had it")
            #expect(two.store.syncState(forKey: "second") == .refused)
            #expect(two.text("first") == String(repeating: "a", count: 600))
            #expect(two.text("small") == "old", "what fits is kept")
            let violation = try #require(two.events.events.first { $0.reason == .quotaViolation })
            #expect(violation.keys == ["second"])
            #expect(violation.message?.contains("bytes") == true)
            #expect(one.store.entry(forKey: "second") == nil)
        }
    }

    @Test("a remote with another identity (emptied, replaced, another account) never removes local values: they are pushed to it")
    func identityChange() async throws {
        try await withTemporaryDirectory { dir in
            let first = MemoryCloudStorage()
            let second = MemoryCloudStorage()
            _ = try second.push([change("theirs", "from the new remote", time: 5, device: "x")], to: "default")
            let link = InterruptibleRemote(memoryRemote(first))
            let device = try Device("one", in: dir, remote: link)
            for index in 0..<10 { try device.store.put(.integer(index), forKey: "synced\(index)") }
            try await device.engine.synchronize()
            link.setOnline(false)
            for index in 0..<5 { try device.store.put(.integer(index), forKey: "pending\(index)") }
            device.engine.stop()
            // The same store, now syncing with a remote that has none of it.
            let store = device.store
            let events = EventRecorder()
            let engine = SyncEngine(store: store, remote: memoryRemote(second), remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try await engine.synchronize()
            #expect(store.keys().count == 16, "every local value stays, and the remote's arrives")
            #expect(store.entry(forKey: "theirs") != nil)
            #expect(store.pendingChanges().isEmpty, "what the remote lacked was pushed again")
            #expect(try second.changes(in: "default", after: 0, limit: 100).changes.count == 16)
            let reset = try #require(events.events.first)
            #expect(reset.reason == .remoteReset)
            #expect(reset.message?.contains("15 local changes pushed again") == true, "\(reset.message ?? "")")
            #expect(engine.status.lastIncident?.contains("identity changed") == true)
        }
    }

    @Test("a remote restored from a backup (its history ends before the mount's cursor) gets back what it lost")
    func restoredRemote() async throws {
        try await withTemporaryDirectory { dir in
            let backup = MemoryCloudStorage(identity: "same")
            let live = MemoryCloudStorage(identity: "same")
            let current = RestorableStorage(live)
            let remote = EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { current }
            let a = try Device("a", in: dir, remote: remote)
            try a.store.put(.string("before"), forKey: "early")
            try await a.engine.synchronize()
            _ = try backup.push(try live.changes(in: "default", after: 0, limit: 10).changes, to: "default")
            for index in 0..<5 { try a.store.put(.integer(index), forKey: "late\(index)") }
            try await a.engine.synchronize()
            #expect(try live.cursor(of: "default") == 6)
            current.restore(backup)  // the server's database restored from the backup
            try await a.engine.synchronize()
            #expect(try backup.changes(in: "default", after: 0, limit: 100).changes.count == 6, "the lost changes were pushed again")
            #expect(a.store.keys().count == 6)
            #expect(a.events.events.contains { $0.reason == .remoteReset && $0.message?.contains("history ends at 1") == true },
                    "\(a.events.events)")
        }
    }
}

/// A file remote's waits, woken by its bell alone: each ends long before its deadline.
@Suite("File remote waits", .hangGuard)
struct FileRemoteWaitTests {
    /// Runs `body` with a file remote at `path` that looks at its cursor again only after five
    /// minutes (only the bell can end a wait in time), and the cursor it starts from. The waits
    /// below run for two minutes and must end within one: far from the deadline, however busy
    /// the machine (a full test run shares two cores with every other suite).
    private func withBellOnlyFileRemote(
        _ body: (_ path: String, _ remote: any ChangeLog, _ cursor: Int64) async throws -> Void
    ) async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.path + "/cloud.sqlite"
            let log = EmbeddedChangeLog(description: "file", clock: ContinuousClock(), pollInterval: .seconds(300),
                                        watchedFiles: [path + "-wal", path], watchedFallback: .seconds(300)) { () throws(CloudError) in
                try SQLiteCloudStorage(path: path)
            }
            try await body(path, log, try await log.changes(in: "default", after: 0, limit: 100).cursor)
        }
    }

    @Test("a file remote hears another process's commit at once, without looking at the cursor in between")
    func fileRemoteHearsCommits() async throws {
        try await withBellOnlyFileRemote { path, remote, cursor in
            let other = try SQLiteCloudStorage(path: path)  // another process's connections to the same file
            let clock = ContinuousClock()
            let started = clock.now
            async let heard = remote.waitForChanges(in: "default", after: cursor, mark: nil, timeout: .seconds(120))
            try await Task.sleep(for: .milliseconds(300))
            _ = try await other.push([change("k", "from elsewhere", time: 1, device: "other")], to: "default")
            #expect(try await heard)
            #expect(clock.now - started < .seconds(60))
        }
    }

    @Test("a wait on the file remote ends when its task is cancelled, and waits side by side do not steal each other's rings")
    func fileRemoteWaitsEnd() async throws {
        try await withBellOnlyFileRemote { path, remote, cursor in
            let clock = ContinuousClock()
            let started = clock.now
            let cancelled = Task { try await remote.waitForChanges(in: "default", after: cursor, mark: nil, timeout: .seconds(120)) }
            try await Task.sleep(for: .milliseconds(300))
            cancelled.cancel()
            #expect(try await cancelled.value == false, "a cancelled wait heard nothing")
            #expect(clock.now - started < .seconds(60))

            async let first = remote.waitForChanges(in: "default", after: cursor, mark: nil, timeout: .seconds(120))
            async let second = remote.waitForChanges(in: "default", after: cursor, mark: nil, timeout: .seconds(120))
            try await Task.sleep(for: .milliseconds(300))
            _ = try await SQLiteCloudStorage(path: path).push([change("k", "v", time: 1, device: "other")], to: "default")
            // From the commit: on a loaded machine the push itself (a new connection, a flush to
            // disk) may take long, which says nothing of the bell.
            let pushed = clock.now
            let heard = try await (first, second)
            #expect(heard == (true, true))
            #expect(clock.now - pushed < .seconds(30), "the waits heard the commit \(clock.now - pushed) after it")
        }
    }
}

/// Cloud storage whose data can be swapped for a backup underneath its users, as a server's
/// database restored while mounts stay connected.
final class RestorableStorage: CloudStorage {
    private let current: Mutex<MemoryCloudStorage>
    init(_ storage: MemoryCloudStorage) { current = Mutex(storage) }
    func restore(_ backup: MemoryCloudStorage) { current.withLock { $0 = backup } }
    /// A backup of what is held now.
    func snapshot() -> MemoryCloudStorage { storage.snapshot() }
    private var storage: MemoryCloudStorage { current.withLock { $0 } }
    func identity() throws(CloudError) -> String { try storage.identity() }
    func renewIdentity(replacing seen: String) throws(CloudError) -> Bool { try storage.renewIdentity(replacing: seen) }
    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) throws(CloudError) -> PushOutcome {
        try storage.push(changes, to: store, mark: mark)
    }
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) throws(CloudError) -> ChangeBatch {
        try storage.changes(in: store, after: cursor, mark: mark, limit: limit)
    }
    func cursor(of store: String) throws(CloudError) -> Int64 { try storage.cursor(of: store) }
    func limits(of store: String) throws(CloudError) -> QuotaLimits { try storage.limits(of: store) }
    func setLimits(_ limits: QuotaLimits, of store: String) throws(CloudError) { try storage.setLimits(limits, of: store) }
    func history(of key: String, in store: String) throws(CloudError) -> [KeyVersion] { try storage.history(of: key, in: store) }
    func version(_ version: Int64, of key: String, in store: String) throws(CloudError) -> KeyVersion? {
        try storage.version(version, of: key, in: store)
    }
    func historyPolicy(of store: String) throws(CloudError) -> HistoryPolicy { try storage.historyPolicy(of: store) }
    func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) throws(CloudError) -> HistoryPolicy {
        try storage.changeHistoryPolicy(change, of: store)
    }
    func schema(of store: String) throws(CloudError) -> RemoteSchema { try storage.schema(of: store) }
    func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) throws(CloudError) -> RemoteSchema {
        try storage.setSchema(text, of: store, ifVersion: ifVersion)
    }
}

/// A remote whose fetches answer from a batch received ahead (as an event stream's) until told
/// to forget it: the remote itself has one change more. Its other calls reach an empty log.
final class PrefetchingRemote: ChangeLogWrapper {
    let base: any ChangeLog = memoryRemote(MemoryCloudStorage())
    private let stale: ChangeBatch
    private let fresh: ChangeBatch
    private let discarded = Mutex(false)
    init(stale: ChangeBatch, fresh: ChangeBatch) {
        self.stale = stale
        self.fresh = fresh
    }
    var description: String { "prefetching" }
    func identity() async throws(CloudError) -> String { "prefetching" }
    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        PushOutcome(accepted: changes)
    }
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        let batch = discarded.withLock { $0 } ? fresh : stale
        return cursor < batch.cursor ? batch : ChangeBatch(changes: [], cursor: cursor, complete: true)
    }
    func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws(CloudError) -> Bool {
        do { try await Task.sleep(for: timeout) } catch {}
        return false
    }
    func discardPrefetched() { discarded.withLock { $0 = true } }
}

@Suite("What synchronize() promises", .hangGuard)
struct SynchronizePromiseTests {
    @Test("synchronize() returns only once every change the remote had when called is in the store, not a prefetched part")
    func noPrefetchedShortcut() async throws {
        try await withTemporaryDirectory { dir in
            let first = change("a", "one", time: 1000, device: "other")
            let second = change("b", "two", time: 1001, device: "other")
            let remote = PrefetchingRemote(stale: ChangeBatch(changes: [first], cursor: 1, complete: true),
                                           fresh: ChangeBatch(changes: [first, second], cursor: 2, complete: true))
            let store = try makeStore(in: dir)
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store))
            try await engine.synchronize()
            #expect(store.keys() == ["a", "b"])
        }
    }
}
