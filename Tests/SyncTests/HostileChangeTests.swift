import Foundation
import GRDB
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Synchronization
import Testing

/// Changes from elsewhere that break the change rule (stamps, keys, values): a replica refuses
/// them with a reason, keeps the rest, and its clock is never pinned or overflowed by them.
@Suite("Hostile changes", .hangGuard)
struct HostileChangeTests {
    /// 2026-11-22T00:00:00Z: the fixed clock the remotes below measure skew against.
    static let now: Int64 = 1_795_305_600_000
    static let tenYears: Int64 = 10 * 365 * 86_400_000

    private static func remoteStorage() -> MemoryCloudStorage {
        MemoryCloudStorage(admission: AdmissionPolicy(now: { HostileChangeTests.now }))
    }

    @Test("the clock never traps: at the counter's maximum it moves time on, and a stamp far ahead is not adopted")
    func clockBounds() {
        var clock = HybridLogicalClock(device: "a", last: ChangeStamp(time: 1000, counter: .max, device: "a"))
        let next = clock.stamp(physical: 1000)
        #expect(next == ChangeStamp(time: 1001, counter: 0, device: "a"))

        var pinned = HybridLogicalClock(device: "a")
        pinned.observe(ChangeStamp(time: 1 << 62, counter: .max, device: "evil"), physical: Self.now)
        pinned.observe(ChangeStamp(time: Self.now + Self.tenYears, counter: 0, device: "evil"), physical: Self.now)
        #expect(pinned.stamp(physical: Self.now + 1).time == Self.now + 1, "stamps beyond the skew are not adopted")
        pinned.observe(ChangeStamp(time: Self.now + 60_000, counter: 3, device: "b"), physical: Self.now)
        #expect(pinned.stamp(physical: Self.now + 2) > ChangeStamp(time: Self.now + 60_000, counter: 3, device: "b"),
                "a stamp within the skew is adopted")

        // A write to a key whose latest change is ahead still replaces it.
        var writer = HybridLogicalClock(device: "a")
        let ahead = ChangeStamp(time: Self.now + Self.tenYears, counter: .max, device: "zz")
        let stamp = writer.stamp(physical: Self.now, after: ahead)
        #expect(stamp > ahead && stamp.device == "a")
        #expect(writer.stamp(physical: Self.now + 5).time == Self.now + 5, "and the clock itself stays on time")
    }

    @Test("the stamp rule: time in range and within the skew, a non-negative counter, a plain device id")
    func stampRule() throws {
        let rule = StampRule()
        try rule.check(ChangeStamp(time: Self.now + 299_000, counter: 0, device: "device-1.x:y_z"), now: Self.now)
        let refused: [(ChangeStamp, String)] = [
            (ChangeStamp(time: Self.now + Self.tenYears, counter: 0, device: "a"), "ahead"),
            (ChangeStamp(time: 1 << 62, counter: .max, device: "a"), "outside 1970 to 9999"),
            (ChangeStamp(time: .min, counter: 0, device: "a"), "outside 1970 to 9999"),
            (ChangeStamp(time: .max, counter: 0, device: "a"), "outside 1970 to 9999"),
            (ChangeStamp(time: 5, counter: -1, device: "a"), "negative"),
            (ChangeStamp(time: 5, counter: 0, device: ""), "device id"),
            (ChangeStamp(time: 5, counter: 0, device: String(repeating: "d", count: 65)), "device id"),
            (ChangeStamp(time: 5, counter: 0, device: "a b"), "device id"),
        ]
        for (stamp, reason) in refused {
            #expect {
                try rule.check(stamp, now: Self.now)
            } throws: { error in
                String(describing: error).contains(reason)
            }
        }
        // The skew is the receiver's: a server configured for an hour takes what is 59 minutes ahead.
        try StampRule(skew: 3_600_000).check(ChangeStamp(time: Self.now + 3_540_000, counter: 0, device: "a"), now: Self.now)
    }

    @Test("a remote refuses a change stamped out of range or too far ahead, with its reason and what it holds, and keeps the others")
    func remoteRefusesStamps() throws {
        let storage = Self.remoteStorage()
        _ = try storage.push([change("k", "good", time: Self.now - 10)], to: "default")
        let outcome = try storage.push([
            change("k", "from 2036", time: Self.now + Self.tenYears),
            change("j", "overflow", time: 1 << 62),
            change("i", "before 1970", time: .min),
            change("fine", "fine", time: Self.now),
        ], to: "default")
        #expect(outcome.accepted.map(\.key) == ["fine"])
        #expect(outcome.refused.map(\.change.key) == ["k", "j", "i"])
        #expect(outcome.refused.allSatisfy { $0.reason.contains("invalid change stamp") }, "\(outcome.refused.map(\.reason))")
        #expect(outcome.refused.first?.current?.value == change("k", "good", time: 0).value, "the refusal carries the remote's value")
        let held = try storage.changes(in: "default", after: 0, limit: 100).changes
        #expect(held.map(\.key).sorted() == ["fine", "k"])
        #expect(held.allSatisfy { $0.stamp.time <= Self.now })
    }

    @Test("one key rule at the remote: NFC and NFD spellings are one key and one count, so no spelling bypasses the quota")
    func remoteNormalisesKeys() throws {
        let storage = Self.remoteStorage()
        try storage.setLimits(QuotaLimits(keys: 4), of: "default")
        var changes = [StampedChange]()
        for index in 0..<6 {
            changes.append(change("caf\u{E9}\(index)", "nfc", time: Self.now))
            changes.append(change("cafe\u{301}\(index)", "nfd", time: Self.now + 1))
        }
        let outcome = try storage.push(changes, to: "default")
        let held = try storage.changes(in: "default", after: 0, limit: 100).changes
        #expect(held.count == 4, "the key quota holds")
        #expect(held.allSatisfy { KeyName.isCanonical($0.key) && $0.key.utf8.count == "caf\u{E9}0".utf8.count })
        #expect(Set(held.map(\.key)).count == 4)
        #expect(outcome.refused.count == 4, "two keys' NFC and NFD changes are refused: the store is full")
        #expect(held.allSatisfy { $0.value == change("x", "nfd", time: 0).value }, "the later spelling's value wins, as one key")
    }

    @Test("a tombstone for a key the remote does not hold is stored, and an older value pushed after it is passed over")
    func unknownTombstones() throws {
        let storage = Self.remoteStorage()
        let tombstones = (0..<500).map { StampedChange.tombstone("never-\($0)", stamp: ChangeStamp(time: Self.now, counter: 0, device: "a")) }
        let outcome = try storage.push(tombstones, to: "default")
        #expect(outcome.accepted.count == 500 && outcome.refused.isEmpty && outcome.notStored.isEmpty)
        #expect(try storage.cursor(of: "default") == 500)
        #expect(try storage.changes(in: "default", after: 0, limit: 1000).changes == tombstones)
        // A value from before the deletion, pushed back by a mount that still held it.
        _ = try storage.push([change("never-0", "old", time: Self.now - 5)], to: "default")
        #expect(try storage.cursor(of: "default") == 500, "the older value does not pass the deletion")
        // A tombstone for a key the remote has is stored, as before.
        _ = try storage.push([change("k", "v", time: Self.now - 5)], to: "default")
        _ = try storage.push([.tombstone("k", stamp: ChangeStamp(time: Self.now, counter: 0, device: "a"))], to: "default")
        #expect(try storage.changes(in: "default", after: 500, limit: 10).changes.map(\.isTombstone) == [true])
    }

    @Test("a remote stores and counts a value's canonical form, whatever form was sent, and refuses one of another type")
    func remoteKeepsCanonicalValues() throws {
        let storage = Self.remoteStorage()
        let binary = try PropertyListCodec.encodeBinary(.dictionary(["b": .integer(2), "a": .string("x")]))
        let sent = StampedChange(key: "d", value: Data(binary), type: .dictionary, stamp: ChangeStamp(time: Self.now, counter: 0, device: "a"))
        let wrongType = StampedChange(key: "w", value: Data(binary), type: .string, stamp: ChangeStamp(time: Self.now, counter: 0, device: "a"))
        let outcome = try storage.push([sent, wrongType], to: "default")
        #expect(outcome.refused.map(\.change.key) == ["w"])
        let held = try #require(try storage.changes(in: "default", after: 0, limit: 10).changes.first)
        let canonical = try PropertyListCodec.encodeXML(.dictionary(["b": .integer(2), "a": .string("x")]))
        #expect(held.value == Data(canonical))
    }

    @Test("a mount refuses what it fetches outside the rule, reports it, applies the rest, and its clock stays on time")
    func fetchedChangesAreChecked() async throws {
        try await withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let events = EventRecorder()
            let hostile = [
                change("pinned", "2^62", time: 1 << 62),
                change("min", "Int64.min", time: .min),
                StampedChange(key: "bad", value: Data("<string>unclosed".utf8), type: .string,
                              stamp: ChangeStamp(time: 1000, counter: 0, device: "a")),
                change("good", "kept", time: 1000),
            ]
            let remote = ScriptedRemote(batch: ChangeBatch(changes: hostile, cursor: 4, complete: true))
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try await engine.synchronize()
            #expect(try value(store, "good") == "kept")
            #expect(store.entry(forKey: "pinned") == nil && store.entry(forKey: "min") == nil && store.entry(forKey: "bad") == nil)
            let refused = try #require(events.events.first { $0.reason == .refusedRemoteChange })
            #expect(refused.keys == ["bad", "min", "pinned"])
            #expect(refused.message?.contains("invalid change stamp") == true && refused.message?.contains("not a property list") == true,
                    "\(refused.message ?? "")")
            try store.put(.string("mine"), forKey: "later")
            let stamp = try #require(store.allChanges(forKey: "later")).stamp
            #expect(abs(stamp.time - Int64(Date().timeIntervalSince1970 * 1000)) < 60_000, "the local clock was not pinned: \(stamp)")
        }
    }

    @Test("a history mark a remote sends is kept only when it meets the rule: it goes back with every request")
    func hostileMarks() async throws {
        try await withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let good = change("good", "kept", time: Self.now)
            let oversized = HistoryMark(key: String(repeating: "k", count: HistoryMark.maximumKeyBytes + 1), cursor: 1, stamp: good.stamp)
            let remote = ScriptedRemote(batch: ChangeBatch(changes: [good], cursor: 1, complete: true, mark: oversized))
            try await SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)).synchronize()
            #expect(try value(store, "good") == "kept")
            #expect(try store.setting(.syncPosition) == "1", "the cursor, without the mark")
            let fitting = HistoryMark(key: "good", cursor: 1, stamp: good.stamp)
            let honest = ScriptedRemote(batch: ChangeBatch(changes: [good], cursor: 1, complete: true, mark: fitting))
            try await withTemporaryDirectory { otherDir in
                let other = try makeStore(in: otherDir)
                try await SyncEngine(store: other, remote: honest, remoteStore: "default", applier: StoreApplier(store: other)).synchronize()
                #expect(try other.setting(.syncPosition)?.contains(#""key":"good""#) == true)
            }
        }
    }
}

/// A remote that serves one fixed batch and accepts every push: what a remote written by
/// anything at all could hand a mount. Its other calls reach an empty log.
final class ScriptedRemote: ChangeLogWrapper {
    let base: any ChangeLog = memoryRemote(MemoryCloudStorage())
    private let batch: ChangeBatch
    init(batch: ChangeBatch) { self.batch = batch }
    var description: String { "scripted" }
    func identity() async throws(CloudError) -> String { "scripted" }
    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        PushOutcome(accepted: changes)
    }
    func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) async throws(CloudError) -> ChangeBatch {
        cursor < batch.cursor ? batch : ChangeBatch(changes: [], cursor: cursor, complete: true)
    }
    func waitForChanges(in store: String, after cursor: Int64, mark: HistoryMark?, timeout: Duration) async throws(CloudError) -> Bool {
        do { try await Task.sleep(for: timeout) } catch {}
        return false
    }
}

/// An applier whose first `failures` applies fail, as a store that cannot write would.
final class FailingApplier: ExternalChangeApplying {
    private let base: StoreApplier
    private let remaining: Mutex<Int>
    init(store: KeyValueStore, failures: Int) {
        base = StoreApplier(store: store)
        remaining = Mutex(failures)
    }
    func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        let fail = remaining.withLock { remaining in
            defer { remaining -= 1 }
            return remaining > 0
        }
        if fail { throw StoreError.database("disk I/O error (test)") }
        return try await base.apply(changes, mode: mode)
    }
}

@Suite("Apply failures", .hangGuard)
struct ApplyFailureTests {
    @Test("a remote change that fails to apply is reported and applied on a later round, never skipped")
    func failedApplyIsRetried() async throws {
        try await withTemporaryDirectory { dir in
            let cloud = MemoryCloudStorage()
            _ = try cloud.push([change("k", "from elsewhere", time: 1000, device: "other")], to: "default")
            let store = try makeStore(in: dir)
            let events = EventRecorder()
            let engine = SyncEngine(store: store, remote: memoryRemote(cloud), remoteStore: "default", applier: FailingApplier(store: store, failures: 1)) {
                events.record($0)
            }
            await #expect(throws: StoreError.self) { try await engine.synchronize() }
            #expect(store.entry(forKey: "k") == nil)
            #expect(events.events.map(\.reason) == [.applyFailed])
            try await engine.synchronize()
            #expect(try value(store, "k") == "from elsewhere", "the next round fetched the change again")
        }
    }
}

@Suite("Same stamps", .hangGuard)
struct SameStampTests {
    @Test("another value under a stamp the remote already holds is refused, not reported accepted")
    func sameStampOtherValue() throws {
        let storage = MemoryCloudStorage()
        let first = change("k", "first", time: 1000)
        _ = try storage.push([first], to: "default")
        #expect(try storage.push([first], to: "default").accepted == [first], "the same change again is a repeat")
        let impostor = change("k", "impostor", time: 1000)
        let outcome = try storage.push([impostor], to: "default")
        #expect(outcome.accepted.isEmpty)
        #expect(outcome.refused.first?.current == first)
        #expect(try storage.changes(in: "default", after: 0, limit: 10).changes == [first])
    }
}

@Suite("Rows written by anyone", .hangGuard)
struct UnreadableRowTests {
    /// A store in `dir` synced by an engine with the file remote `cloud`, its events recorded.
    private func mount(in dir: TemporaryDirectory, on cloud: SQLiteCloudStorage) throws -> (KeyValueStore, SyncEngine, EventRecorder) {
        let store = try makeStore(in: dir)
        let events = EventRecorder()
        let remote = EmbeddedChangeLog(description: "file", clock: ContinuousClock()) { cloud }
        return (store, SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }, events)
    }

    /// A file remote in `dir` whose row of `k` ("theirs", from another device) another program
    /// broke: its device id is no longer UTF-8. The queue writes to the file behind its back.
    private func cloudWithUnreadableRow(in dir: TemporaryDirectory) async throws -> (SQLiteCloudStorage, DatabaseQueue) {
        let path = dir.path + "/cloud.sqlite"
        let cloud = try SQLiteCloudStorage(path: path)
        _ = try await cloud.push([change("k", "theirs", time: 1000, device: "other")], to: "default")
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in try db.execute(sql: "UPDATE cloudChange SET device = X'FF00' WHERE key = 'k'") }
        return (cloud, queue)
    }

    @Test("file-remote rows of the wrong type or not UTF-8 are reported and passed over: no crash, the rest applied")
    func badlyTypedRows() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir.path + "/cloud.sqlite"
            let cloud = try SQLiteCloudStorage(path: path)
            _ = try await cloud.push([change("good", "kept", time: 1000, device: "other")], to: "default")
            let value = try #require(try cloud.changes(in: "default", after: 0, limit: 10).changes.first?.value)
            // What another program (or an older kvsfs) could leave in the shared file.
            let queue = try DatabaseQueue(path: path)
            try await queue.write { db in
                let rows: [(String, DatabaseValueConvertible, DatabaseValueConvertible, DatabaseValueConvertible)] = [
                    ("counter-too-big", 1000, 4_294_967_296, "evil"),
                    ("time-not-a-number", "abc", 0, "evil"),
                    ("device-not-utf8", 1000, 0, Data([0xFF, 0x00])),
                ]
                for (index, row) in rows.enumerated() {
                    try db.execute(sql: "INSERT INTO cloudChange (store, key, value, type, time, counter, device, cursor) VALUES ('default', ?, ?, 'string', ?, ?, ?, ?)",
                                   arguments: [row.0, value, row.1, row.2, row.3, 10 + index])
                }
                try db.execute(sql: "INSERT INTO cloudChange (store, key, value, type, time, counter, device, cursor) VALUES ('default', CAST(X'FF' AS TEXT), ?, 'string', 1000, 0, 'evil', 13)", arguments: [value])
                try db.execute(sql: "INSERT INTO cloudChange (store, key, value, type, time, counter, device, cursor) VALUES ('default', 'after', ?, 'string', 1000, 0, 'other', 14)", arguments: [value])
                try db.execute(sql: "UPDATE cloudStore SET cursor = 14 WHERE id = 'default'")
            }
            let (store, engine, events) = try mount(in: dir, on: cloud)
            try await engine.synchronize()
            #expect(store.keys() == ["after", "good"])
            let refused = try #require(events.events.first { $0.reason == .refusedRemoteChange })
            #expect(refused.message?.components(separatedBy: "cannot be read").count == 5, "\(refused.message ?? "")")
            try await engine.synchronize()
            #expect(events.events.filter { $0.reason == .refusedRemoteChange }.count == 1, "the cursor went past them")
        }
    }

    @Test("a remote's word that it could not judge a change counts only for a change pushed, and its reason goes into the event cut short")
    func inventedDeferrals() async throws {
        try await withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let events = EventRecorder()
            let remote = DeferringRemote(memoryRemote(MemoryCloudStorage()), deferring: "k")
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try store.put(.string("mine"), forKey: "k")
            try await engine.synchronize()
            let deferred = try #require(events.events.first { $0.reason == .pushDeferred })
            #expect(deferred.keys == ["k"], "nothing of the change that was never pushed")
            #expect((deferred.message?.count ?? 0) < 1100, "the 100,000-character reason is cut")
            #expect(store.syncState(forKey: "k") == .pending && store.entry(forKey: "k") != nil)
        }
    }

    /// What a remote says it holds for a refused key: a change of another key, or a value that
    /// is no property list.
    enum MadeUpCurrent: String, CaseIterable, Sendable {
        case otherKey, notAPropertyList
    }

    @Test("a push's answer counts only for changes pushed; a refusal rolls back only to a change of its key that meets the rule, or is not judged",
          arguments: MadeUpCurrent.allCases)
    func madeUpAnswers(_ current: MadeUpCurrent) async throws {
        try await withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let cloud = MemoryCloudStorage()
            try store.put(.string("synced"), forKey: "kept")
            try await SyncEngine(store: store, remote: memoryRemote(cloud), remoteStore: "default", applier: StoreApplier(store: store)) { _ in }.synchronize()
            let kept = try #require(store.allChanges(forKey: "kept"))

            let now = AdmissionPolicy.systemTime()
            let said = switch current {
            case .otherKey: change("elsewhere", "made up", time: now)
            case .notAPropertyList: StampedChange(key: "k", value: Data("made up".utf8), type: .string,
                                                  stamp: ChangeStamp(time: now, counter: 0, device: "liar"))
            }
            let events = EventRecorder()
            let remote = LyingRemote(memoryRemote(cloud), victim: kept, refusing: "k", saying: said)
            let engine = SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)) { events.record($0) }
            try store.put(.string("mine"), forKey: "k")
            try await engine.synchronize()

            #expect(try value(store, "kept") == "synced" && store.syncState(forKey: "kept") == .synced,
                    "a change never pushed is neither rolled back nor forgotten")
            #expect(try value(store, "k") == "mine" && store.syncState(forKey: "k") == .pending, "k keeps its value, to push again")
            #expect(store.entry(forKey: "elsewhere") == nil)
            #expect(!events.events.contains { $0.reason == .quotaViolation }, "\(events.events)")
            let unfounded = try #require(events.events.first { $0.reason == .refusedRemoteChange })
            #expect(unfounded.keys.isEmpty && unfounded.message?.contains("\"kept\"") == true, "\(unfounded)")
            let deferred = try #require(events.events.first { $0.reason == .pushDeferred })
            #expect(deferred.keys == ["k"] && deferred.message?.contains("made up; but what the remote holds") == true, "\(deferred)")
            try await engine.synchronize()
            #expect(events.events.filter { $0.reason == .pushDeferred }.count == 1, "said once, not once a round")
            #expect(try value(store, "k") == "mine" && store.syncState(forKey: "k") == .pending)
        }
    }

    @Test("a change to a key whose file-remote row cannot be read is refused as not judged, even when it breaks a rule as well")
    func ruleBrokenOverAnUnreadableRow() async throws {
        try await withTemporaryDirectory { dir in
            let (cloud, _) = try await cloudWithUnreadableRow(in: dir)
            let notAPropertyList = StampedChange(key: "k", value: Data("not a property list".utf8), type: .string,
                                                 stamp: ChangeStamp(time: 2000, counter: 0, device: "me"))
            let outcome = try await cloud.push([notAPropertyList, change("other", "fine", time: 2000, device: "me")], to: "default")
            #expect(outcome.accepted.map(\.key) == ["other"])
            #expect(outcome.refused.map(\.rowUnreadable) == [true], "\(outcome.refused)")
            #expect(outcome.refused.first?.current == nil)
        }
    }

    @Test("a local write to a key whose file-remote row cannot be read stays, pending and reported once, and goes through once the row is mended")
    func writeOverAnUnreadableRow() async throws {
        try await withTemporaryDirectory { dir in
            let (cloud, queue) = try await cloudWithUnreadableRow(in: dir)
            let (store, engine, events) = try mount(in: dir, on: cloud)
            try await engine.synchronize()

            try store.put(.string("mine"), forKey: "k")
            try await engine.synchronize()
            let mine = try PropertyListCodec.encodeXML(.string("mine"))
            #expect(store.entry(forKey: "k")?.xml == mine, "the write stays")
            #expect(store.syncState(forKey: "k") == .pending)
            let deferred = events.events.filter { $0.reason == .pushDeferred }
            #expect(deferred.map(\.keys) == [["k"]])
            #expect(deferred.first?.message?.contains("the remote's row for this key cannot be read") == true, "\(deferred)")
            #expect(!events.events.contains { $0.reason == .quotaViolation })
            try await engine.synchronize()
            #expect(store.entry(forKey: "k")?.xml == mine)
            #expect(events.events.filter { $0.reason == .pushDeferred }.count == 1, "said once, not once a round")

            try await queue.write { db in try db.execute(sql: "UPDATE cloudChange SET device = 'other' WHERE key = 'k'") }
            try await engine.synchronize()
            #expect(store.syncState(forKey: "k") == .synced)
            let held = try #require(try cloud.changes(in: "default", after: 0, limit: 10).changes.first { $0.key == "k" })
            #expect(held.stamp.device == store.deviceID && held.value == Data(mine), "the remote holds the write")
        }
    }
}

@Suite("What a push may cost", .hangGuard)
struct PushCostTests {
    /// A binary property list: a 230-byte string, an array of 500 references to it, and an
    /// array of 500 references to that: 1.5 KB that decodes to about 60 MB.
    static func sharedReferences() -> [UInt8] {
        func twoBytes(_ value: Int) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }
        let string = [0x5F, 0x11, 0x00, 0xE6] + [UInt8](repeating: UInt8(ascii: "x"), count: 230)
        let inner = [0xAF, 0x11] + twoBytes(500) + [UInt8](repeating: 0, count: 500)
        let outer = [0xAF, 0x11] + twoBytes(500) + [UInt8](repeating: 1, count: 500)
        var bytes = Array("bplist00".utf8)
        var offsets = [UInt8]()
        for object in [string, inner, outer] {
            offsets += twoBytes(bytes.count)
            bytes += object
        }
        let table = bytes.count
        bytes += offsets
        bytes += [0, 0, 0, 0, 0, 0, 2, 1]
        for field in [3, 2, table] { bytes += (0..<8).map { UInt8(truncatingIfNeeded: UInt64(field) >> (56 - 8 * $0)) } }
        return bytes
    }

    @Test("a push of values that expand through shared references is refused within a bounded cost")
    func sharedReferencesAreBounded() throws {
        let storage = MemoryCloudStorage()
        let bomb = Data(Self.sharedReferences())
        let changes = (0..<50).map { StampedChange(key: "k\($0)", value: bomb, type: .array, stamp: ChangeStamp(time: 1000, counter: 0, device: "a")) }
        let started = ContinuousClock.now
        let outcome = try storage.push(changes, to: "default")
        #expect(outcome.accepted.isEmpty && outcome.refused.count == 50)
        #expect(outcome.refused.allSatisfy { $0.reason.contains("allowance") || $0.reason.contains("per-value limit") }, "\(outcome.refused.first?.reason ?? "")")
        #expect(ContinuousClock.now - started < .seconds(20), "50 × 60 MB were not built")
    }

    @Test("a write to a key whose stamp is ahead of every clock succeeds it, and the remote takes that stamp")
    func successorOfAStampAhead() throws {
        let now = HostileChangeTests.now
        let reading = Mutex(now + HostileChangeTests.tenYears)
        let storage = MemoryCloudStorage(admission: AdmissionPolicy(now: { reading.withLock { $0 } }))
        // Accepted while the remote's own clock read ten years ahead; then its clock is put right.
        let ahead = change("k", "ahead", time: now + HostileChangeTests.tenYears)
        #expect(try storage.push([ahead], to: "default").refused.isEmpty)
        reading.withLock { $0 = now }
        var clock = HybridLogicalClock(device: "b")
        let next = clock.stamp(physical: now, after: ahead.stamp)
        let write = StampedChange(key: "k", value: change("k", "mine", time: 0).value, type: .string, stamp: next)
        let outcome = try storage.push([write, change("j", "ahead too", time: now + HostileChangeTests.tenYears)], to: "default")
        #expect(outcome.accepted == [write], "the successor of the key's stamp is taken")
        #expect(outcome.refused.map(\.change.key) == ["j"], "a stamp as far ahead for another key is not")
        #expect(try storage.changes(in: "default", after: 0, limit: 10).changes == [write])
    }
}

/// A remote that makes up its answers to pushes: each push of `key` (which it does not store)
/// is refused with `current` as what it holds, and every answer also refuses `victim`, a
/// change it was not pushed (a remote the mount synced with knows its key and stamp).
private struct LyingRemote: ChangeLogWrapper {
    let base: any ChangeLog
    let victim: StampedChange
    let key: String
    let current: StampedChange

    init(_ base: any ChangeLog, victim: StampedChange, refusing key: String, saying current: StampedChange) {
        self.base = base
        self.victim = victim
        self.key = key
        self.current = current
    }

    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        var outcome = try await base.push(changes.filter { $0.key != key }, to: store, mark: mark)
        outcome.refused += changes.filter { $0.key == key }.map { Refusal(change: $0, current: current, reason: "made up") }
        outcome.refused.append(Refusal(change: victim, current: nil, reason: "made up"))
        return outcome
    }
}

/// A remote that answers every push of `key` as not judged (its row unreadable), with a reason
/// of 100,000 characters, and adds to each answer such a refusal of a change never pushed.
private struct DeferringRemote: ChangeLogWrapper {
    let base: any ChangeLog
    let key: String
    init(_ base: any ChangeLog, deferring key: String) {
        self.base = base
        self.key = key
    }

    func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) async throws(CloudError) -> PushOutcome {
        var outcome = try await base.push(changes.filter { $0.key != key }, to: store, mark: mark)
        let reason = String(repeating: "x", count: 100_000)
        let ghost = change("ghost", "never pushed", time: 1000)
        outcome.refused += (changes.filter { $0.key == key } + [ghost]).map {
            Refusal(change: $0, current: nil, reason: reason, rowUnreadable: true)
        }
        return outcome
    }
}
