import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// What a push leaves in the store, against the file remote (a real SQLite file): the changes
/// it sent marked synced and the position it moved, together; a push that fails leaves every
/// change pending and the position where it was.
@Suite("A push's record", .hangGuard)
struct PushRecordTests {
    private func storedPending(_ store: KeyValueStore) throws -> [String] {
        try store.changes().filter { $0.syncState == .pending }.map(\.key).sorted()
    }

    @Test("a push the remote fails leaves every change pending and the position as it was; the next one sends them all")
    func failedPushLeavesEverythingPending() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.path + "/store.sqlite"
            let remotePath = dir.path + "/remote.sqlite"
            let link = InterruptibleRemote(EmbeddedChangeLog.file(path: remotePath, store: "default"))
            do {
                let store = try KeyValueStore(path: path)
                let engine = SyncEngine(store: store, remote: link, remoteStore: "default", applier: StoreApplier(store: store))
                try store.put(.string("first"), forKey: "first")
                try await engine.synchronize()
                let position = try store.setting(.syncPosition)
                let keys = (0..<300).map { "k\($0)" }
                for key in keys { try store.put(.string(key), forKey: key) }
                try store.removeValue(forKey: "first")
                link.answerBusy(retryAfter: .seconds(1))
                await #expect(throws: CloudError.self) { try await engine.synchronize() }
                #expect(store.pendingCount == keys.count + 1)
                #expect(try storedPending(store) == (keys + ["first"]).sorted())
                #expect(try store.setting(.syncPosition) == position, "the position did not move")

                try await engine.synchronize()
                #expect(store.pendingChanges().isEmpty)
                #expect(try storedPending(store).isEmpty)
            }
            // Reopened: nothing pending, and the position is past the mount's own push (a fetch
            // from it brings nothing back).
            let store = try KeyValueStore(path: path)
            #expect(store.pendingChanges().isEmpty)
            let position = try #require(try store.setting(.syncPosition))
            let cursor = try SQLiteCloudStorage(path: remotePath).cursor(of: "default")
            #expect(cursor == 302)
            #expect(position == "302" || position.contains("\"cursor\":302"), "\(position)")
        }
    }

    @Test("a change made while its key is being pushed stays pending, and goes with the next push")
    func changedDuringPushStaysPending() async throws {
        try await withTemporaryDirectory { dir in
            let store = try KeyValueStore(path: dir.path + "/store.sqlite")
            let cloud = MemoryCloudStorage()
            let engine = SyncEngine(store: store, remote: memoryRemote(cloud), remoteStore: "default", applier: StoreApplier(store: store))
            try await engine.synchronize()
            try store.put(.string("sent"), forKey: "k")
            try store.put(.string("sent"), forKey: "other")
            let sent = store.pendingChanges()
            try store.put(.string("changed since"), forKey: "k")
            let outcome = try await memoryRemote(cloud).push(sent, to: "default")
            try store.recordPush(accepted: outcome.accepted)
            #expect(store.pendingChanges().map(\.key) == ["k"])
            #expect(try storedPending(store) == ["k"])
            try await engine.synchronize()
            #expect(try cloud.changes(in: "default", after: 0, limit: 10).changes.map(\.key).sorted() == ["k", "other"])
            #expect(try value(store, "k") == "changed since")
            #expect(try storedPending(store).isEmpty)
        }
    }
}
