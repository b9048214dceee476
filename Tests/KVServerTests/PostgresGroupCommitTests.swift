import Foundation
import KVCloud
import KVPostgres
import KVStore
import KVTestSupport
import Logging
import Testing

/// Pushes arriving together at a PostgreSQL storage share one transaction.
@Suite("Group commit on PostgreSQL", .hangGuard)
struct PostgresGroupCommitTests {
    @Test("200 pushes at once to 8 stores take far fewer transactions, and every store holds every change")
    func pushesShareTransactions() async throws {
        let directory = TemporaryDirectory("kvsfs-groupcommit")
        defer { directory.remove() }
        let database = try TestDatabase(.postgres, in: directory)
        defer { database.remove() }
        let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent)
        do {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        let change = StampedChange(key: "k\(i)", value: Data(try PropertyListCodec.encodeXML(.string("v\(i)"))),
                                                   type: .string, stamp: ChangeStamp(time: now, counter: 0, device: "d"))
                        let outcome = try await storage.push([change], to: "alice.s\(i % 8)")
                        #expect(outcome.accepted == [change])
                    }
                }
                try await group.waitForAll()
            }
            let (transactions, pushes) = storage.pushTransactions
            print("group commit: 200 pushes in \(transactions) transactions")
            #expect(pushes == 200)
            #expect(transactions < 100)
            for store in 0..<8 {
                let batch = try await storage.changes(in: "alice.s\(store)", after: 0, limit: 100)
                #expect(Set(batch.changes.map(\.key)) == Set((0..<200).filter { $0 % 8 == store }.map { "k\($0)" }))
                #expect(batch.cursor == 25 && batch.complete)
            }
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }
}
