import Foundation
import GRDB
import KVStore
import KVTestSupport
import Testing

/// What the store keeps for conflicts: what each pending change replaced, across a restart;
/// a pending change a newer remote one replaced, still to push; the conflicts the remote
/// gives; a conflict settled.
@Suite("The store's side of conflicts", .hangGuard)
struct StoreConflictTests {
    func remote(_ key: String, _ text: String?, time: Int64, device: String = "other") -> StampedChange {
        StampedChange(key: key, value: text.map { Data(try! PropertyListCodec.encodeXML(.string($0))) }, type: text == nil ? nil : .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device))
    }

    @Test("a pending change replaces what the remote last gave the key, however often it is written again, across a restart")
    func replacedFollowsTheRemote() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            try store.put(.string("new"), forKey: "fresh")
            #expect(store.pendingChanges().first?.replaces == .nothing)

            let given = remote("k", "theirs", time: 1000)
            try store.applyExternal([given])
            try store.put(.string("one"), forKey: "k")
            try store.put(.string("two"), forKey: "k")
            try store.makeDurable()
            try store.put(.string("three"), forKey: "k")  // in the journal only
            #expect(store.pendingChanges().first { $0.key == "k" }?.replaces == .change(given.stamp))

            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.pendingChanges().first { $0.key == "k" }?.replaces == .change(given.stamp), "replayed from the journal")
            let pushed = try #require(store.pendingChanges().first { $0.key == "k" })
            try store.markPushed([pushed])
            try store.removeValue(forKey: "k")
            #expect(store.pendingChanges().first { $0.key == "k" }?.replaces == .change(pushed.stamp))
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.pendingChanges().first { $0.key == "k" }?.replaces == .change(pushed.stamp))
        }
    }

    @Test("after a remote lost its history, no pending change knows what it replaced, across a restart; losses can be discarded")
    func pendingAgainIsUnknown() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            try store.applyExternal([remote("k", "theirs", time: 1000), remote("lost", "theirs", time: 1000)])
            try store.put(.string("mine"), forKey: "k")
            try store.put(.string("mine"), forKey: "pending")
            try store.put(.string("mine"), forKey: "lost")
            try store.applyExternal([remote("lost", "newer", time: Int64.max / 4)])  // an unsent loss
            try store.markPushed(store.pendingChanges().filter { $0.key == "k" })
            try store.markPending(["k"])
            #expect(store.changesToPush().map(\.replaces) == [.unknown, .unknown, .unknown], "those pending already, and the loss, too")
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.changesToPush().map(\.replaces) == [.unknown, .unknown, .unknown])
            try store.discardUnsentLosses()
            store = nil
            store = try makeStore(in: dir)
            #expect(store.changesToPush().map(\.key).sorted() == ["k", "pending"], "the loss discarded, for good")
        }
    }

    @Test("a change pending from before the store kept what it replaced says it is not known")
    func upgradedPendingIsUnknown() throws {
        try withTemporaryDirectory { dir in
            let path = dir.path + "/test.sqlite"
            // A store as the version before conflicts left it: its schema up to v4, one pending row.
            let queue = try DatabaseQueue(path: path)
            try queue.write { db in
                try db.execute(sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1 entries with their latest change, settings'),
                        ('v2 change stamps and sync state'), ('v3 checks without IN lists'), ('v4 keys checked as bytes');
                    CREATE TABLE setting (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                    CREATE TABLE entry (key TEXT PRIMARY KEY NOT NULL, value BLOB, type TEXT, modifiedAt INTEGER NOT NULL,
                        sequence INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0, device TEXT NOT NULL DEFAULT '',
                        syncState TEXT NOT NULL DEFAULT 'pending', CHECK (key <> ''), CHECK ((value IS NULL) = (type IS NULL))) WITHOUT ROWID;
                    """)
                try db.execute(sql: "INSERT INTO entry VALUES ('k', ?, 'string', 1000, 1, 0, 'me', 'pending')",
                               arguments: [Data(try PropertyListCodec.encodeXML(.string("v")))])
            }
            try queue.close()
            let store = try KeyValueStore(path: path)
            #expect(store.pendingChanges().map(\.replaces) == [.unknown])
        }
    }

    @Test("a pending change a newer remote one replaces is still pushed, with what it replaced, across a restart, until answered")
    func unsentLoss() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            let base = remote("k", "base", time: 500)
            try store.applyExternal([base])
            try store.put(.string("mine"), forKey: "k")
            let mine = try #require(store.pendingChanges().first)
            let newer = remote("k", "theirs", time: Int64.max / 4)
            #expect(try store.applyExternal([newer]) == ["k"], "the merge rule, as always: the newer change is shown")
            #expect(store.syncState(forKey: "k") == .synced && store.pendingChanges().isEmpty)
            #expect(store.changesToPush() == [mine], "the change it replaced is pushed all the same")
            #expect(store.unsentLosses().first?.replaces == .change(base.stamp))
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.changesToPush() == [mine])
            try store.recordPush(accepted: [mine])
            #expect(store.changesToPush().isEmpty)
            store = nil
            store = try makeStore(in: dir)
            #expect(store.changesToPush().isEmpty, "answered: gone for good")
        }
    }

    @Test("each key's last fetched change says its conflict: opened, replaced, settled, kept across a restart")
    func conflictsFromTheRemote() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            let lost = KeptChange(value: Data(try PropertyListCodec.encodeXML(.string("mine"))), type: .string,
                                  stamp: ChangeStamp(time: 900, counter: 0, device: "me"))
            let alsoLost = KeptChange(value: nil, type: nil, stamp: ChangeStamp(time: 800, counter: 0, device: "tablet"))
            var winner = remote("k", "theirs", time: 1000)
            winner.lost = [lost]
            #expect(try store.takeConflicts(from: [remote("k", "theirs", time: 1000), winner]).opened == ["k"])
            #expect(try store.takeConflicts(from: [winner]).opened.isEmpty, "the same conflict again is not new")
            winner.lost = [lost, alsoLost]
            #expect(try store.takeConflicts(from: [winner]).opened == ["k"], "another change lost: new")
            #expect(store.conflict(forKey: "k") == KeyConflict(key: "k", lost: [lost, alsoLost], won: winner.kept))
            #expect(store.conflictCount == 1)
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.conflicts() == [KeyConflict(key: "k", lost: [lost, alsoLost], won: winner.kept)])
            winner.lost = [alsoLost]
            #expect(try store.takeConflicts(from: [winner]).opened.isEmpty, "one let go: nothing new")
            #expect(store.conflict(forKey: "k")?.lost == [alsoLost])
            #expect(try store.takeConflicts(from: [remote("k", "settled", time: 1100)]).opened.isEmpty)
            #expect(store.conflicts().isEmpty)
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.conflicts().isEmpty)

            #expect(try store.takeConflicts(from: [winner]).opened == ["k"])
            #expect(try store.takeConflicts(from: [remote("other", "v", time: 5)], replacingAll: true) == ConflictIntake(opened: [], notKept: []))
            #expect(store.conflicts().isEmpty, "following a whole history: a key not in it has none")
        }
    }

    @Test("a remote's conflicts are kept up to the store's total quota: past it, one is not kept and is named")
    func conflictsBounded() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let big = Data(try PropertyListCodec.encodeXML(.string(String(repeating: "x", count: 400_000))))
            var given: [StampedChange] = []
            for index in 0..<3 {
                var winner = remote("k\(index)", "theirs", time: 1000)
                winner.lost = [KeptChange(value: big, type: .string, stamp: ChangeStamp(time: 900, counter: 0, device: "made-up-\(index)"))]
                given.append(winner)
            }
            let intake = try store.takeConflicts(from: given)
            #expect(intake == ConflictIntake(opened: ["k0", "k1"], notKept: ["k2"]), "2 × 400 KB fit in 1 MiB, a third does not")
            #expect(store.conflictCount == 2 && store.conflict(forKey: "k2") == nil)
            // Settled, one frees its room: the third is kept when given again.
            let settled = try store.takeConflicts(from: [remote("k0", "settled", time: 1100), given[2]])
            #expect(settled == ConflictIntake(opened: ["k2"], notKept: []), "\(settled)")
            var oversized = remote("k3", "theirs", time: 1000)
            oversized.lost = [KeptChange(value: Data(try PropertyListCodec.encodeXML(.string(String(repeating: "y", count: 1_100_000)))),
                                         type: .string, stamp: ChangeStamp(time: 900, counter: 0, device: "made-up")) ]
            #expect(try store.takeConflicts(from: [oversized]) == ConflictIntake(opened: [], notKept: ["k3"]), "over the per-value quota")
        }
    }

    @Test("settling keeps the side named as a new change replacing the winner, even the value shown; a changed conflict is refused")
    func settle() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            let mine = KeptChange(value: Data(try PropertyListCodec.encodeXML(.string("mine"))), type: .string,
                                  stamp: ChangeStamp(time: 900, counter: 0, device: "me"))
            let tablet = KeptChange(value: Data(try PropertyListCodec.encodeXML(.string("tablet"))), type: .string,
                                    stamp: ChangeStamp(time: 800, counter: 0, device: "tablet"))
            var winner = remote("k", "theirs", time: 1000)
            winner.lost = [mine, tablet]
            try store.applyExternal([winner])
            try store.takeConflicts(from: [winner])
            let conflict = try #require(store.conflict(forKey: "k"))
            try store.put(.string("later, offline"), forKey: "k")  // pending, with an older base

            let (before, after) = try store.settle(conflict, keeping: conflict.won)
            #expect(before?.xml == Array(try PropertyListCodec.encodeXML(.string("later, offline"))))
            #expect(after?.xml == Array(winner.value ?? Data()), "the winner's value, not what was pending")
            let settling = try #require(store.pendingChanges().first)
            #expect(settling.stamp > winner.stamp && settling.replaces == .change(winner.stamp))
            #expect(settling.settles == [mine.stamp, tablet.stamp], "it lets go of what the mount showed lost to the winner")
            store = nil
            store = try makeStore(in: dir)
            #expect(store.pendingChanges().first?.replaces == .change(winner.stamp), "what it replaced is kept with it")

            #expect(conflict.lostChange(of: nil, local: "me") == mine, "the local side: this device's")
            #expect(conflict.lostChange(of: nil, local: "elsewhere") == nil, "several lost, none local: name one")
            #expect(conflict.lostChange(of: "tablet", local: "me") == tablet)
            _ = try store.settle(conflict, keeping: tablet)
            #expect(store.entry(forKey: "k")?.xml == Array(tablet.value ?? Data()))
            let late = KeptChange(value: nil, type: nil, stamp: ChangeStamp(time: 700, counter: 0, device: "desk"))
            winner.lost = [mine, tablet, late]
            try store.takeConflicts(from: [winner])
            #expect(store.pendingChanges().first?.settles == [mine.stamp, tablet.stamp],
                    "a change that lost after the write was never shown to it: not settled")
            let removal = KeyConflict(key: "k", lost: [KeptChange(value: nil, type: nil, stamp: mine.stamp)], won: conflict.won)
            #expect(throws: StoreError.conflictChanged("k")) { try store.settle(removal, keeping: removal.lost[0]) }
            store.setReadOnly("a read-only token")
            #expect(throws: StoreError.readOnly("a read-only token")) { try store.settle(conflict, keeping: conflict.won) }
        }
    }
}
