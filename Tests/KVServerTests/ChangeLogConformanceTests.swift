import Foundation
import KVCloud
import KVPostgres
import KVServer
import KVStore
import KVSync
import KVTestSupport
import Logging
import Testing

/// One behaviour, four change logs: in memory and in a SQLite file (`EmbeddedChangeLog`), in
/// PostgreSQL (a server's storage, on $KVSFS_TEST_POSTGRES), and over HTTP from a real
/// `kvsfs serve` (`HTTPChangeLog`). Whatever a mount or a server relies on of a log is here.
/// The sync tests' fakes pass too, with no fault scheduled: a memory log behind them is `wrapped`.
@Suite("The change log protocol", .hangGuard)
struct ChangeLogConformanceTests {
    enum Kind: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case memory, sqlite, postgres, http, wrapped
        var testDescription: String { rawValue }
    }

    /// `log` behind the sync tests' fakes, online and with no fault scheduled.
    static func wrapped(_ log: any ChangeLog) -> any ChangeLog {
        InterruptibleRemote(FaultyRemote(log, seed: 1, faultPercent: 0))
    }

    /// Runs `body` with a fresh, empty log of `kind` and the name of a store in it; always
    /// removes what it made.
    func withLog(_ kind: Kind, _ body: (any ChangeLog, String) async throws -> Void) async throws {
        let directory = TemporaryDirectory("kvsfs-changelog")
        defer { directory.remove() }
        switch kind {
        case .memory:
            let storage = MemoryCloudStorage()
            try await body(EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }, "default")
        case .wrapped:
            let storage = MemoryCloudStorage()
            try await body(Self.wrapped(EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }), "default")
        case .sqlite:
            try await body(EmbeddedChangeLog.file(path: directory.path + "/cloud.sqlite", store: "default"), "default")
        case .postgres:
            let database = try TestDatabase(.postgres, in: directory)
            defer { database.remove() }
            let storage = try await PostgresServerStorage.open(try PostgresLocation(url: database.url), logger: Logger.silent)
            do {
                try await body(storage, "alice.default")
            } catch {
                await storage.close()
                throw error
            }
            await storage.close()
        case .http:
            let database = try TestDatabase(.sqlite, in: directory)
            let server = try ServerProcess(database: database.url)
            defer { _ = server.stop() }
            let token = try server.admin(["account", "create", "alice"])
            try await body(HTTPChangeLog(url: server.url, token: token), "default")
        }
    }

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func change(_ key: String, _ text: String, time: Int64 = now, device: String = "a") -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device))
    }

    @Test("pushed changes are read back after the cursor, oldest first, with the mark of the last", arguments: Kind.allCases)
    func pushAndRead(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            #expect(try await log.cursor(of: store) == 0)
            let a = change("a", "one"), b = change("b", "two")
            let outcome = try await log.push([a, b], to: store)
            #expect(Set(outcome.accepted) == [a, b] && outcome.refused.isEmpty)
            let batch = try await log.changes(in: store, after: 0, limit: 100)
            #expect(batch.changes.map(\.key).sorted() == ["a", "b"])
            #expect(batch.complete)
            #expect(batch.cursor == (try await log.cursor(of: store)) && batch.cursor == outcome.cursorAfter)
            #expect(batch.mark?.key == batch.changes.last?.key && batch.mark?.cursor == batch.cursor)
            let after = try await log.changes(in: store, after: batch.cursor, limit: 100)
            #expect(after.changes.isEmpty && after.complete && after.cursor == batch.cursor)
        }
    }

    @Test("an older change never replaces a newer one, and pushing twice changes nothing", arguments: Kind.allCases)
    func merge(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let newer = change("k", "newer", time: Self.now)
            let older = change("k", "older", time: Self.now - 1000, device: "b")
            _ = try await log.push([newer], to: store)
            let cursor = try await log.cursor(of: store)
            #expect(try await log.push([older], to: store).accepted == [older], "accepted: the log has something newer")
            #expect(try await log.push([newer], to: store).accepted == [newer])
            #expect(try await log.cursor(of: store) == cursor)
            #expect(try await log.changes(in: store, after: 0, limit: 10).changes == [newer])
        }
    }

    @Test("a change that breaks a quota is refused with a reason, and nothing is stored", arguments: Kind.allCases)
    func quota(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let long = change(String(repeating: "k", count: QuotaLimits.modelled.keyNameBytes + 1), "v")
            let outcome = try await log.push([long], to: store)
            #expect(outcome.accepted.isEmpty)
            #expect(outcome.refused.map(\.change) == [long] && outcome.refused.first?.current == nil)
            #expect(outcome.refused.first?.reason.isEmpty == false)
            #expect(try await log.changes(in: store, after: 0, limit: 10).changes.isEmpty)
        }
    }

    @Test("changes come at most `limit` at a time, complete only with the last", arguments: Kind.allCases)
    func pages(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            _ = try await log.push((0..<5).map { change("k\($0)", "\($0)") }, to: store)
            var cursor: Int64 = 0
            var read: [String] = []
            var pages = 0
            while true {
                let batch = try await log.changes(in: store, after: cursor, limit: 2)
                pages += 1
                #expect(batch.changes.count <= 2)
                read += batch.changes.map(\.key)
                cursor = batch.cursor
                if batch.complete { break }
            }
            #expect(read.sorted() == ["k0", "k1", "k2", "k3", "k4"] && pages == 3)
        }
    }

    @Test("a reader past the log's end or with a mark that does not fit is told so, and its push stores nothing",
          arguments: Kind.allCases)
    func history(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            _ = try await log.push([change("a", "one")], to: store)
            let batch = try await log.changes(in: store, after: 0, limit: 10)
            let fits = try #require(batch.mark)
            await expectMismatch { () throws(CloudError) in _ = try await log.changes(in: store, after: batch.cursor + 10, mark: nil, limit: 10) }

            var other = fits
            other.stamp.time -= 1
            await expectMismatch { () throws(CloudError) in _ = try await log.changes(in: store, after: batch.cursor, mark: other, limit: 10) }
            await expectMismatch { () throws(CloudError) in _ = try await log.push([change("b", "two")], to: store, mark: other) }
            #expect(try await log.cursor(of: store) == batch.cursor, "the push with another history stored nothing")

            _ = try await log.changes(in: store, after: batch.cursor, mark: fits, limit: 10)
            #expect(try await log.push([change("b", "two")], to: store, mark: fits).accepted.count == 1)
        }
    }

    private func expectMismatch(_ body: () async throws(CloudError) -> Void, sourceLocation: SourceLocation = #_sourceLocation) async {
        do {
            try await body()
            Issue.record("no history mismatch", sourceLocation: sourceLocation)
        } catch {
            #expect(error.isHistoryMismatch, "\(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("100 pushes at once, one with a mark that does not fit: each is answered as if alone, and the log holds the newest of each key",
          arguments: Kind.allCases)
    func concurrentPushes(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            _ = try await log.push([change("m", "marked")], to: store)
            var mark = try #require(try await log.changes(in: store, after: 0, limit: 10).mark)
            mark.stamp.time -= 1
            let stale = mark
            let base = Self.now
            // Push i writes k(i % 10) and its own key; later pushes carry later stamps.
            let pushes = (0..<100).map { i in
                [change("k\(i % 10)", "v\(i)", time: base + Int64(i)), change("own\(i)", "v\(i)", time: base + Int64(i))]
            }
            let outcomes = try await withThrowingTaskGroup(of: (Int, PushOutcome?).self) { group in
                for (i, changes) in pushes.enumerated() {
                    group.addTask {
                        if i == 50 {
                            do {
                                _ = try await log.push(changes, to: store, mark: stale)
                            } catch let error as CloudError where error.isHistoryMismatch {
                                return (i, nil)
                            }
                            Issue.record("the push with a mark that does not fit was taken")
                            return (i, nil)
                        }
                        return (i, try await log.push(changes, to: store))
                    }
                }
                var outcomes = [Int: PushOutcome?]()
                for try await (i, outcome) in group { outcomes[i] = outcome }
                return outcomes
            }
            for i in 0..<100 where i != 50 {
                let outcome = try #require(outcomes[i] ?? nil)
                #expect(Set(outcome.accepted) == Set(pushes[i]) && outcome.refused.isEmpty, "push \(i)")
            }
            var latest = [String: StampedChange]()
            var cursor: Int64 = 0
            while true {
                let batch = try await log.changes(in: store, after: cursor, limit: 1000)
                for change in batch.changes { latest[change.key] = change }
                cursor = batch.cursor
                if batch.complete { break }
            }
            #expect(latest["own50"] == nil, "the refused push stored nothing")
            #expect(latest.count == 1 + 10 + 99)
            for key in 0..<10 {
                let newest = (0..<100).filter { $0 % 10 == key && $0 != 50 }.max()!
                #expect(latest["k\(key)"] == pushes[newest][0])
            }
            #expect(cursor == (try await log.cursor(of: store)))
        }
    }

    @Test("a wait ends as soon as a change lands, and with false once its time is up", arguments: Kind.allCases)
    func wait(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            _ = try await log.push([change("a", "one")], to: store)
            let cursor = try await log.cursor(of: store)
            let clock = ContinuousClock()
            let started = clock.now
            #expect(try await log.waitForChanges(in: store, after: cursor, mark: nil, timeout: .milliseconds(300)) == false)
            #expect(clock.now - started >= .milliseconds(250))

            #expect(try await log.waitForChanges(in: store, after: 0, mark: nil, timeout: .seconds(60)), "changes are there already")

            // True only for a change: its time running out is false.
            let waiting = Task { try await log.waitForChanges(in: store, after: cursor, mark: nil, timeout: .seconds(60)) }
            try await Task.sleep(for: .milliseconds(200))
            _ = try await log.push([change("b", "two")], to: store)
            #expect(try await waiting.value)
            let batch = try await log.changes(in: store, after: cursor, limit: 10)
            #expect(batch.changes.map(\.key) == ["b"])
        }
    }

    @Test("waits side by side each end: a cancelled one with false, at once, the other when the change lands",
          arguments: Kind.allCases)
    func waitsSideBySide(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let cursor = try await log.cursor(of: store)
            let cancelled = Task { try await log.waitForChanges(in: store, after: cursor, mark: nil, timeout: .seconds(60)) }
            try await Task.sleep(for: .milliseconds(300))  // the first is waiting (over HTTP, on the stream it opened)
            let other = Task { try await log.waitForChanges(in: store, after: cursor, mark: nil, timeout: .seconds(60)) }
            try await Task.sleep(for: .milliseconds(300))
            cancelled.cancel()
            #expect(try await cancelled.value == false)
            _ = try await log.push([change("a", "one")], to: store)
            #expect(try await other.value, "the other wait heard the change")
        }
    }

    /// A device back from a long time offline pushes many changes to keys the log holds (here
    /// deletions, which no key quota bounds): the push is taken whole, in one decision.
    @Test("a push of 10,000 changes (the most one request carries) to keys the log holds is taken whole", arguments: Kind.allCases)
    func largePush(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            func deletions(at time: Int64) -> [StampedChange] {
                (0..<10_000).map { StampedChange.tombstone("k\($0)", stamp: ChangeStamp(time: time, counter: 0, device: "a")) }
            }
            #expect(try await log.push(deletions(at: Self.now - 1000), to: store).accepted.count == 10_000)
            let outcome = try await log.push(deletions(at: Self.now), to: store)
            #expect(outcome.accepted.count == 10_000 && outcome.refused.isEmpty)
            #expect(try await log.cursor(of: store) == 20_000)
        }
    }

    @Test("the identity is stable, and renewing one the log no longer has changes nothing", arguments: Kind.allCases)
    func identity(_ kind: Kind) async throws {
        try await withLog(kind) { log, _ in
            let identity = try await log.identity()
            #expect(!identity.isEmpty)
            #expect(try await log.identity() == identity)
            #expect(try await log.renewIdentity(replacing: "not-the-identity") == false)
            #expect(try await log.identity() == identity)
        }
    }

    @Test("a deletion of a key the log does not hold is stored, and passes over an older value pushed after it",
          arguments: Kind.allCases)
    func tombstoneOfUnknownKey(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let tombstone = StampedChange.tombstone("ghost", stamp: ChangeStamp(time: Self.now, counter: 0, device: "a"))
            let outcome = try await log.push([tombstone], to: store)
            #expect(outcome.accepted == [tombstone] && outcome.notStored.isEmpty)
            #expect(try await log.changes(in: store, after: 0, limit: 10).changes == [tombstone])
            let cursor = try await log.cursor(of: store)
            _ = try await log.push([change("ghost", "older", time: tombstone.stamp.time - 1000, device: "b")], to: store)
            #expect(try await log.cursor(of: store) == cursor)
        }
    }

    @Test("a store name outside the rule is refused", arguments: Kind.allCases)
    func storeName(_ kind: Kind) async throws {
        try await withLog(kind) { log, _ in
            do throws(CloudError) {
                _ = try await log.push([change("a", "one")], to: "x!y")
                Issue.record("a push to x!y was taken")
            } catch {
                switch error {
                case .invalidStoreName, .refused: break
                default: Issue.record("\(error)")
                }
            }
        }
    }
}
