import Foundation
@testable import KVServer
import KVCloud
import KVStore
import KVTestSupport
import Synchronization
import Testing

/// Event streams at the same place share their reads of the storage (`StoreReads`) and their
/// looks again at their tokens (`TokenRechecks`): what a thousand watchers of one store cost
/// the server is one read per change, not a thousand.
@Suite("Reads shared by event streams", .hangGuard)
struct StoreReadsTests {
    /// A read of the storage that counts itself and waits for `release` before it answers.
    final class Reads: Sendable {
        let count = Atomic(0)
        let release = Mutex(false)

        func batch(after cursor: Int64, changes: Int) async throws -> ChangeBatch {
            count.add(1, ordering: .relaxed)
            while !release.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            let written = (0..<changes).map { index in
                StampedChange(key: "k\(index)", value: nil, type: nil, stamp: ChangeStamp(time: 1000, counter: Int32(index), device: "d"))
            }
            return ChangeBatch(changes: written, cursor: cursor + Int64(changes), complete: true)
        }
    }

    @Test("a thousand streams at one cursor share one read and its event; a read that found changes serves later streams too")
    func sharedRead() async throws {
        let shared = StoreReads()
        let reads = Reads()
        let results = try await withThrowingTaskGroup(of: StoreReads.Read.self) { group in
            for _ in 0..<1000 {
                group.addTask { try await shared.read(of: "s", after: 7, seen: 3) { try await reads.batch(after: 7, changes: 2) } }
            }
            try await Task.sleep(for: .milliseconds(50))
            reads.release.withLock { $0 = true }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(reads.count.load(ordering: .relaxed) == 1)
        #expect(Set(results.map(\.upTo)) == [9] && results.allSatisfy { $0.complete && $0.seen == 3 && $0.event != nil })
        let later = try await shared.read(of: "s", after: 7, seen: 5) { try await reads.batch(after: 7, changes: 2) }
        #expect(reads.count.load(ordering: .relaxed) == 1 && later.upTo == 9 && later.seen == 3,
                "kept: still right, and its version says a wait from there must not sleep past later changes")
        _ = try await shared.read(of: "other", after: 7, seen: 5) { try await reads.batch(after: 7, changes: 2) }
        #expect(reads.count.load(ordering: .relaxed) == 2, "another store reads for itself")
    }

    @Test("a read that found nothing, or failed, is shared only while it runs")
    func emptyOrFailedNotKept() async throws {
        let shared = StoreReads()
        let reads = Reads()
        reads.release.withLock { $0 = true }
        let empty = try await shared.read(of: "s", after: 9, seen: 4) { try await reads.batch(after: 9, changes: 0) }
        #expect(empty.event == nil && empty.upTo == 9 && empty.seen == 4)
        let again = try await shared.read(of: "s", after: 9, seen: 6) { try await reads.batch(after: 9, changes: 1) }
        #expect(reads.count.load(ordering: .relaxed) == 2 && again.upTo == 10 && again.seen == 6, "the push since is read")

        await #expect(throws: CloudError.unavailable("down")) {
            try await shared.read(of: "t", after: 0, seen: 0) { throw CloudError.unavailable("down") }
        }
        let recovered = try await shared.read(of: "t", after: 0, seen: 1) { try await reads.batch(after: 0, changes: 1) }
        #expect(recovered.upTo == 1)
    }

    /// A token table that counts its lookups, and a revocation.
    final class Tokens: Sendable {
        let lookups = Atomic(0)
        let revoked = Atomic(false)
        let rechecks = TokenRechecks()
        let record = TokenRecord(id: "t", secretHash: "h", scope: TokenScope(account: "a", store: nil, readOnly: false), createdAt: Date())

        func look() async throws -> TokenRecord? {
            try await rechecks.record("t") { () throws(AccountError) -> TokenRecord? in
                try? await Task.sleep(for: .milliseconds(20))  // long enough for the others to ask meanwhile
                self.lookups.add(1, ordering: .relaxed)
                return self.revoked.load(ordering: .relaxed) ? nil : self.record
            }
        }
    }

    @Test("a token's streams asking at once share one lookup; a revocation is seen once half a second has passed")
    func tokenRechecks() async throws {
        let tokens = Tokens()
        let together = try await withThrowingTaskGroup(of: TokenRecord?.self) { group in
            for _ in 0..<100 { group.addTask { try await tokens.look() } }
            return try await group.reduce(into: [TokenRecord?]()) { $0.append($1) }
        }
        #expect(together.count == 100 && together.allSatisfy { $0 == tokens.record })
        #expect(tokens.lookups.load(ordering: .relaxed) == 1, "streams asking at once await the one lookup")
        tokens.revoked.store(true, ordering: .relaxed)
        try await Task.sleep(for: TokenRechecks.maximumAge + .milliseconds(50))
        #expect(try await tokens.look() == nil)
        #expect(tokens.lookups.load(ordering: .relaxed) == 2)
    }
}
