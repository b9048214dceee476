import Foundation
import KVCloud
import KVPostgres
import KVServer
import KVStore
import KVTestSupport
import Logging
import Testing

/// A push is answered only once it is on disk. What a power cut would show cannot be seen
/// here: these tests check what makes it so on the connections that commit pushes, and that
/// pushes arriving together at a server on SQLite share one commit (one flush to disk), each
/// still with its own outcome.
@Suite("Durable acknowledgements", .hangGuard)
struct DurableAcknowledgementTests {
    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func change(_ key: String, _ text: String) -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: Self.now, counter: 0, device: "d"))
    }

    @Test("the file remote commits pushes with synchronous = FULL (2), which flushes SQLite's log at each commit")
    func fileRemoteCommitsDurably() throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteCloudStorage(path: directory.path + "/cloud.sqlite")
        #expect(try storage.commitSynchronous() == 2)
    }

    @Test("a server on SQLite commits pushes with synchronous = FULL (2)")
    func sqliteServerCommitsDurably() async throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteServerStorage(path: directory.path + "/server.sqlite")
        #expect(try await storage.commitSynchronous() == 2)
    }

    @Test("200 pushes at once to a server on SQLite take far fewer commits, and every store holds every change")
    func sqlitePushesShareCommits() async throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteServerStorage(path: directory.path + "/server.sqlite")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                group.addTask {
                    let pushed = change("k\(i)", "v\(i)")
                    let outcome = try await storage.push([pushed], to: "alice.s\(i % 8)")
                    #expect(outcome.accepted == [pushed])
                }
            }
            try await group.waitForAll()
        }
        let (transactions, pushes) = storage.pushTransactions
        print("group commit on SQLite: 200 pushes in \(transactions) transactions")
        #expect(pushes == 200)
        #expect(transactions < 100)
        for store in 0..<8 {
            let batch = try await storage.changes(in: "alice.s\(store)", after: 0, limit: 100)
            #expect(Set(batch.changes.map(\.key)) == Set((0..<200).filter { $0 % 8 == store }.map { "k\($0)" }))
            #expect(batch.cursor == 25 && batch.complete)
        }
    }

    @Test("in one commit, a push whose history mark does not fit is refused alone: the pushes before and after it are kept")
    func refusedPushFailsAlone() async throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteCloudStorage(path: directory.path + "/cloud.sqlite")
        _ = try storage.push([change("a", "1")], to: "s1", mark: nil)
        let seenElsewhere = HistoryMark(key: "a", cursor: 1, stamp: ChangeStamp(time: 1, counter: 0, device: "other"))
        let results = await storage.commit([
            try storage.admit([change("before", "2")], to: "s2", mark: nil),
            try storage.admit([change("b", "3")], to: "s1", mark: seenElsewhere),
            try storage.admit([change("after", "4")], to: "s3", mark: nil),
        ])
        #expect(results.count == 3)
        #expect((try? results[0].get())?.accepted.map(\.key) == ["before"])
        #expect(results[1].isHistoryMismatch, "\(results[1])")
        #expect((try? results[2].get())?.accepted.map(\.key) == ["after"])
        #expect(try storage.changes(in: "s1", after: 0, limit: 10).changes.map(\.key) == ["a"], "the refused push wrote nothing")
        #expect(try storage.changes(in: "s2", after: 0, limit: 10).changes.map(\.key) == ["before"])
        #expect(try storage.changes(in: "s3", after: 0, limit: 10).changes.map(\.key) == ["after"])
    }

    @Test("on a PostgreSQL database whose synchronous_commit is off, the server's pushes commit with it on")
    func postgresCommitsDurably() async throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let database = try TestDatabase(.postgres, in: directory)
        defer { database.remove() }
        let name = String(database.url.split(separator: "/").last ?? "")
        let altered = try run("/usr/bin/psql", [database.url, "-v", "ON_ERROR_STOP=1", "-q", "-c",
                                                "ALTER DATABASE \(name) SET synchronous_commit = off"])
        #expect(altered.status == 0, "\(altered)")
        let shown = try run("/usr/bin/psql", [database.url, "-At", "-c", "SHOW synchronous_commit"])
        #expect(shown.standardOutput == "off\n", "a new session of the database gets off: \(shown)")
        let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent)
        let setting: String
        do {
            setting = try await storage.pushSynchronousCommit()
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
        #expect(setting == "on")
    }
}

extension Result<PushOutcome, CloudError> {
    fileprivate var isHistoryMismatch: Bool {
        guard case .failure(let error) = self else { return false }
        return error.isHistoryMismatch
    }
}
