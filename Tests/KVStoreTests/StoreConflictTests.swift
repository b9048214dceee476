import Foundation
import GRDB
import KVStore
import KVTestSupport
import Testing

/// What the store keeps for conflicts: what each pending change replaced, across a restart;
/// a pending change held over a newer remote one; the conflicts the remote gives; a key
/// written again as it is.
@Suite("The store's side of conflicts", .timeLimit(.minutes(1)))
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

    @Test("held: a newer remote change leaves a pending one in place; merged as before otherwise")
    func holdingPending() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("mine"), forKey: "k")
            let newer = remote("k", "theirs", time: Int64.max / 4)
            #expect(try store.applyExternal([newer], mode: .mergeHoldingPending).isEmpty)
            #expect(store.entry(forKey: "k")?.xml == Array(try PropertyListCodec.encodeXML(.string("mine"))))
            #expect(store.syncState(forKey: "k") == .pending)
            try store.markPushed(store.pendingChanges())
            #expect(try store.applyExternal([newer], mode: .mergeHoldingPending) == ["k"], "once pushed, the winner comes in")
        }
    }

    @Test("each key's last fetched change says its conflict: opened, replaced, settled, kept across a restart")
    func conflictsFromTheRemote() throws {
        try withTemporaryDirectory { dir in
            var store: KeyValueStore! = try makeStore(in: dir)
            let lost = KeptChange(value: Data(try PropertyListCodec.encodeXML(.string("mine"))), type: .string,
                                  stamp: ChangeStamp(time: 900, counter: 0, device: "me"))
            var winner = remote("k", "theirs", time: 1000)
            winner.lost = lost
            #expect(try store.takeConflicts(from: [remote("k", "theirs", time: 1000), winner]) == ["k"])
            #expect(try store.takeConflicts(from: [winner]).isEmpty, "the same conflict again is not new")
            #expect(store.conflict(forKey: "k") == KeyConflict(key: "k", lost: lost, won: winner.kept))
            #expect(store.conflictCount == 1)
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.conflicts() == [KeyConflict(key: "k", lost: lost, won: winner.kept)])
            #expect(try store.takeConflicts(from: [remote("k", "settled", time: 1100)]).isEmpty)
            #expect(store.conflicts().isEmpty)
            store = nil  // the store is held alone: closed before it opens again
            store = try makeStore(in: dir)
            #expect(store.conflicts().isEmpty)

            #expect(try store.takeConflicts(from: [winner]) == ["k"])
            #expect(try store.takeConflicts(from: [remote("other", "v", time: 5)], replacingAll: true).isEmpty)
            #expect(store.conflicts().isEmpty, "following a whole history: a key not in it has none")
        }
    }

    @Test("a key written again as it is: a new pending change with the same value; a removed key's removal too")
    func rewrite() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let given = remote("k", "theirs", time: 1000)
            try store.applyExternal([given])
            try store.rewrite("k")
            let again = try #require(store.pendingChanges().first)
            #expect(again.stamp > given.stamp && again.value == given.value && again.replaces == .change(given.stamp))
            let removal = remote("gone", nil, time: 1000)
            try store.applyExternal([remote("gone", "v", time: 900), removal])
            try store.rewrite("gone")
            #expect(store.pendingChanges().first { $0.key == "gone" }.map { $0.isTombstone && $0.stamp > removal.stamp } == true)
            #expect(throws: StoreError.noSuchKey("never")) { try store.rewrite("never") }
            store.setReadOnly("a read-only token")
            #expect(throws: StoreError.readOnly("a read-only token")) { try store.rewrite("k") }
        }
    }
}
