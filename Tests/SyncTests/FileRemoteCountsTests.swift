import Foundation
import GRDB
@testable import KVCloud
import KVStore
import KVTestSupport
import Testing

/// The file remote's counts of what a store keeps beside its values, which its bounds are
/// checked against: kept by triggers, they equal what the rows hold after every kind of write,
/// an older kvsfs's too.
@Suite("The file remote's counts of conflicts and history", .hangGuard)
struct FileRemoteCountsTests {
    func change(_ key: String, _ text: String?, time: Int64, device: String, replaces: Replaced?) -> StampedChange {
        StampedChange(key: key, value: text.map { Data(try! PropertyListCodec.encodeXML(.string($0))) }, type: text == nil ? nil : .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device), replaces: replaces)
    }

    /// The counts as stored, and as the rows would give them.
    func counts(_ path: String) throws -> (kept: Int, keptInRows: Int, history: Int, historyInRows: Int) {
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        return try queue.read { db in
            (try Int.fetchOne(db, sql: "SELECT keptBytes FROM cloudStore WHERE id = 'default'") ?? -1,
             try Int.fetchOne(db, sql: "SELECT coalesce(sum(coalesce(length(lostValue), 0) + coalesce(length(alsoLost), 0)), 0) FROM cloudChange") ?? -1,
             try Int.fetchOne(db, sql: "SELECT historyBytes FROM cloudStore WHERE id = 'default'") ?? -1,
             try Int.fetchOne(db, sql: "SELECT coalesce(sum(length(value)), 0) FROM cloudVersion") ?? -1)
        }
    }

    @Test("losers kept, moved into the list, settled, removed, and an older kvsfs's write: the counts follow the rows")
    func countsFollowRows() throws {
        try withTemporaryDirectory { dir in
            let path = dir.path + "/cloud.sqlite"
            let cloud = try SQLiteCloudStorage(path: path, admission: AdmissionPolicy(now: { 100_000 }))
            func check(_ step: String) throws {
                let now = try counts(path)
                #expect(now.kept == now.keptInRows && now.history == now.historyInRows, "\(step): \(now)")
            }
            _ = try cloud.push([change("k", nil, time: 50_000, device: "writer", replaces: .nothing)], to: "default")
            for device in 0..<4 {
                _ = try cloud.push([change("k", "lost by \(device)", time: 10_000 + Int64(device), device: "d\(device)", replaces: .nothing)],
                                   to: "default")
                try check("loser \(device)")
            }
            #expect(try counts(path).kept > 0)
            let held = try #require(try cloud.changes(in: "default", after: 0, limit: 10).changes.first)
            var settle = change("k", "settled", time: 60_000, device: "writer", replaces: .change(held.stamp))
            settle.settles = held.lost.map(\.stamp)
            _ = try cloud.push([settle], to: "default")
            try check("settled")
            #expect(try counts(path).kept == 0, "settled: nothing kept")
            _ = try cloud.push([change("k", "late", time: 20_000, device: "d9", replaces: .nothing)], to: "default")
            _ = try cloud.push([change("k", nil, time: 70_000, device: "writer", replaces: .change(settle.stamp))], to: "default")
            try check("removed")
            // An older kvsfs's write, which knows nothing of the counts, clearing what lost.
            let queue = try DatabaseQueue(path: path)
            try queue.write { db in
                try db.execute(sql: "UPDATE cloudChange SET lostValue = NULL, lostType = NULL, lostTime = NULL, lostCounter = NULL, lostDevice = NULL, alsoLost = NULL")
                try db.execute(sql: "DELETE FROM cloudVersion WHERE cursor = 1")
            }
            try queue.close()
            try check("an older kvsfs's write")
        }
    }
}
