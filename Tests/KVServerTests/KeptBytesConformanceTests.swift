import Foundation
import KVCloud
import KVStore
import Testing

/// What a store keeps of conflicts is bounded by its quota, however many devices a writer
/// makes up: the flood of issue 33 (removals of new keys, then older values from made-up
/// device ids) is refused with why once the kept bytes would pass the total quota.
extension ConflictConformanceTests {
    @Test("made-up devices keep at most the store's total quota as conflicts; past it, a push is refused with why",
          arguments: Kind.allCases)
    func keptBytesBounded(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let big = String(repeating: "x", count: 100_000)
            // One clock reading for every stamp: each removal wins over every older value,
            // however slowly the pushes go.
            let start = Self.now
            var keptBytes = 0
            var refusals: [String] = []
            // 2 keys × 8 devices × 100 KB would be 1.6 MB against a quota of 1 MiB.
            for keyIndex in 0..<2 {
                let key = "flood\(keyIndex)"
                _ = try await log.push([change(key, nil, time: start, device: "writer", replaces: .nothing)], to: store)
                for device in 0..<8 {
                    let loser = change(key, big + "\(device)", time: start - 100_000 + Int64(device), device: "made-up-\(device)",
                                       replaces: .nothing)
                    let outcome = try await log.push([loser], to: store)
                    if outcome.refused.isEmpty {
                        keptBytes += loser.size
                    } else {
                        refusals += outcome.refused.map(\.reason)
                    }
                }
            }
            // Counted as stored (the others' list in JSON, values in base64): at most the quota.
            #expect(keptBytes <= QuotaLimits.modelled.totalBytes && keptBytes > QuotaLimits.modelled.totalBytes / 2, "\(keptBytes)")
            #expect(!refusals.isEmpty && refusals.allSatisfy { $0.hasPrefix("the store keeps ") && $0.hasSuffix("settle conflicts first (kvsfs resolve)") },
                    "\(refusals)")
            let rows = try await log.changes(in: store, after: 0, limit: 100).changes
            #expect(rows.flatMap(\.lost).reduce(0) { $0 + $1.size } == keptBytes, "what is kept is what was accepted")

            // Settling a conflict frees its bytes: a new conflict is kept again.
            let first = try #require(rows.first { $0.key == "flood0" })
            var settle = change("flood0", "settled", time: start + 1, device: "writer", replaces: .change(first.stamp))
            settle.settles = first.lost.map(\.stamp)
            #expect(try await log.push([settle], to: store).refused.isEmpty)
            let again = change("flood1", big + "again", time: start - 200_000, device: "made-up-late", replaces: .nothing)
            #expect(try await log.push([again], to: store).refused.isEmpty, "room again once settled")
        }
    }
}
