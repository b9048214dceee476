import Foundation
import KVCloud
import KVPostgres
import KVStore
import KVTestSupport
import Logging
import Testing

/// A removed key's history on the storages whose clock a test can set (the server's own
/// storages; over HTTP the clock is the server process's): shown for 30 days after the remote
/// accepted the removal, none after, and a key written again starts a new history, whether or
/// not a sweep has run.
@Suite("Removed keys' history and the remote's clock", .hangGuard)
struct KeyHistoryRetentionTests {
    enum Kind: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case memory, sqlite, postgres
        var testDescription: String { rawValue }
    }

    private static let day: Int64 = 86_400_000
    private static let minute: Int64 = 60_000
    private static let start: Int64 = 1_795_000_000_000

    private func withLog(_ kind: Kind, _ body: (any ChangeLog, String, RemoteClock) async throws -> Void) async throws {
        let directory = TemporaryDirectory("kvsfs-retention")
        defer { directory.remove() }
        let clock = RemoteClock(Self.start)
        let admission = AdmissionPolicy(now: { clock.reading })
        switch kind {
        case .memory:
            let storage = MemoryCloudStorage(admission: admission)
            try await body(EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }, "default", clock)
        case .sqlite:
            let path = directory.path + "/cloud.sqlite"
            try await body(EmbeddedChangeLog(description: path, clock: ContinuousClock()) { () throws(CloudError) in
                try SQLiteCloudStorage(path: path, admission: admission)
            }, "default", clock)
        case .postgres:
            let database = try TestDatabase(.postgres, in: directory)
            defer { database.remove() }
            let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent,
                                                               admission: admission)
            do {
                try await body(storage, "alice.default", clock)
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        }
    }

    private func change(_ key: String, _ text: String, _ clock: RemoteClock) -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: clock.reading, counter: 0, device: "a"))
    }

    @Test("shown for 30 days after the removal was accepted; written again after, the key's history starts anew", arguments: Kind.allCases)
    func removedKey(_ kind: Kind) async throws {
        try await withLog(kind) { log, store, clock in
            _ = try await log.push([change("k", "old", clock)], to: store)
            clock.advance(Self.minute)
            _ = try await log.push([.tombstone("k", stamp: ChangeStamp(time: clock.reading, counter: 0, device: "a"))], to: store)
            // A push half an hour before the removal's 30 days are up: any sweep is done then.
            clock.advance(30 * Self.day - 30 * Self.minute)
            _ = try await log.push([change("other", "x", clock)], to: store)
            #expect(try await log.history(of: "k", in: store).map(\.isRemoval) == [true, false])
            clock.advance(40 * Self.minute)
            #expect(try await log.history(of: "k", in: store).isEmpty, "30 days and 10 minutes after")
            _ = try await log.push([change("k", "back", clock)], to: store)
            let history = try await log.history(of: "k", in: store)
            #expect(history.count == 1 && history.first?.isRemoval == false, "\(history)")
        }
    }

    @Test("PostgreSQL: a policy broken by another program is mended only by naming its broken parts; a partial change sets nothing")
    func brokenPolicyOnPostgres() async throws {
        let directory = TemporaryDirectory("kvsfs-policy")
        defer { directory.remove() }
        let database = try TestDatabase(.postgres, in: directory)
        defer { database.remove() }
        let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent)
        do {
            try await mendBrokenPolicy(storage, database)
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }

    private func mendBrokenPolicy(_ storage: PostgresServerStorage, _ database: TestDatabase) async throws {
        _ = try await storage.changeHistoryPolicy(HistoryPolicyChange(), of: "alice.default")
        let broken = try run("/usr/bin/psql", [database.url, "-v", "ON_ERROR_STOP=1", "-q", "-c", """
            ALTER TABLE kvsfs_store DROP CONSTRAINT kvsfs_store_history_versions_check, DROP CONSTRAINT kvsfs_store_history_days_check;
            UPDATE kvsfs_store SET history_versions = 0, history_days = -5
            """])
        #expect(broken.status == 0, "\(broken)")
        await #expect(throws: CloudError.refused("nothing was set: the store's history policy would still be outside the rule (a history of 0 versions per key (1 to 1000 allowed)); name that part too")) {
            _ = try await storage.changeHistoryPolicy(HistoryPolicyChange(retentionDays: 7), of: "alice.default")
        }
        let mended = try await storage.changeHistoryPolicy(HistoryPolicyChange(versions: 3, retentionDays: 7), of: "alice.default")
        #expect(mended == HistoryPolicy(versions: 3, retentionDays: 7))
        #expect(try await storage.historyPolicy(of: "alice.default") == mended)
    }
}
