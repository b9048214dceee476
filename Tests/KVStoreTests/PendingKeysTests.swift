import Foundation
import KVStore
import KVTestSupport
import Testing

/// A push takes the pending changes from a set of keys the store keeps beside its index. These
/// tests hold that set to what the database says: after every kind of change, a reopening with
/// commits still in the journal, and a long run of random operations.
@Suite("Pending keys")
struct PendingKeysTests {
    /// The keys a push would send now, each checked against what the store says of its key and
    /// what the database holds (the journal moved into it first).
    @discardableResult
    private func expectInStep(_ store: KeyValueStore, _ comment: String = "",
                              sourceLocation: SourceLocation = #_sourceLocation) throws -> [String] {
        let pushing = store.pendingChanges().map(\.key)
        let stored = try store.changes().filter { $0.syncState == .pending }.map(\.key).sorted()
        let byKey = store.allChanges().map(\.key).filter { store.syncState(forKey: $0) == .pending }.sorted()
        #expect(pushing.sorted() == stored, "pushed vs stored \(comment)", sourceLocation: sourceLocation)
        #expect(byKey == stored, "per key vs stored \(comment)", sourceLocation: sourceLocation)
        #expect(store.pendingCount == stored.count, "count \(comment)", sourceLocation: sourceLocation)
        #expect(Set(pushing).count == pushing.count, "one change per key \(comment)", sourceLocation: sourceLocation)
        return stored
    }

    private func remoteChange(_ key: String, _ value: PropertyListValue?, time: Int64) throws -> StampedChange {
        let stamp = ChangeStamp(time: time, counter: 0, device: "remote")
        guard let value else { return .tombstone(key, stamp: stamp) }
        return StampedChange(key: key, value: Data(try PropertyListCodec.encodeXML(value)), type: value.type, stamp: stamp)
    }

    /// A store holding `keys`, each synced.
    private func syncedStore(in dir: TemporaryDirectory, keys: [String]) throws -> KeyValueStore {
        let store = try makeStore(in: dir)
        for key in keys { try store.put(.integer(1), forKey: key) }
        try store.markPushed(store.pendingChanges())
        return store
    }

    private var later: Int64 { Int64(Date().timeIntervalSince1970 * 1000) + 60_000 }

    @Test("a store reopened with commits still in its journal pushes exactly what it held pending, after a crash or a clean close")
    func reopenWithJournal() throws {
        try withTemporaryDirectory { dir in
            let path = dir.subdirectory("store") + "/test.sqlite"
            let expected: [String]
            do {
                let store = try KeyValueStore(path: path)
                for key in ["a", "b", "c", "d"] { try store.put(.string(key), forKey: key) }
                try store.markPushed(store.pendingChanges())  // into the database, all synced
                try store.put(.string("again"), forKey: "b")
                try store.removeValue(forKey: "c")
                try store.put(.string("new"), forKey: "e")
                _ = try store.applyExternal([try remoteChange("d", .integer(4), time: later)])
                let journal = try #require(FileManager.default.attributesOfItem(atPath: path + ".changes")[.size] as? Int)
                #expect(journal > 0, "the last commits are only in the journal")
                expected = store.pendingChanges().map(\.key).sorted()
                #expect(expected == ["b", "c", "e"])
                // The files as a crash leaves them: the journal not yet moved into the database.
                let crash = dir.subdirectory("crash")
                for suffix in ["", "-wal", ".changes"] where FileManager.default.fileExists(atPath: path + suffix) {
                    try FileManager.default.copyItem(atPath: path + suffix, toPath: crash + "/test.sqlite" + suffix)
                }
                let recovered = try KeyValueStore(path: crash + "/test.sqlite")
                #expect(recovered.pendingChanges().map(\.key).sorted() == expected)
                #expect(recovered.pendingChanges() == store.pendingChanges(), "the same changes, stamps and values")
                #expect(try expectInStep(recovered, "after a crash") == expected)
            }
            let reopened = try KeyValueStore(path: path)
            #expect(try expectInStep(reopened, "after a clean close") == expected)
        }
    }

    @Test("a remote change over a pending key: newer takes the key out, the same stamp confirms it, older leaves it pending")
    func externalOverPending() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            for key in ["newer", "confirmed", "older", "deleted", "rolledBack"] { try store.put(.string("mine"), forKey: key) }
            let mine = try #require(store.allChanges(forKey: "confirmed"))
            _ = try store.applyExternal([
                try remoteChange("newer", .string("theirs"), time: later),
                mine,
                try remoteChange("older", .string("stale"), time: 1),
                try remoteChange("deleted", nil, time: later),
            ])
            _ = try store.applyExternal([try remoteChange("rolledBack", .string("held"), time: 1)], mode: .rollback)
            #expect(try expectInStep(store) == ["older"])
            #expect(store.syncState(forKey: "confirmed") == .synced)
            #expect(store.syncState(forKey: "rolledBack") == .refused)
            try store.put(.string("mine again"), forKey: "deleted")
            #expect(try expectInStep(store) == ["deleted", "older"])
        }
    }

    @Test("markPending makes known keys pending again, in the set and on disk; unknown keys are passed over")
    func markPendingAgain() throws {
        try withTemporaryDirectory { dir in
            do {
                let store = try syncedStore(in: dir, keys: ["a", "b", "c"])
                #expect(try expectInStep(store).isEmpty)
                try store.markPending(["a", "c", "never written"])
                #expect(try expectInStep(store) == ["a", "c"])
            }
            #expect(try expectInStep(try makeStore(in: dir), "reopened") == ["a", "c"])
        }
    }

    @Test("a push records its marks, its forgotten tombstones and the position in one go; a key changed meanwhile stays pending")
    func recordPush() throws {
        try withTemporaryDirectory { dir in
            do {
                let store = try syncedStore(in: dir, keys: ["a", "b", "gone"])
                try store.removeValue(forKey: "gone")
                try store.put(.integer(2), forKey: "a")
                try store.put(.integer(2), forKey: "b")
                let pushed = store.pendingChanges()
                try store.put(.integer(3), forKey: "b")  // after the push read it
                let tombstone = try #require(pushed.first { $0.key == "gone" })
                try store.recordPush(accepted: pushed, notStored: [tombstone], position: "7")
                #expect(try expectInStep(store) == ["b"])
                #expect(store.allChanges(forKey: "gone") == nil, "forgotten, as the remote holds nothing")
                #expect(try store.setting(.syncPosition) == "7")
            }
            let reopened = try makeStore(in: dir)
            #expect(try expectInStep(reopened, "reopened") == ["b"])
            #expect(try reopened.setting(.syncPosition) == "7", "stored with the marks")
        }
    }

    @Test("after any run of writes, deletions, pushes, re-marks and remote changes, the set is what the database holds")
    func randomOperations() throws {
        try withTemporaryDirectory { dir in
            var generator = SeededGenerator(seed: 11)
            var store: KeyValueStore? = try makeStore(in: dir)
            let keys = (0..<12).map { "k\($0)" }
            for step in 0..<400 {
                let key = keys.randomElement(using: &generator)!
                let operation = Int.random(in: 0..<8, using: &generator)
                if operation == 7 {
                    store = nil  // a clean close, then a reopening
                    store = try makeStore(in: dir)
                }
                let current = try #require(store)
                switch operation {
                case 0, 1:
                    try current.put(.integer(step), forKey: key)
                case 2:
                    if current.entry(forKey: key) != nil { try current.removeValue(forKey: key) }
                case 3:
                    let pending = current.pendingChanges()
                    try current.recordPush(accepted: pending.filter { _ in Bool.random(using: &generator) },
                                           notStored: pending.filter { $0.isTombstone && Bool.random(using: &generator) })
                case 4:
                    try current.markPending(keys.filter { _ in Bool.random(using: &generator) })
                case 5:
                    let time = Bool.random(using: &generator) ? later : 1
                    let value: PropertyListValue? = Bool.random(using: &generator) ? .integer(-step) : nil
                    let mode: ExternalApplyMode = [.merge, .merge, .rollback, .replace].randomElement(using: &generator)!
                    _ = try current.applyExternal([try remoteChange(key, value, time: time)], mode: mode)
                case 6:
                    if let mine = current.allChanges(forKey: key) { _ = try current.applyExternal([mine]) }  // a confirmation
                default:
                    break
                }
                if step % 20 == 0 { try expectInStep(try #require(store), "at step \(step)") }
            }
            let before = try #require(store).pendingChanges()
            #expect(!before.isEmpty, "the run ends with changes to push")
            store = nil
            let reopened = try makeStore(in: dir)
            #expect(reopened.pendingChanges() == before)
            try expectInStep(reopened, "reopened at the end")
        }
    }
}
