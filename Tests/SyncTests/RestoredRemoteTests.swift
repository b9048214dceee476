import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// A remote restored from a backup, then written to by other mounts before this one looks:
/// its cursor alone no longer shows that its history is not the one the mount saw.
@Suite("A remote restored from a backup", .hangGuard)
struct RestoredRemoteTests {
    typealias Device = SyncEngineTests.Device

    /// A storage that can be put back to a backup, a remote on it for each device, device `a`,
    /// and the backup taken once `a` has pushed `early`.
    private func backedUp(in dir: TemporaryDirectory) async throws
        -> (storage: RestorableStorage, backup: MemoryCloudStorage, a: Device, remote: any ChangeLog) {
        let (storage, backup, a, remote, _) = try await backedUpBehindLine(in: dir)
        return (storage, backup, a, remote)
    }

    /// The same, `a` reaching the remote through `line`, which can cut it off.
    private func backedUpBehindLine(in dir: TemporaryDirectory) async throws
        -> (storage: RestorableStorage, backup: MemoryCloudStorage, a: Device, remote: any ChangeLog, line: InterruptibleRemote) {
        let (storage, remote) = restorable()
        let line = InterruptibleRemote(remote)
        let a = try Device("a", in: dir, remote: line)
        try a.store.put(.string("before"), forKey: "early")
        try await a.engine.synchronize()
        return (storage, storage.snapshot(), a, remote, line)
    }

    /// A storage that can be put back to a backup, and a remote on it.
    private func restorable() -> (storage: RestorableStorage, remote: any ChangeLog) {
        let storage = RestorableStorage(MemoryCloudStorage(identity: "same"))
        return (storage, EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage })
    }

    /// Cuts `device` off (its round fails: a gap), restores `backup`, and has a new device b
    /// write `keys` (each its name as value), then "shared" ("from b") with a later stamp than
    /// any before; then puts `device` back online.
    private func restore(_ backup: MemoryCloudStorage, to storage: RestorableStorage, cutting device: Device,
                         off line: InterruptibleRemote, whileB keys: [String], in dir: TemporaryDirectory,
                         remote: any ChangeLog) async throws {
        line.setOnline(false)
        await #expect(throws: (any Error).self) { try await device.engine.synchronize() }
        storage.restore(backup.snapshot())
        try await Task.sleep(for: .milliseconds(5))  // b's stamps after every one before
        let b = try Device("b", in: dir, remote: remote)
        try await b.engine.synchronize()
        for key in keys { try b.store.put(.string(key), forKey: key) }
        try await b.engine.synchronize()
        try b.store.put(.string("from b"), forKey: "shared")
        try await b.engine.synchronize()
        await b.engine.stopAndWait()
        line.setOnline(true)
    }

    /// The same, then `a` pushes five more keys.
    private func restoredAfterLatePushes(in dir: TemporaryDirectory) async throws
        -> (storage: RestorableStorage, backup: MemoryCloudStorage, a: Device, remote: any ChangeLog) {
        let (storage, backup, a, remote) = try await backedUp(in: dir)
        for index in 0..<5 { try a.store.put(.integer(index), forKey: "late\(index)") }
        try await a.engine.synchronize()
        return (storage, backup, a, remote)
    }

    @Test("a mount finds it out even when others have written past its cursor, and pushes back what it lost")
    func foundOutPastTheCursor() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await restoredAfterLatePushes(in: dir)
            await a.engine.stopAndWait()
            storage.restore(backup.snapshot())
            // Another mount writes ten keys into the restored history: its cursor passes a's (6).
            let b = try Device("b", in: dir, remote: remote)
            for index in 0..<10 { try b.store.put(.integer(index), forKey: "b\(index)") }
            try await b.engine.synchronize()
            #expect(try storage.cursor(of: "default") == 11)

            try await a.engine.synchronize()
            let held = Set(try storage.changes(in: "default", after: 0, limit: 100).changes.map(\.key))
            #expect(held.isSuperset(of: (0..<5).map { "late\($0)" }), "a's lost changes are back on the remote: \(held.sorted())")
            #expect(Set(a.store.keys()).isSuperset(of: (0..<10).map { "b\($0)" }), "a has every change b made: \(a.store.keys())")
            #expect(a.events.events.contains { $0.reason == .remoteReset }, "\(a.events.events)")
        }
    }

    @Test("one mount finding it out renews the remote's identity, and every other mount resynchronises")
    func othersFollow() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await restoredAfterLatePushes(in: dir)
            // d saw the history up to a's change of "shared" at cursor 7: that is its mark.
            try a.store.put(.string("from a"), forKey: "shared")
            try await a.engine.synchronize()
            let d = try Device("d", in: dir, remote: remote)
            try await d.engine.synchronize()
            #expect(d.text("shared") == "from a")
            await d.engine.stopAndWait()
            try a.store.put(.string("last"), forKey: "a-last")
            try await a.engine.synchronize()
            await a.engine.stopAndWait()
            storage.restore(backup.snapshot())
            // b writes past d's cursor (7) and, last, "shared" again: d's mark still fits (a later
            // change of its key at a later cursor), so d alone cannot tell.
            let b = try Device("b", in: dir, remote: remote)
            for index in 0..<10 { try b.store.put(.integer(index), forKey: "b\(index)") }
            try await b.engine.synchronize()
            try b.store.put(.string("from b"), forKey: "shared")
            try await b.engine.synchronize()
            await b.engine.stopAndWait()

            try await a.engine.synchronize()  // a's mark ("a-last" at 8) does not fit: it resynchronises
            #expect(try storage.identity() != "same", "the identity was renewed")
            try await d.engine.synchronize()
            #expect(Set(d.store.keys()).isSuperset(of: (0..<10).map { "b\($0)" }), "d has every change b made: \(d.store.keys())")
            #expect(d.events.events.contains { $0.reason == .remoteReset }, "\(d.events.events)")
            #expect(d.text("shared") == "from b")
        }
    }

    /// The restore no mark shows: a's mark is its change of "shared", which b, in the restored
    /// history, writes again past a's cursor. No mount finds the restore out by its mark, so
    /// nobody renews the identity; a, cut off while the remote was restored, audits the
    /// remote after that gap and finds its own change missing.
    @Test("after a gap, a mount finds out a restore that no mark shows, and pushes back what the remote lost")
    func foundOutAfterAGap() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote, line) = try await backedUpBehindLine(in: dir)
            try a.store.put(.string("late"), forKey: "late")
            try a.store.put(.string("from a"), forKey: "shared")
            try await a.engine.synchronize()
            #expect(a.store.syncState(forKey: "late") == .synced)

            // b writes "shared" at cursor 4: a's mark ("shared" at 3) fits the restored history.
            try await restore(backup, to: storage, cutting: a, off: line, whileB: ["b0", "b1"], in: dir, remote: remote)
            #expect(try storage.identity() == "same", "no mark showed the restore")
            try await a.engine.synchronize()
            let held = try storage.changes(in: "default", after: 0, limit: 100).changes
            #expect(held.contains { $0.key == "late" && $0.value != nil }, "a pushed back the change the remote lost: \(held.map(\.key))")
            #expect(a.text("shared") == "from b" && a.text("b1") == "b1", "a took in b's changes")
            let reset = a.events.events.first { $0.reason == .remoteReset }
            #expect(reset?.message?.contains("the remote lost changes it had accepted: \"late\" (1 in all)") == true, "\(a.events.events)")
            #expect(try storage.identity() != "same", "a renewed the identity: b follows")
        }
    }

    /// The same restore, where the only change d fetched past the backup was written again by
    /// b in the restored history: d lost nothing, but b's first change sits before d's cursor.
    @Test("after a gap, a mount that lost nothing takes in what the restored remote holds before its cursor")
    func catchUpAfterAGap() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, remote) = restorable()
            let line = InterruptibleRemote(remote)
            let a = try Device("a", in: dir, remote: remote)
            let d = try Device("d", in: dir, remote: line)
            try a.store.put(.string("before"), forKey: "early")
            try await a.engine.synchronize()
            try await d.engine.synchronize()
            let backup = storage.snapshot()
            try a.store.put(.string("from a"), forKey: "shared")
            try await a.engine.synchronize()
            await a.engine.stopAndWait()
            try await d.engine.synchronize()
            #expect(d.text("shared") == "from a")  // d's mark: "shared" at cursor 2

            try await restore(backup, to: storage, cutting: d, off: line, whileB: ["b0"], in: dir, remote: remote)
            try await d.engine.synchronize()
            #expect(d.text("b0") == "b0", "d took in b's change at cursor 2, before its own cursor")
            #expect(d.text("shared") == "from b")
            #expect(!d.events.events.contains { $0.reason == .remoteReset }, "d lost nothing: \(d.events.events)")
            #expect(d.events.events.contains { $0.reason == .serverChange && $0.keys.contains("b0") }, "\(d.events.events)")
        }
    }

    /// The audit must not take the place of what a fetch finds out: a restored history that
    /// ends before the mount's cursor, where it lost nothing the mount holds as synced.
    @Test("after a gap, a restored history that ends before the mount's cursor is a remote-reset, even with nothing lost")
    func historyEndingBeforeTheCursor() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote, line) = try await backedUpBehindLine(in: dir)
            let e = try Device("e", in: dir, remote: remote)
            for value in ["e1", "e2"] {
                try e.store.put(.string(value), forKey: "shared")
                try await e.engine.synchronize()
            }
            await e.engine.stopAndWait()
            try await a.engine.synchronize()
            #expect(a.text("shared") == "e2")  // a's cursor: 3

            // b writes "shared" at cursor 2, newer than e2: a lost nothing, but its cursor is past the end.
            try await restore(backup, to: storage, cutting: a, off: line, whileB: [], in: dir, remote: remote)
            try await a.engine.synchronize()
            #expect(a.text("shared") == "from b")
            let reset = a.events.events.first { $0.reason == .remoteReset }
            #expect(reset?.message?.contains("history ends at 2") == true, "\(a.events.events)")
            #expect(try storage.identity() != "same", "a renewed the identity: its other mounts follow")
        }
    }

    @Test("a gap in which the remote lost nothing gives no remote-reset")
    func gapWithoutLoss() async throws {
        try await withTemporaryDirectory { dir in
            let storage = MemoryCloudStorage(identity: "same")
            let line = InterruptibleRemote(memoryRemote(storage))
            let a = try Device("a", in: dir, remote: line)
            let b = try Device("b", in: dir, remote: memoryRemote(storage))
            for index in 0..<3 { try a.store.put(.integer(index), forKey: "a\(index)") }
            try await a.engine.synchronize()
            try a.store.removeValue(forKey: "a0")
            try await a.engine.synchronize()
            #expect(a.store.syncState(forKey: "a0") == .synced, "a synced tombstone")
            line.setOnline(false)
            await #expect(throws: (any Error).self) { try await a.engine.synchronize() }
            try await Task.sleep(for: .milliseconds(5))  // b's stamp after a's
            try b.store.put(.string("newer"), forKey: "a1")
            try await b.engine.synchronize()
            line.setOnline(true)
            try await a.engine.synchronize()
            #expect(a.text("a1") == "newer")
            #expect(!a.events.events.contains { $0.reason == .remoteReset }, "\(a.events.events)")
            #expect(try storage.identity() == "same")
        }
    }

    @Test("replacing a store's values by the remote's is an explicit call: it drops what the remote lacks, pending writes included")
    func replaceIsExplicit() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await restoredAfterLatePushes(in: dir)
            await a.engine.stopAndWait()
            storage.restore(backup.snapshot())
            let offline = InterruptibleRemote(remote)
            let b = try Device("b", in: dir, remote: offline)
            try await b.engine.synchronize()
            offline.setOnline(false)
            try b.store.put(.string("pending"), forKey: "unsent")
            try b.store.put(.string("changed"), forKey: "early")
            // b's writes stay pending: its background rounds would push them once it is online.
            await b.engine.stopAndWait()
            offline.setOnline(true)
            try await a.engine.replaceWithRemote()
            #expect(a.store.keys() == ["early"], "a holds what the restored remote holds")
            #expect(a.text("early") == "before")
            #expect(a.store.pendingChanges().isEmpty)
            #expect(a.events.events.last?.reason == .remoteReset)
            #expect(a.events.events.last?.message?.contains("5 keys changed, 5 of them removed") == true, "\(a.events.events)")
            // b's pending writes and a newer local value give way too.
            try await b.engine.replaceWithRemote()
            #expect(b.text("early") == "before" && b.store.entry(forKey: "unsent") == nil && b.store.pendingChanges().isEmpty)
        }
    }

    /// A mount deletes a key the restored remote lacks: the deletion must be kept there, or the
    /// other mount, which still holds the value and pushes back what the remote lost, brings
    /// the key back to life on every mount.
    @Test("a deletion made while a restored remote lacked the key stays a deletion when another mount pushes the value back")
    func deletionOfLostKeyStays() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await backedUp(in: dir)
            try a.store.put(.string("doomed"), forKey: "k")
            try await a.engine.synchronize()
            let b = try Device("b", in: dir, remote: remote)
            try await b.engine.synchronize()
            #expect(b.text("k") == "doomed")
            await a.engine.stopAndWait()
            await b.engine.stopAndWait()

            storage.restore(backup.snapshot())  // the remote lacks k
            try a.store.removeValue(forKey: "k")
            try await a.engine.synchronize()  // finds the restore out, and pushes the deletion
            try await b.engine.synchronize()  // finds it out too, and pushes back k's value
            try await a.engine.synchronize()
            try await b.engine.synchronize()
            #expect(a.store.entry(forKey: "k") == nil, "the deletion a acknowledged holds on a")
            #expect(b.store.entry(forKey: "k") == nil, "and reaches b")
            #expect(try storage.changes(in: "default", after: 0, limit: 100).changes.first { $0.key == "k" }?.isTombstone == true)
        }
    }

    /// A removal the restore lost: the restored remote holds no row of the key. Were that taken
    /// for the removal being there, the other mount, which still holds the value and pushes
    /// back what the remote lost, would bring the key back to life on every mount.
    @Test("a deletion the restore lost is pushed back, and stays a deletion when another mount pushes the value back")
    func lostDeletionPushedBack() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await backedUp(in: dir)
            let b = try Device("b", in: dir, remote: remote)
            try b.store.put(.string("doomed"), forKey: "k")
            try await b.engine.synchronize()
            try await a.engine.synchronize()
            #expect(a.text("k") == "doomed")
            await b.engine.stopAndWait()  // b never fetches the deletion before the restore
            try a.store.removeValue(forKey: "k")
            try await a.engine.synchronize()
            await a.engine.stopAndWait()

            storage.restore(backup.snapshot())  // the remote lacks k: b's value and a's deletion
            try await a.engine.synchronize()  // finds the restore out first
            try await b.engine.synchronize()  // finds it out too, and pushes back k's value
            try await a.engine.synchronize()
            try await b.engine.synchronize()
            #expect(a.store.entry(forKey: "k") == nil, "the deletion a acknowledged holds on a")
            #expect(b.store.entry(forKey: "k") == nil, "and reaches b, which holds \(String(describing: b.store.allChanges(forKey: "k")))")
            #expect(try storage.changes(in: "default", after: 0, limit: 100).changes.first { $0.key == "k" }?.isTombstone == true)
        }
    }

    /// A storage that can be put back to a backup, whose store holds at most 1,000 bytes (a
    /// 1,200-byte write is refused), and device `a` on it.
    private func quotaLimited(in dir: TemporaryDirectory) throws -> (storage: RestorableStorage, a: Device) {
        let (storage, remote) = restorable()
        try storage.setLimits(QuotaLimits(totalBytes: 1000), of: "default")
        return (storage, try Device("a", in: dir, remote: remote))
    }

    /// A write the remote refused was rolled back to a tombstone the remote never accepted: a
    /// resynchronisation has nothing of it to push back.
    @Test("a resynchronisation pushes back no deletion the remote never accepted, such as a refused write's rollback")
    func refusedRollbackStaysLocal() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, a) = try quotaLimited(in: dir)
            try a.store.put(.string("before"), forKey: "early")
            try await a.engine.synchronize()
            let backup = storage.snapshot()
            try a.store.put(.string(String(repeating: "b", count: 1200)), forKey: "big")
            try await a.engine.synchronize()
            #expect(a.store.syncState(forKey: "big") == .refused)
            try a.store.put(.string("late"), forKey: "late")
            try await a.engine.synchronize()
            await a.engine.stopAndWait()

            storage.restore(backup.snapshot())
            try await a.engine.synchronize()  // the history ends before a's cursor: a resynchronises
            #expect(a.events.events.contains { $0.reason == .remoteReset }, "\(a.events.events)")
            let held = try storage.changes(in: "default", after: 0, limit: 100).changes.map(\.key)
            #expect(held.sorted() == ["early", "late"], "only what the remote had accepted is pushed back: \(held)")
            #expect(a.events.events.filter { $0.reason == .quotaViolation }.count == 1)
        }
    }

    /// A refused write is rolled back to the remote's own change, here its removal: that removal
    /// is the remote's, and a restore that brings back an older value lost it.
    @Test("a removal a refused write was rolled back to is pushed back when a restore brings back an older value")
    func rolledBackToRemovalPushedBack() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, a) = try quotaLimited(in: dir)
            try a.store.put(.string("old"), forKey: "k")
            try await a.engine.synchronize()
            let backup = storage.snapshot()
            try a.store.removeValue(forKey: "k")
            try await a.engine.synchronize()
            try a.store.put(.string(String(repeating: "b", count: 1200)), forKey: "k")
            try await a.engine.synchronize()
            #expect(a.store.syncState(forKey: "k") == .refused && a.store.entry(forKey: "k") == nil, "rolled back to the removal")
            await a.engine.stopAndWait()

            storage.restore(backup.snapshot())  // k holds "old" again
            try await a.engine.synchronize()
            #expect(a.store.entry(forKey: "k") == nil)
            #expect(try storage.changes(in: "default", after: 0, limit: 100).changes.first { $0.key == "k" }?.isTombstone == true,
                    "the remote holds the removal again, not the older value")
        }
    }

    /// A replacement makes the store hold what the remote holds: a deletion the remote has no
    /// row of is forgotten, or the next audit would take it for lost and push it.
    @Test("after a replacement, a deletion the remote lacks is forgotten: the next audit finds nothing lost")
    func replacementForgetsLostDeletions() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, _, line) = try await backedUpBehindLine(in: dir)
            try a.store.put(.string("gone"), forKey: "k")
            try await a.engine.synchronize()
            try a.store.removeValue(forKey: "k")
            try await a.engine.synchronize()
            await a.engine.stopAndWait()

            storage.restore(backup.snapshot())
            try await a.engine.replaceWithRemote()
            #expect(a.store.allChanges(forKey: "k") == nil, "the store holds what the remote holds: nothing of k")
            let resets = a.events.events.filter { $0.reason == .remoteReset }.count
            line.setOnline(false)
            await #expect(throws: (any Error).self) { try await a.engine.synchronize() }
            line.setOnline(true)
            try await a.engine.synchronize()  // audits after the gap
            #expect(a.events.events.filter { $0.reason == .remoteReset }.count == resets, "\(a.events.events)")
            #expect(try storage.changes(in: "default", after: 0, limit: 100).changes.allSatisfy { $0.key != "k" })
        }
    }

    /// `replaceWithRemote` removes a key the remote lacks by writing a tombstone under the stamp
    /// of the local value it removes: two different changes under one stamp. When another
    /// mount pushes that value back (as the manual says it may), this mount takes it for a
    /// confirmation of its own tombstone and never shows it: the replicas never converge.
    @Test("after a replacement, a value another mount pushes back reaches this mount too")
    func replacedKeyPushedBackConverges() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await backedUp(in: dir)
            try a.store.put(.string("kept by b"), forKey: "gone")
            try await a.engine.synchronize()
            let b = try Device("b", in: dir, remote: remote)
            try await b.engine.synchronize()
            #expect(b.text("gone") == "kept by b")
            await a.engine.stopAndWait()
            await b.engine.stopAndWait()

            storage.restore(backup.snapshot())
            try await a.engine.replaceWithRemote()
            #expect(a.store.entry(forKey: "gone") == nil, "the replacement removed what the remote lacks")

            // b finds the restore out and pushes its value back; every replica now converges on it.
            try await b.engine.synchronize()
            #expect(try storage.changes(in: "default", after: 0, limit: 100).changes.contains { $0.key == "gone" && $0.value != nil },
                    "b pushed the value back")
            try await a.engine.synchronize()
            try await a.engine.synchronize()
            #expect(a.text("gone") == "kept by b",
                    "a must converge with the remote and b; it holds \(String(describing: a.store.allChanges(forKey: "gone")))")
        }
    }

    /// Each mount whose own mark finds the same restore out would renew the identity again, and
    /// every mount that had already resynchronised would do so again: one restore needs one
    /// renewal.
    @Test("one restore sends a mount through one resynchronisation, however many other mounts find it out")
    func oneRestoreOneResynchronisation() async throws {
        try await withTemporaryDirectory { dir in
            let (storage, backup, a, remote) = try await backedUp(in: dir)
            try a.store.put(.string("late"), forKey: "late")
            try await a.engine.synchronize()
            let d = try Device("d", in: dir, remote: remote)
            try await d.engine.synchronize()
            #expect(d.text("late") == "late")
            // a never fetches d-own: the restored remote it pushes back to lacks it, and d's mark
            // cannot fit (were d-own pushed back to the same cursor, it would, and rightly so).
            await a.engine.stopAndWait()
            try d.store.put(.string("d"), forKey: "d-own")
            try await d.engine.synchronize()  // d's mark: "d-own" at cursor 3; its identity check is now fresh
            // The write also woke d's loop: its round must not come after the restore, or d, not
            // a, would find it out first.
            let synced = d.engine.status.lastSync
            _ = await waitUntil(within: 2) { d.engine.status.lastSync != synced }

            storage.restore(backup.snapshot())
            try await a.engine.synchronize()  // a finds it out (its mark does not fit), renews, resynchronises
            let renewed = try storage.identity()
            #expect(renewed != "same")
            #expect(a.events.events.filter { $0.reason == .remoteReset }.count == 1)

            // d's background round (its identity checked less than a minute ago) finds it out by its
            // own mark: the same restore.
            try d.store.put(.string("d"), forKey: "from-d")
            d.engine.requestSync()
            #expect(try await waitUntil { d.events.events.contains { $0.reason == .remoteReset } })
            try await Task.sleep(for: .milliseconds(200))
            try await a.engine.synchronize()
            let resets = a.events.events.filter { $0.reason == .remoteReset }
            #expect(resets.count == 1, "a resynchronised \(resets.count) times for one restore: \(resets.map { $0.message ?? "" })")
            #expect(try storage.identity() == renewed, "the identity was renewed again for the same restore")
        }
    }

    /// The file remote's row for a key with a NUL (which SQLite holds): its mark must fit.
    @Test("a mark on a key holding a NUL fits the SQLite remote's row")
    func markOnKeyWithNUL() async throws {
        try await withTemporaryDirectory { dir in
            let storage = try SQLiteCloudStorage(path: dir.path + "/cloud.sqlite")
            let now = AdmissionPolicy.systemTime()
            let value = Data(try PropertyListCodec.encodeXML(.string("v")))
            let change = StampedChange(key: "a\u{0}b", value: value, type: .string, stamp: ChangeStamp(time: now, counter: 0, device: "d"))
            let outcome = try await storage.push([change], to: "default")
            let mark = try #require(outcome.mark)
            #expect(try storage.mark(in: "default", key: "a\u{0}b") == mark)
            let remote = EmbeddedChangeLog(description: "file", clock: ContinuousClock()) { storage }
            _ = try await remote.changes(in: "default", after: 1, mark: mark, limit: 100)
        }
    }
}
