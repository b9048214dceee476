import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// A remote that gives its changes a few at a time, as a server gives a large push in pages.
private struct PagedRemote: ChangeLogWrapper {
    let base: any ChangeLog
    let pageSize: Int

    init(_ storage: MemoryCloudStorage, pageSize: Int) {
        base = memoryRemote(storage)
        self.pageSize = pageSize
    }

    var description: String { "paged memory" }
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        try await base.changes(in: store, after: cursor, mark: mark, limit: min(limit, pageSize))
    }
}

@Suite("Fetching in pages", .hangGuard)
struct PagedFetchTests {
    @Test("a push the remote gives in many pages is taken in as one commit, with one event naming every key")
    func pagesAreOneCommit() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = MemoryCloudStorage()
            let writer = try KeyValueStore(path: dir.subdirectory("writer") + "/store.sqlite")
            let reader = try KeyValueStore(path: dir.subdirectory("reader") + "/store.sqlite")
            let writing = SyncEngine(store: writer, remote: memoryRemote(cloud), remoteStore: "default", applier: StoreApplier(store: writer)) { _ in }
            let events = EventRecorder()
            let reading = SyncEngine(store: reader, remote: PagedRemote(cloud, pageSize: 7), remoteStore: "default", applier: StoreApplier(store: reader)) { events.record($0) }
            try await reading.synchronize()

            let keys = (0..<50).map { String(format: "k%02d", $0) }
            _ = try writer.importValues(Dictionary(uniqueKeysWithValues: keys.map { ($0, .string($0)) }), replacing: false, dryRun: false)
            try await writing.synchronize()
            let revision = reader.revision
            try await reading.synchronize()
            #expect(reader.keys() == keys)
            #expect(reader.revision == revision + 1, "eight pages, one commit: a crash keeps all of the push or none")
            #expect(events.events.map(\.keys) == [keys], "one event for the whole push")
        }
    }
}
