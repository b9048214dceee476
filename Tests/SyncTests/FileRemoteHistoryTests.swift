import Foundation
import GRDB
@testable import KVCloud
import KVStore
import KVTestSupport
import Testing

/// What the file remote keeps of each key's past, read from its rows rather than through its
/// answers (which never show more than the policy): the trimmed and swept versions are gone
/// from the file, retention counts from acceptance, and a file remote made before history
/// comes up with each key's latest change as its first version.
@Suite("The file remote's key history, row by row")
struct FileRemoteHistoryTests {
    private static let day: Int64 = 86_400_000
    private static let start: Int64 = 1_795_000_000_000

    /// A file remote whose clock is the test's, in a fresh directory.
    private func withRemote(skew: Int64 = StampRule.maximumSkew, _ body: (SQLiteCloudStorage, String, RemoteClock) throws -> Void) throws {
        let directory = TemporaryDirectory("kvsfs-history")
        defer { directory.remove() }
        let clock = RemoteClock(Self.start)
        let path = directory.path + "/cloud.sqlite"
        let admission = AdmissionPolicy(stamps: StampRule(skew: skew), now: { clock.reading })
        try body(try SQLiteCloudStorage(path: path, admission: admission), path, clock)
    }

    private func change(_ key: String, _ text: String, time: Int64) -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: "a"))
    }

    /// The version rows the file holds for `key`.
    private func storedVersions(_ path: String, _ key: String) throws -> Int {
        try DatabaseQueue(path: path).read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM cloudVersion WHERE key = ?", arguments: [key]) ?? -1
        }
    }

    @Test("a key keeps its last 16 versions in the file; a lowered policy trims the file at the key's next change, for good")
    func trimmedRows() throws {
        try withRemote { remote, path, _ in
            for index in 0..<20 { _ = try remote.push([change("k", "v\(index)", time: Self.start - 100 + Int64(index))], to: "default") }
            #expect(try storedVersions(path, "k") == 16)
            #expect(try remote.changeHistoryPolicy(HistoryPolicyChange(versions: 4), of: "default") == HistoryPolicy(versions: 4))
            #expect(try remote.history(of: "k", in: "default").count == 4)
            #expect(try storedVersions(path, "k") == 16, "until the key changes")
            _ = try remote.push([change("k", "v20", time: Self.start)], to: "default")
            #expect(try storedVersions(path, "k") == 4)
            _ = try remote.changeHistoryPolicy(HistoryPolicyChange(versions: 16), of: "default")
            #expect(try remote.history(of: "k", in: "default").count == 4, "the dropped versions are gone")
            #expect(try remote.historyPolicy(of: "default") == HistoryPolicy(versions: 16, retentionDays: 30))
        }
    }

    @Test("a removal's history is kept for 30 days after the remote accepted it, whatever its stamp, then dropped from the file")
    func retentionFromAcceptance() throws {
        try withRemote { remote, path, clock in
            // A device offline for 40 days removes a key: its stamp is old, its acceptance now.
            _ = try remote.push([change("late", "v", time: Self.start - 50 * Self.day),
                                 .tombstone("late", stamp: ChangeStamp(time: Self.start - 40 * Self.day, counter: 0, device: "b"))],
                                to: "default")
            #expect(try remote.history(of: "late", in: "default").map(\.isRemoval) == [true, false])
            clock.advance(29 * Self.day)
            _ = try remote.push([change("other", "x", time: clock.reading)], to: "default")
            #expect(try remote.history(of: "late", in: "default").count == 2, "29 days after acceptance")
            #expect(try storedVersions(path, "late") == 2)
            clock.advance(2 * Self.day)
            #expect(try remote.history(of: "late", in: "default").isEmpty, "31 days after acceptance")
            #expect(try storedVersions(path, "late") == 2, "hidden until a push sweeps")
            _ = try remote.push([change("other", "y", time: clock.reading)], to: "default")
            #expect(try storedVersions(path, "late") == 1, "the next push an hour or more after the last sweep drops all but the removal")
            #expect(try remote.history(of: "late", in: "default").isEmpty)
            #expect(try storedVersions(path, "other") == 2)
        }
    }

    @Test("a file remote made before history comes up with each key's latest change as its one version")
    func migrationFromBeforeHistory() throws {
        let directory = TemporaryDirectory("kvsfs-history-upgrade")
        defer { directory.remove() }
        let path = directory.path + "/cloud.sqlite"
        let old = try DatabaseQueue(path: path)
        try SQLiteCloudStorage.migrator.migrate(old, upTo: "v1 stores, their latest changes, settings")
        let now = AdmissionPolicy.systemTime()
        let value = Data(try PropertyListCodec.encodeXML(.string("kept")))
        try old.write { db in
            try db.execute(sql: """
                INSERT INTO cloudStore (id, cursor, bytes, keys, totalBytes, valueBytes, maxKeys, keyNameBytes)
                VALUES ('default', 2, ?, 1, 1048576, 1048576, 1024, 64)
                """, arguments: [value.count])
            try db.execute(sql: "INSERT INTO cloudChange VALUES ('default', 'k', ?, 'string', ?, 0, 'a', 1)", arguments: [value, now])
            try db.execute(sql: "INSERT INTO cloudChange VALUES ('default', 'gone', NULL, NULL, ?, 0, 'a', 2)", arguments: [now - 40 * Self.day])
        }
        try old.close()
        let remote = try SQLiteCloudStorage(path: path)
        let history = try remote.history(of: "k", in: "default")
        #expect(history.map(\.version) == [1] && history.first?.stamp.time == now)
        #expect(try remote.version(1, of: "k", in: "default")?.value == value)
        #expect(try remote.history(of: "gone", in: "default").isEmpty, "a removal older than 30 days, by its stamp")
        #expect(try remote.historyPolicy(of: "default") == .standard)
        _ = try remote.push([change("k", "new", time: now + 1)], to: "default")
        #expect(try remote.history(of: "k", in: "default").map(\.version) == [3, 1])
    }

    @Test("a change an older kvsfs wrote to the file (no version row) shows as the key's newest version")
    func changeWithoutVersionRow() throws {
        try withRemote { remote, path, clock in
            _ = try remote.push([change("k", "one", time: clock.reading)], to: "default")
            let value = Data(try PropertyListCodec.encodeXML(.string("two")))
            try DatabaseQueue(path: path).write { db in
                try db.execute(sql: "UPDATE cloudChange SET value = ?, time = ?, cursor = 7 WHERE key = 'k'", arguments: [value, clock.reading + 1])
                try db.execute(sql: "UPDATE cloudStore SET cursor = 7")
            }
            #expect(try remote.history(of: "k", in: "default").map(\.version) == [7, 1])
            #expect(try remote.version(7, of: "k", in: "default")?.value == value)
        }
    }

    @Test("a policy broken by another program holds pushes with its reason until kvsfs mends it; limits can still be set")
    func brokenPolicy() throws {
        try withRemote { remote, path, clock in
            _ = try remote.push([change("k", "one", time: clock.reading)], to: "default")
            try DatabaseQueue(path: path).write { db in
                try db.execute(sql: "PRAGMA ignore_check_constraints = 1")
                try db.execute(sql: "UPDATE cloudStore SET historyVersions = 0")
            }
            #expect(throws: CloudError.unavailable("the store's history policy is outside the rule: a history of 0 versions per key (1 to 1000 allowed)")) {
                _ = try remote.push([change("k", "two", time: clock.reading + 1)], to: "default")
            }
            try remote.setLimits(QuotaLimits(keys: 10), of: "default")
            #expect(try remote.limits(of: "default").keys == 10)
            #expect(try remote.changeHistoryPolicy(HistoryPolicyChange(versions: 8), of: "default") == HistoryPolicy(versions: 8))
            #expect(try remote.push([change("k", "two", time: clock.reading + 1)], to: "default").accepted.count == 1)
            #expect(try remote.history(of: "k", in: "default").count == 2)
        }
    }

    @Test("a removal stamped ahead of the remote's clock stays unshown once its history is swept")
    func sweptRemovalStaysHidden() throws {
        // A remote that takes stamps any time ahead, as one configured with a large skew.
        try withRemote(skew: .max) { remote, path, clock in
            _ = try remote.changeHistoryPolicy(HistoryPolicyChange(retentionDays: 0), of: "default")
            _ = try remote.push([change("k", "v", time: clock.reading)], to: "default")
            // The removing device's clock runs ten days ahead.
            _ = try remote.push([.tombstone("k", stamp: ChangeStamp(time: clock.reading + 10 * Self.day, counter: 0, device: "b"))], to: "default")
            clock.advance(1)
            #expect(try remote.history(of: "k", in: "default").isEmpty)
            clock.advance(2 * HistoryPolicy.sweepInterval)
            _ = try remote.push([change("other", "x", time: clock.reading)], to: "default")
            #expect(try storedVersions(path, "k") == 1)
            #expect(try remote.history(of: "k", in: "default").isEmpty, "by when the remote accepted it, not by its stamp")
        }
    }

    @Test("a policy column holding no whole number is mended by naming it")
    func policyNotANumber() throws {
        try withRemote { remote, path, clock in
            try DatabaseQueue(path: path).write { db in
                try db.execute(sql: "PRAGMA ignore_check_constraints = 1")
                try db.execute(sql: "INSERT INTO cloudStore (id, cursor, bytes, keys, totalBytes, valueBytes, maxKeys, keyNameBytes, historyVersions) VALUES ('default', 0, 0, 0, 1048576, 1048576, 1024, 64, 'abc')")
            }
            #expect(throws: CloudError.unavailable("the store's history policy is outside the rule: a history of 0 versions per key (1 to 1000 allowed)")) {
                _ = try remote.push([change("k", "v", time: clock.reading)], to: "default")
            }
            #expect(try remote.changeHistoryPolicy(HistoryPolicyChange(versions: 5), of: "default") == HistoryPolicy(versions: 5))
            #expect(try remote.push([change("k", "v", time: clock.reading)], to: "default").accepted.count == 1)
        }
    }

    @Test("a version row whose value and type disagree fails the answer with why, never shown as a removal")
    func inconsistentRow() throws {
        try withRemote { remote, path, clock in
            _ = try remote.push([change("k", "one", time: clock.reading)], to: "default")
            try DatabaseQueue(path: path).write { db in
                try db.execute(sql: "PRAGMA ignore_check_constraints = 1")
                try db.execute(sql: "UPDATE cloudVersion SET value = NULL")
            }
            #expect(throws: CloudError.unavailable("the version at cursor 1 of \"k\" cannot be read: it has a type without a value, or a value without a type")) {
                _ = try remote.history(of: "k", in: "default")
            }
        }
    }
}
