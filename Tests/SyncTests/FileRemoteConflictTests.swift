import Foundation
import GRDB
@testable import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Synchronization
import Testing

/// Conflicts in the file remote's rows as other programs may leave them: an older kvsfs that
/// writes a new change without the conflict columns, and columns broken by anyone.
@Suite("Conflicts in the file remote's rows", .hangGuard)
struct FileRemoteConflictTests {
    func change(_ key: String, _ text: String, time: Int64, device: String, replaces: Replaced?) -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device), replaces: replaces)
    }

    /// A file remote whose key `k` has an open conflict, two changes that lost.
    func conflicted(_ path: String) throws -> SQLiteCloudStorage {
        let cloud = try SQLiteCloudStorage(path: path, admission: AdmissionPolicy(now: { 10_000 }))
        _ = try cloud.push([change("k", "winner", time: 2000, device: "phone", replaces: .nothing)], to: "default")
        _ = try cloud.push([change("k", "loser", time: 1000, device: "laptop", replaces: .nothing)], to: "default")
        _ = try cloud.push([change("k", "other loser", time: 900, device: "tablet", replaces: .nothing)], to: "default")
        #expect(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.lost.map(\.stamp.device) == ["laptop", "tablet"])
        return cloud
    }

    @Test("a new change an older kvsfs writes without the conflict columns does not inherit the conflict")
    func olderWriter() throws {
        try withTemporaryDirectory { dir in
            let cloud = try conflicted(dir.path + "/cloud.sqlite")
            let value = try #require(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.value)
            // An older kvsfs's upsert: it knows none of the lost columns.
            let queue = try DatabaseQueue(path: dir.path + "/cloud.sqlite")
            try queue.write { db in
                try db.execute(sql: """
                    INSERT INTO cloudChange (store, key, value, type, time, counter, device, cursor) VALUES ('default', 'k', ?, 'string', 3000, 0, 'old', 3)
                    ON CONFLICT(store, key) DO UPDATE SET value = excluded.value, type = excluded.type, time = excluded.time,
                        counter = excluded.counter, device = excluded.device, cursor = excluded.cursor
                    """, arguments: [value])
                try db.execute(sql: "UPDATE cloudStore SET cursor = 3")
            }
            try queue.close()
            let batch = try cloud.changes(in: "default", after: 0, limit: 10)
            let row = try #require(batch.changes.first)
            #expect(row.stamp.device == "old" && row.lost.isEmpty && batch.unreadable.isEmpty, "\(batch.unreadable)")
        }
    }

    @Test("a new change the release that kept one change that lost writes keeps its own conflict, and no older list")
    func oneLoserWriter() throws {
        try withTemporaryDirectory { dir in
            let cloud = try conflicted(dir.path + "/cloud.sqlite")
            let winner = try #require(try cloud.changes(in: "default", after: 0, limit: 10).changes.first)
            // Its concurrent winner: the change it replaced, in the lost columns it knows.
            let queue = try DatabaseQueue(path: dir.path + "/cloud.sqlite")
            try queue.write { db in
                try db.execute(sql: """
                    UPDATE cloudChange SET value = NULL, type = NULL, time = 3000, counter = 0, device = 'previous', cursor = 4,
                        lostValue = value, lostType = type, lostTime = time, lostCounter = counter, lostDevice = device
                    """)
                try db.execute(sql: "UPDATE cloudStore SET cursor = 4")
            }
            try queue.close()
            let batch = try cloud.changes(in: "default", after: 0, limit: 10)
            #expect(batch.changes.first?.lost == [winner.kept] && batch.unreadable.isEmpty, "\(batch)")
        }
    }

    @Test("broken conflict columns: the key's change is still fetched, the conflict reported and left out; a push decides anew")
    func brokenColumns() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = try conflicted(dir.path + "/cloud.sqlite")
            let queue = try DatabaseQueue(path: dir.path + "/cloud.sqlite")
            try await queue.write { db in try db.execute(sql: "UPDATE cloudChange SET lostType = 'bogus'") }
            try queue.close()
            let batch = try cloud.changes(in: "default", after: 0, limit: 10)
            #expect(batch.changes.map(\.key) == ["k"] && batch.changes.first?.lost == [])
            #expect(batch.unreadable.count == 1 && batch.unreadable.first?.contains("is unknown") == true, "\(batch.unreadable)")

            let store = try makeStore(in: dir)
            let events = EventRecorder()
            let remote = EmbeddedChangeLog(description: "file", clock: ContinuousClock()) { cloud }
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try await engine.synchronize()
            #expect(store.entry(forKey: "k") != nil, "the winner arrived")
            #expect(store.conflicts().isEmpty)
            #expect(events.events.contains { $0.reason == .refusedRemoteChange && $0.message?.contains("conflict") == true })

            let outcome = try cloud.push([change("k", "sequential", time: 4000, device: "phone", replaces: .change(batch.changes[0].stamp))],
                                         to: "default")
            #expect(outcome.refused.isEmpty)
            #expect(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.lost == [])
        }
    }

    @Test("earlier changes that lost, in a column that is not a list of them: reported and left out, the change still fetched")
    func brokenEarlierLost() throws {
        try withTemporaryDirectory { dir in
            let cloud = try conflicted(dir.path + "/cloud.sqlite")
            let queue = try DatabaseQueue(path: dir.path + "/cloud.sqlite")
            for broken in [#"[{"stamp":{"time":-1,"counter":0,"device":"x"}}]"#, "not json", "[" + Array(repeating: #"{"stamp":{"time":1,"counter":0,"device":"x"}}"#, count: 8).joined(separator: ",") + "]"] {
                try queue.write { db in try db.execute(sql: "UPDATE cloudChange SET alsoLost = ?", arguments: [Data(broken.utf8)]) }
                let batch = try cloud.changes(in: "default", after: 0, limit: 10)
                #expect(batch.changes.map(\.key) == ["k"] && batch.changes.first?.lost == [])
                #expect(batch.unreadable.count == 1 && batch.unreadable.first?.contains("conflict kept") == true, "\(batch.unreadable)")
            }
            try queue.close()
        }
    }

    @Test("kept outside the quotas, as history is, but a lost change over the per-value quota is refused, with why")
    func keptChangesBound() throws {
        try withTemporaryDirectory { dir in
            let cloud = try SQLiteCloudStorage(path: dir.path + "/cloud.sqlite", admission: AdmissionPolicy(now: { 10_000 }))
            let winner = change("k", "winner", time: 2000, device: "phone", replaces: .nothing)
            try cloud.setLimits(QuotaLimits(totalBytes: winner.size + 10, valueBytes: winner.size + 10, keys: 10, keyNameBytes: 64), of: "default")
            _ = try cloud.push([winner], to: "default")
            _ = try cloud.push([change("k", "loser", time: 1000, device: "laptop", replaces: .nothing)], to: "default")
            #expect(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.lost.isEmpty == false, "kept beside a full store")
            let big = change("k", String(repeating: "x", count: 100), time: 1500, device: "tablet", replaces: .nothing)
            let outcome = try cloud.push([big], to: "default")
            #expect(outcome.refused.first?.reason.contains("per-value limit") == true, "\(outcome.refused)")
            #expect(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.lost.map(\.stamp.device) == ["laptop"])
        }
    }

    @Test("an unsent loss the remote refuses to keep is reported, and takes no later local write with it")
    func refusedLoss() async throws {
        try await withTemporaryDirectory { dir in
            let storage = MemoryCloudStorage()
            let store = try makeStore(in: dir)
            try store.put(.string(String(repeating: "p", count: 100)), forKey: "k")
            let mine = try #require(store.pendingChanges().first)
            let theirs = change("k", "theirs", time: mine.stamp.time + 1000, device: "phone", replaces: .nothing)
            try storage.setLimits(QuotaLimits(totalBytes: 4096, valueBytes: mine.size - 1, keys: 10, keyNameBytes: 64), of: "default")
            _ = try storage.push([theirs], to: "default")
            try store.applyExternal([theirs])  // fetched before the push: mine is an unsent loss
            let events = EventRecorder()
            let remote = WriteDuringPush(EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }) {
                try store.put(.string("later"), forKey: "k")  // while the loss is being pushed
            }
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try await engine.synchronize()
            try await engine.synchronize()
            let later = Array(try PropertyListCodec.encodeXML(.string("later")))
            #expect(store.entry(forKey: "k")?.xml == later, "the later write stays")
            #expect(try storage.changes(in: "default", after: 0, limit: 10).changes.first?.value == Data(later))
            #expect(store.changesToPush().isEmpty)
            #expect(events.events.contains { $0.reason == .quotaViolation && $0.keys == ["k"] })
        }
    }
}

/// A remote that runs `write` once, after the first push reached the remote and before it
/// answers: a local write racing a push.
final class WriteDuringPush: ChangeLogWrapper, @unchecked Sendable {
    let base: any ChangeLog
    private var write: (() throws -> Void)?

    init(_ base: any ChangeLog, write: @escaping () throws -> Void) {
        self.base = base
        self.write = write
    }

    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        let outcome = try await base.push(changes, to: store, mark: mark)
        if let write {
            self.write = nil
            do { try write() } catch { Issue.record("the racing write failed: \(error)") }
        }
        return outcome
    }
}

/// A remote that gives one change a page, and before the second page lets another device's
/// change lose to the first: the first page's key is then given again, later, with the conflict.
private final class LosingBetweenPages: ChangeLogWrapper {
    let storage: MemoryCloudStorage
    let base: any ChangeLog
    let loser: StampedChange
    let pages = Atomic(0)

    init(storage: MemoryCloudStorage, loser: StampedChange) {
        self.storage = storage
        base = memoryRemote(storage)
        self.loser = loser
    }

    var description: String { "paged memory" }
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        let batch = try storage.changes(in: store, after: cursor, mark: mark, limit: 1)
        if pages.add(1, ordering: .relaxed).newValue == 1 { _ = try storage.push([loser], to: store) }
        return batch
    }
    func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws(CloudError) -> Bool {
        false
    }
}

@Suite("Conflicts taken in with a whole history", .hangGuard)
struct WholeHistoryConflictTests {
    @Test("a key given again with its conflict while the history is read in pages ends with the conflict")
    func givenAgainBetweenPages() async throws {
        try await withTemporaryDirectory { dir in
            let storage = MemoryCloudStorage()
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            func change(_ key: String, _ text: String, time: Int64, device: String) -> StampedChange {
                StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                              stamp: ChangeStamp(time: time, counter: 0, device: device), replaces: .nothing)
            }
            _ = try storage.push([change("a", "winner", time: now, device: "phone"), change("b", "other", time: now, device: "phone")], to: "default")
            let loser = change("a", "loser", time: now - 100, device: "laptop")
            let store = try makeStore(in: dir)
            let engine = SyncEngine(store: store, remote: LosingBetweenPages(storage: storage, loser: loser), remoteStore: "default", applier: StoreApplier(store: store)) { _ in }
            try await engine.replaceWithRemote()
            #expect(store.conflict(forKey: "a")?.lost == [loser.kept], "the row as the remote holds it now")
        }
    }
}
