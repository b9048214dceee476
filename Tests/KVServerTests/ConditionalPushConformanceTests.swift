import Foundation
import KVCloud
import KVStore
import Testing

/// Conditional changes, on every change log: what `kvsfs set --if-version`, `kvsfs delete
/// --if-version` and `kvsfs import --if-unchanged-since` rely on. The log judges the condition
/// where it stores the change, so of two devices racing on one version exactly one wins.
extension ChangeLogConformanceTests {
    /// `change` on `condition`.
    func conditional(_ change: StampedChange, _ condition: ChangeCondition) -> StampedChange {
        var conditional = change
        conditional.condition = condition
        return conditional
    }

    /// The stored value of `key` as the log gives it, nil when it holds none.
    func stored(_ key: String, in log: any ChangeLog, _ store: String) async throws -> Data? {
        try await log.changes(in: store, after: 0, limit: 100).changes.last { $0.key == key }?.value
    }

    @Test("a change on the key's version is stored as its next version; on another version it is refused in words, and nothing is stored",
          arguments: Kind.allCases)
    func conditionOnVersion(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let start = Self.now - 10_000
            let first = try #require(try await log.push([change("k", "one", time: start)], to: store).cursorAfter)
            #expect(try await log.history(of: "k", in: store).first?.version == first)

            let won = conditional(change("k", "two", time: start + 1000, device: "b"), .version(first))
            let outcome = try await log.push([won], to: store)
            #expect(outcome.accepted.map(\.stamp) == [won.stamp] && outcome.refused.isEmpty)
            let second = try #require(outcome.cursorAfter)
            #expect(try await log.history(of: "k", in: store).map(\.version) == [second, first])

            let stale = conditional(change("k", "three", time: start + 2000, device: "c"), .version(first))
            let refused = try await log.push([stale], to: store)
            #expect(refused.accepted.isEmpty)
            let refusal = try #require(refused.refusal(of: "k"))
            #expect(refusal.reason == "the key moved on: its latest version on the remote is \(second), not \(first)", "\(refusal.reason)")
            #expect(refusal.current?.stamp == won.stamp, "the pusher learns what the key holds")
            #expect(try await log.cursor(of: store) == second)
            #expect(try await stored("k", in: log, store) == won.value)
            #expect(!refusal.reason.contains("ChangeCondition") && !refusal.reason.contains("StampedChange"))
        }
    }

    @Test("absent holds on a key never written and on a removed key, and not on a key with a value", arguments: Kind.allCases)
    func conditionAbsent(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let start = Self.now - 10_000
            let new = conditional(change("k", "one", time: start), .absent)
            let created = try await log.push([new], to: store)
            #expect(created.accepted.map(\.stamp) == [new.stamp] && created.refused.isEmpty)
            let version = try #require(created.cursorAfter)

            let taken = try await log.push([conditional(change("k", "two", time: start + 1000, device: "b"), .absent)], to: store)
            #expect(taken.accepted.isEmpty)
            #expect(taken.refusal(of: "k")?.reason == "the key moved on: the remote holds a value of it, at version \(version)")
            #expect(try await stored("k", in: log, store) == new.value)

            let removal = StampedChange.tombstone("k", stamp: ChangeStamp(time: start + 2000, counter: 0, device: "a"))
            _ = try await log.push([removal], to: store)
            let again = conditional(change("k", "three", time: start + 3000, device: "c"), .absent)
            let recreated = try await log.push([again], to: store)
            #expect(recreated.accepted.map(\.stamp) == [again.stamp] && recreated.refused.isEmpty)
            #expect(try await stored("k", in: log, store) == again.value)
        }
    }

    @Test("a key's version is the one history shows, even after the key's row was given again with a conflict", arguments: Kind.allCases)
    func conditionAfterConflict(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let start = Self.now - 10_000
            let winner = change("k", "winner", time: start + 1000, device: "a")
            let version = try #require(try await log.push([winner], to: store).cursorAfter)
            // Made elsewhere without having seen the winner: kept as its conflict, at a new cursor.
            var loser = change("k", "loser", time: start, device: "b")
            loser.replaces = .nothing
            _ = try await log.push([loser], to: store)
            #expect(try await log.cursor(of: store) > version, "the row was given again")
            #expect(try await log.history(of: "k", in: store).first?.version == version)

            let next = conditional(change("k", "next", time: start + 2000, device: "c"), .version(version))
            let outcome = try await log.push([next], to: store)
            #expect(outcome.accepted.map(\.stamp) == [next.stamp] && outcome.refused.isEmpty, "\(outcome.refused.map(\.reason))")
            #expect(try await stored("k", in: log, store) == next.value)
        }
    }

    @Test("no key changed after the cursor: the push is stored; one key moved: none of it is, the refusal names it", arguments: Kind.allCases)
    func conditionUnchangedSince(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let start = Self.now - 10_000
            let read = try #require(try await log.push([change("a", "a1", time: start), change("b", "b1", time: start)], to: store).cursorAfter)
            _ = try await log.push([change("b", "b2", time: start + 1000, device: "other")], to: store)
            let moved = try await log.cursor(of: store)

            let late = [conditional(change("a", "a3", time: start + 2000), .unchangedSince(read)),
                        conditional(change("b", "b3", time: start + 2000), .unchangedSince(read)),
                        conditional(change("c", "c3", time: start + 2000), .unchangedSince(read))]
            let refused = try await log.push(late, to: store)
            #expect(refused.accepted.isEmpty, "all or nothing: \(refused.accepted.map(\.key))")
            #expect(refused.refusal(of: "b")?.reason == "the key moved on: its latest version on the remote is \(moved), after \(read)")
            for key in ["a", "c"] {
                let reason = try #require(refused.refusal(of: key)?.reason)
                #expect(reason.hasPrefix("not stored: it was pushed together with a change of \"b\", which was refused: the key moved on"), "\(reason)")
            }
            #expect(try await log.cursor(of: store) == moved, "nothing stored")
            #expect(try await stored("a", in: log, store) == change("a", "a1").value)

            let current = late.map { conditional($0, .unchangedSince(moved)) }
            let taken = try await log.push(current, to: store)
            #expect(Set(taken.accepted.map(\.key)) == ["a", "b", "c"] && taken.refused.isEmpty)
            #expect(try await stored("b", in: log, store) == late[1].value)
        }
    }

    @Test("of two changes racing on one version, exactly one is stored; the other is refused saying the key moved on",
          arguments: Kind.allCases)
    func conditionRace(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            let start = Self.now - 10_000
            for round in 0..<4 {
                let key = "race\(round)"
                let version = try #require(try await log.push([change(key, "base", time: start)], to: store).cursorAfter)
                let left = conditional(change(key, "left", time: start + 1000, device: "left"), .version(version))
                let right = conditional(change(key, "right", time: start + 1000, device: "right"), .version(version))
                async let leftOutcome = log.push([left], to: store)
                async let rightOutcome = log.push([right], to: store)
                let outcomes = try await [leftOutcome, rightOutcome]
                let winners = outcomes.flatMap(\.accepted)
                #expect(winners.count == 1, "exactly one wins: \(winners.map(\.stamp.device))")
                let refusals = outcomes.flatMap(\.refused)
                #expect(refusals.count == 1)
                #expect(refusals.first?.reason.hasPrefix("the key moved on: its latest version on the remote is ") == true, "\(refusals)")
                #expect(try await stored(key, in: log, store) == winners.first?.value)
                #expect(try await log.history(of: key, in: store).count == 2, "the base and the winner, nothing else")
            }
        }
    }
}

extension PushOutcome {
    /// The refusal of the change of `key`, if any.
    func refusal(of key: String) -> Refusal? { refused.first { $0.change.key == key } }
}
