import Foundation
import KVCloud
import KVStore
import KVTestSupport
import PropertyBased
import Synchronization
import Testing

@Suite("The merge rule")
struct MergeTests {
    @Test("stamps follow physical time, never go backwards, and exceed every stamp seen")
    func hybridLogicalClock() {
        var clock = HybridLogicalClock(device: "a")
        let first = clock.stamp(physical: 1000)
        let sameMillisecond = clock.stamp(physical: 1000)
        let clockWentBack = clock.stamp(physical: 900)
        #expect(first < sameMillisecond && sameMillisecond < clockWentBack)
        clock.observe(ChangeStamp(time: 5000, counter: 7, device: "b"), physical: 1001)
        let afterSeen = clock.stamp(physical: 1001)
        #expect(afterSeen > ChangeStamp(time: 5000, counter: 7, device: "b"))
        #expect(afterSeen.device == "a")
        // Ties on time and counter are broken by the device id.
        #expect(ChangeStamp(time: 1, counter: 0, device: "a") < ChangeStamp(time: 1, counter: 0, device: "b"))
    }

    @Test("a local write, a stale remote change and a newer one", .hangGuard)
    func storeMerge() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("local"), forKey: "k")
            let local = try #require(store.allChanges(forKey: "k"))
            #expect(store.syncState(forKey: "k") == .pending)

            let stale = change("k", "stale", time: local.stamp.time - 1, device: "zz")
            #expect(try store.applyExternal([stale]).isEmpty)
            #expect(try value(store, "k") == "local")

            // The remote confirming the local change: synced, nothing else changes.
            try store.applyExternal([local])
            #expect(store.syncState(forKey: "k") == .synced)

            let newer = change("k", "newer", time: local.stamp.time + 1, device: "b")
            #expect(try store.applyExternal([newer, newer]) == ["k"])
            #expect(try value(store, "k") == "newer")
            #expect(store.pendingChanges().isEmpty)

            // A later local write wins over what was seen: the clock moved past it.
            try store.put(.string("mine again"), forKey: "k")
            #expect(try #require(store.allChanges(forKey: "k")).stamp > newer.stamp)

            // A tombstone wins or loses like a write.
            let tombstone = StampedChange.tombstone("k", stamp: ChangeStamp(time: Int64.max / 2, counter: 0, device: "b"))
            try store.applyExternal([tombstone])
            #expect(store.entry(forKey: "k") == nil)
        }
    }

    @Test("pushing twice is harmless; an older change never replaces a newer one", arguments: StorageKind.allCases)
    func cloudMerge(kind: StorageKind) throws {
        try withTemporaryDirectory { dir in
            let cloud = try kind.make(in: dir)
            let old = change("k", "old", time: 10)
            let new = change("k", "new", time: 20)
            #expect(try cloud.push([new, new], to: "s").accepted.count == 2)
            #expect(try cloud.push([old], to: "s").accepted == [old])
            #expect(try cloud.push([new], to: "s").accepted == [new])
            let batch = try cloud.changes(in: "s", after: 0, limit: 10)
            #expect(batch.changes == [new])
            #expect(try cloud.changes(in: "other", after: 0, limit: 10).changes.isEmpty, "stores are kept apart")
            let tombstone = StampedChange.tombstone("k", stamp: ChangeStamp(time: 30, counter: 0, device: "a"))
            _ = try cloud.push([tombstone], to: "s")
            #expect(try cloud.changes(in: "s", after: batch.cursor, limit: 10).changes == [tombstone])
        }
    }

    @Test("a push of more keys than one lookup takes decides each against its own stored row", arguments: StorageKind.allCases)
    func largePush(kind: StorageKind) throws {
        try withTemporaryDirectory { dir in
            let cloud = try kind.make(in: dir)
            let keys = (0..<600).map { "k\($0)" } + ["with\u{0}NUL"]
            let first = keys.map { change($0, "first", time: 10) }
            #expect(try cloud.push(first, to: "s").refused.isEmpty)
            let cursor = try cloud.cursor(of: "s")
            // Older changes and repeats of every key are accepted and write nothing.
            let outcome = try cloud.push(keys.map { change($0, "older", time: 5) } + first, to: "s")
            #expect(outcome.refused.isEmpty)
            #expect(outcome.accepted.count == 2 * keys.count)
            #expect(try cloud.cursor(of: "s") == cursor)
            // Newer values replace each key's own: the count stays within a limit of the keys held.
            try cloud.setLimits(QuotaLimits(totalBytes: 1 << 20, valueBytes: 4096, keys: keys.count, keyNameBytes: 64), of: "s")
            let newer = keys.map { change($0, "newer", time: 20) }
            #expect(try cloud.push(newer, to: "s").refused.isEmpty)
            #expect(Set(try cloud.changes(in: "s", after: cursor, limit: 1000).changes) == Set(newer))
        }
    }

    @Test("keys holding NUL stay apart and keep every byte through the remote", arguments: StorageKind.allCases)
    func keysWithNUL(kind: StorageKind) throws {
        try withTemporaryDirectory { dir in
            let cloud = try kind.make(in: dir)
            let changes = [change("mid", "plain", time: 10), change("mid\u{0}dle", "with NUL", time: 10), change("\u{0}lead", "leading", time: 10)]
            #expect(try cloud.push(changes, to: "s").accepted.count == 3)
            #expect(Set(try cloud.changes(in: "s", after: 0, limit: 10).changes) == Set(changes))
            // The merge compares each key with its own stored change.
            let older = change("mid\u{0}dle", "older", time: 5)
            #expect(try cloud.push([older], to: "s").accepted == [older])
            #expect(Set(try cloud.changes(in: "s", after: 0, limit: 10).changes) == Set(changes))
        }
    }

    @Test("the remote refuses a change that breaks a quota and says what it holds", arguments: StorageKind.allCases)
    func cloudQuota(kind: StorageKind) throws {
        try withTemporaryDirectory { dir in
            let cloud = try kind.make(in: dir)
            try cloud.setLimits(QuotaLimits(totalBytes: 800, valueBytes: 700, keys: 2, keyNameBytes: 8), of: "s")
            let first = change("a", String(repeating: "x", count: 300), time: 10, device: "one")
            let second = change("b", String(repeating: "y", count: 300), time: 11, device: "two")
            #expect(try cloud.push([first], to: "s").refused.isEmpty)
            let outcome = try cloud.push([second], to: "s")
            #expect(outcome.accepted.isEmpty)
            #expect(outcome.refused.first?.change == second)
            #expect(outcome.refused.first?.current == nil)
            #expect(outcome.refused.first?.reason.contains("bytes") == true)
            // A value over the per-value limit, a long name, a third key, bytes that are not a property list.
            let tooBig = change("c", String(repeating: "z", count: 600), time: 12)
            let longName = change("123456789", "v", time: 12)
            var notPlist = change("d", "v", time: 12)
            notPlist.value = Data("not ( a plist".utf8)
            let refused = try cloud.push([tooBig, longName, notPlist], to: "s").refused.map(\.change.key)
            #expect(refused == ["c", "123456789", "d"])
            // Replacing a value by a smaller one is fine; its old bytes are freed.
            #expect(try cloud.push([change("a", "small", time: 13)], to: "s").refused.isEmpty)
            #expect(try cloud.push([second], to: "s").refused.isEmpty)
        }
    }

    @Test("replicas converge whatever the order, repetition and timing of deliveries")
    func convergence() async throws {
        // Each operation is one number: which replica, what it does, on which key, with what value.
        await propertyCheck(count: 40, input: Gen.int(in: 0...Int(Int32.max)).array(of: 5...60)) { operations in
            try await withTemporaryDirectory { dir in
                try runReplicas(operations, in: dir)
            }
        }
    }

    /// Three replicas with skewed clocks, one in-memory remote: local writes and deletes,
    /// pushes (sometimes twice), fetches applied in shuffled order with repeats, and offline
    /// periods; then everyone syncs. Every replica must end with the remote's values, and each
    /// key with the write of greatest stamp ever made to it.
    private func runReplicas(_ operations: [Int], in dir: TemporaryDirectory) throws {
        let now = Mutex<Int64>(1_000_000)
        let skews: [Int64] = [0, 40, -25]
        let replicas = try (0..<3).map { index in
            try KeyValueStore(path: dir.subdirectory("r\(index)") + "/store.sqlite") {
                Date(timeIntervalSince1970: Double(now.withLock { $0 } + skews[index]) / 1000)
            }
        }
        let cloud = MemoryCloudStorage()
        var online = [true, true, true]
        var cursors: [Int64] = [0, 0, 0]
        var written = [String: StampedChange]()  // the greatest stamp written to each key

        func push(_ replica: Int, twice: Bool) throws {
            let pending = replicas[replica].pendingChanges()
            var outcome = try cloud.push(pending, to: "default")
            if twice { outcome = try cloud.push(pending, to: "default") }
            #expect(outcome.refused.isEmpty)
            try replicas[replica].markPushed(outcome.accepted)
            try replicas[replica].forget(outcome.notStored)
        }
        func fetch(_ replica: Int, seed: Int) throws {
            let batch = try cloud.changes(in: "default", after: cursors[replica], limit: 1000)
            var deliveries = batch.changes + batch.changes.enumerated().filter { ($0.offset + seed) % 3 == 0 }.map(\.element)
            var generator = SeededGenerator(seed: UInt64(seed))
            deliveries.shuffle(using: &generator)
            for change in deliveries { try replicas[replica].applyExternal([change]) }
            cursors[replica] = batch.cursor
        }

        for operation in operations {
            let replica = operation % 3
            let action = (operation / 3) % 7
            let key = "k\((operation / 21) % 4)"
            let value = operation / 84
            now.withLock { $0 += Int64(operation % 3) }
            switch action {
            case 0, 1:
                try replicas[replica].put(.integer(value), forKey: key)
            case 2:
                if replicas[replica].entry(forKey: key) != nil { try replicas[replica].removeValue(forKey: key) }
            case 3, 4:
                if online[replica] { try push(replica, twice: action == 4) }
            case 5:
                if online[replica] { try fetch(replica, seed: value) }
            default:
                online[replica].toggle()
            }
            if action <= 2, let latest = replicas[replica].allChanges(forKey: key),
               written[key].map({ latest.stamp > $0.stamp }) ?? true {
                written[key] = latest
            }
        }
        for replica in 0..<3 { try push(replica, twice: false) }
        for replica in 0..<3 { try fetch(replica, seed: replica) }

        // The changes as they were made: a conflict kept with one is not the change.
        let remote = Dictionary(uniqueKeysWithValues: try cloud.changes(in: "default", after: 0, limit: 1000).changes.map { change in
            (change.key, StampedChange(key: change.key, value: change.value, type: change.type, stamp: change.stamp))
        })
        // The greatest-stamped write of each key wins; a deletion of a key the remote never
        // had leaves no row, so an older write pushed after it may stand.
        for (key, latest) in written {
            if latest.isTombstone {
                #expect(remote[key].map { $0.stamp <= latest.stamp } ?? true, "\(key): nothing newer than its last write")
            } else {
                #expect(remote[key] == latest, "\(key): the remote holds the greatest-stamped write")
            }
        }
        #expect(Set(remote.keys).isSubset(of: Set(written.keys)))
        for replica in replicas {
            let state = Dictionary(uniqueKeysWithValues: replica.allChanges().map { ($0.key, $0) })
            #expect(state == remote)
            #expect(replica.pendingChanges().isEmpty)
        }
    }
}

enum StorageKind: String, CaseIterable, CustomTestStringConvertible {
    case memory, sqlite
    var testDescription: String { rawValue }

    func make(in dir: TemporaryDirectory) throws -> any CloudStorage {
        switch self {
        case .memory: MemoryCloudStorage()
        case .sqlite: try SQLiteCloudStorage(path: dir.path + "/cloud.sqlite")
        }
    }
}

/// A change setting `key` to the string `text`.
func change(_ key: String, _ text: String, time: Int64, device: String = "a") -> StampedChange {
    let xml = try! PropertyListCodec.encodeXML(.string(text))
    return StampedChange(key: key, value: Data(xml), type: .string, stamp: ChangeStamp(time: time, counter: 0, device: device))
}

func value(_ store: KeyValueStore, _ key: String) throws -> String? {
    guard let entry = store.entry(forKey: key), case .string(let text) = try PropertyListCodec.decode(entry.xml) else { return nil }
    return text
}
