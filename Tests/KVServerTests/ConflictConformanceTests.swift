import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import Testing

/// The conflict rule (`ConflictRule`) as every change log applies it: in memory, in a SQLite
/// file, in PostgreSQL and over HTTP.
@Suite("Kept conflicts in every change log", .hangGuard)
struct ConflictConformanceTests {
    typealias Kind = ChangeLogConformanceTests.Kind

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func change(_ key: String, _ text: String?, time: Int64, device: String, replaces: Replaced?) -> StampedChange {
        StampedChange(key: key, value: text.map { Data(try! PropertyListCodec.encodeXML(.string($0))) }, type: text == nil ? nil : .string,
                      stamp: ChangeStamp(time: time, counter: 0, device: device), replaces: replaces)
    }

    /// The key's row as the log gives it now.
    func row(_ key: String, in log: any ChangeLog, _ store: String) async throws -> StampedChange? {
        try await log.changes(in: store, after: 0, limit: 100).changes.first { $0.key == key }
    }

    @Test("a change that loses to a concurrent one is kept with the winner, given again at a new cursor, no new version", arguments: Kind.allCases)
    func loserKept(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let winner = change("k", "phone", time: Self.now, device: "phone", replaces: .nothing)
            let loser = change("k", "laptop", time: Self.now - 500, device: "laptop", replaces: .nothing)
            _ = try await log.push([winner], to: store)
            let before = try await log.cursor(of: store)
            let outcome = try await log.push([loser], to: store)
            #expect(outcome.accepted == [loser] && outcome.refused.isEmpty)
            #expect(outcome.cursorBefore == nil, "the pusher must fetch the winner: its rows are not its changes as sent")
            #expect(try await log.cursor(of: store) == before + 1)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.kept == winner.kept)
            #expect(given.lost == [loser.kept])
            #expect(try await log.history(of: "k", in: store).map(\.stamp) == [winner.stamp], "a lost change is no version")
        }
    }

    @Test("a concurrent change that wins keeps the change it replaced as lost, a removal too", arguments: Kind.allCases)
    func winnerKeepsLoser(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let first = change("k", "first", time: Self.now - 500, device: "laptop", replaces: .nothing)
            let removal = change("k", nil, time: Self.now, device: "phone", replaces: .nothing)
            _ = try await log.push([first], to: store)
            _ = try await log.push([removal], to: store)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.isTombstone && given.stamp == removal.stamp)
            #expect(given.lost == [first.kept])
        }
    }

    @Test("a change made after its writer held the winner is sequential: no conflict, and it settles an open one", arguments: Kind.allCases)
    func sequentialSettles(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let first = change("k", "first", time: Self.now - 900, device: "laptop", replaces: .nothing)
            let second = change("k", "second", time: Self.now - 500, device: "phone", replaces: .change(first.stamp))
            _ = try await log.push([first], to: store)
            let outcome = try await log.push([second], to: store)
            #expect(outcome.cursorBefore != nil, "nothing but the pusher's own change: it need not fetch")
            #expect(try await row("k", in: log, store)?.lost == [])

            let concurrent = change("k", "third", time: Self.now - 400, device: "tablet", replaces: .change(first.stamp))
            _ = try await log.push([concurrent], to: store)
            #expect(try await row("k", in: log, store)?.lost == [second.kept], "the tablet never held the phone's change")

            // The desk held the tablet's change but was never shown the phone's, which lost to it:
            // that goes on with the desk's change.
            let unseen = change("k", "unseen", time: Self.now - 200, device: "desk", replaces: .change(concurrent.stamp))
            _ = try await log.push([unseen], to: store)
            #expect(try await row("k", in: log, store)?.lost == [second.kept], "a change lets go only of what its writer was shown")

            var settling = change("k", "settled", time: Self.now - 100, device: "laptop", replaces: .change(unseen.stamp))
            settling.settles = [second.stamp]
            _ = try await log.push([settling], to: store)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.stamp == settling.stamp && given.lost.isEmpty)
        }
    }

    @Test("a device's change after its own is never a conflict; nor is one that does not say what it replaced", arguments: Kind.allCases)
    func neverConflicts(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let mine = change("k", "mine", time: Self.now - 900, device: "laptop", replaces: .nothing)
            let mineAgain = change("k", "mine again", time: Self.now - 800, device: "laptop", replaces: .nothing)
            _ = try await log.push([mine], to: store)
            _ = try await log.push([mineAgain], to: store)
            #expect(try await row("k", in: log, store)?.lost == [])
            let unsaid = change("k", "older kvsfs", time: Self.now - 700, device: "old", replaces: nil)
            let unknown = change("k", "upgraded", time: Self.now - 600, device: "upgraded", replaces: .unknown)
            _ = try await log.push([unsaid], to: store)
            _ = try await log.push([unknown], to: store)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.stamp == unknown.stamp && given.lost.isEmpty)
        }
    }

    @Test("of several changes that lost, each device's newest is kept, newest first; pushing one twice gives the same", arguments: Kind.allCases)
    func everyDevicesLoserKept(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let now = Self.now
            let winner = change("k", "winner", time: now, device: "phone", replaces: .nothing)
            let laptop = change("k", "laptop", time: now - 900, device: "laptop", replaces: .nothing)
            let tablet = change("k", "tablet", time: now - 500, device: "tablet", replaces: .nothing)
            let laptopAgain = change("k", "laptop again", time: now - 700, device: "laptop", replaces: .nothing)
            _ = try await log.push([winner], to: store)
            _ = try await log.push([tablet], to: store)
            _ = try await log.push([laptop], to: store)
            #expect(try await row("k", in: log, store)?.lost == [tablet.kept, laptop.kept])
            let before = try await log.cursor(of: store)
            _ = try await log.push([tablet], to: store)
            #expect(try await log.cursor(of: store) == before, "a change kept already is not given again")
            _ = try await log.push([laptopAgain], to: store)
            _ = try await log.push([laptop], to: store)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.lost == [tablet.kept, laptopAgain.kept], "the laptop held its own first change")
            #expect(given.kept == winner.kept)
        }
    }

    @Test("a concurrent change that wins takes on what lost before it; a change lets go of the one it replaced", arguments: Kind.allCases)
    func losersCarriedOver(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let now = Self.now
            let first = change("k", "first", time: now - 900, device: "laptop", replaces: .nothing)
            let second = change("k", "second", time: now - 600, device: "phone", replaces: .nothing)
            let third = change("k", "third", time: now - 300, device: "tablet", replaces: .nothing)
            for pushed in [first, second, third] { _ = try await log.push([pushed], to: store) }
            #expect(try await row("k", in: log, store)?.lost == [second.kept, first.kept])
            // The laptop held the phone's change, not the tablet's: it wins, concurrent with the
            // tablet's, and lets go of the phone's and of its own first one.
            let fourth = change("k", "fourth", time: now, device: "laptop", replaces: .change(second.stamp))
            _ = try await log.push([fourth], to: store)
            let given = try #require(try await row("k", in: log, store))
            #expect(given.stamp == fourth.stamp && given.lost == [third.kept])
        }
    }

    @Test("a change that loses settles nothing, whatever it says it settles", arguments: Kind.allCases)
    func loserSettlesNothing(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let now = Self.now
            let winner = change("k", "winner", time: now, device: "phone", replaces: .nothing)
            let kept = change("k", "kept", time: now - 900, device: "laptop", replaces: .nothing)
            var forged = change("k", "forged", time: now - 500, device: "tablet", replaces: .nothing)
            forged.settles = [kept.stamp]
            for pushed in [winner, kept, forged] { _ = try await log.push([pushed], to: store) }
            #expect(try await row("k", in: log, store)?.lost == [forged.kept, kept.kept])
        }
    }

    @Test("a key keeps the changes of at most 8 devices that lost: a ninth is refused, with why", arguments: Kind.allCases)
    func keptChangesBounded(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let now = Self.now
            let winner = change("k", "winner", time: now, device: "phone", replaces: .nothing)
            _ = try await log.push([winner], to: store)
            let losers = (0..<KeptChangeList.maximumCount).map { change("k", "v\($0)", time: now - 900 + Int64($0), device: "d\($0)", replaces: .nothing) }
            for loser in losers { _ = try await log.push([loser], to: store) }
            let ninth = change("k", "ninth", time: now - 100, device: "ninth", replaces: .nothing)
            let outcome = try await log.push([ninth], to: store)
            #expect(outcome.accepted.isEmpty)
            #expect(outcome.refused.first?.reason.contains("settle its conflict first") == true, "\(outcome.refused)")
            #expect(try await row("k", in: log, store)?.lost == losers.reversed().map(\.kept))
        }
    }

    @Test("a concurrent change that wins and agrees with the change it replaced keeps what lost to that one", arguments: Kind.allCases)
    func agreeingWinnerKeepsLosers(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            let now = Self.now
            let removal = change("k", nil, time: now - 500, device: "laptop", replaces: .nothing)
            let kept = change("k", "kept", time: now - 600, device: "phone", replaces: .nothing)
            let sameRemoval = change("k", nil, time: now - 400, device: "tablet", replaces: .nothing)
            for pushed in [removal, kept, sameRemoval] { _ = try await log.push([pushed], to: store) }
            let given = try #require(try await row("k", in: log, store))
            #expect(given.stamp == sameRemoval.stamp && given.lost == [kept.kept], "the phone's value is never let go unseen")
        }
    }

    @Test("two concurrent removals, or the same value written twice, agree: no conflict", arguments: Kind.allCases)
    func agreeing(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            _ = try await log.push([change("gone", "v", time: Self.now - 900, device: "laptop", replaces: .nothing)], to: store)
            let base = try #require(try await row("gone", in: log, store)).stamp
            _ = try await log.push([change("gone", nil, time: Self.now - 500, device: "phone", replaces: .change(base))], to: store)
            _ = try await log.push([change("gone", nil, time: Self.now - 600, device: "tablet", replaces: .change(base))], to: store)
            _ = try await log.push([change("same", "v", time: Self.now - 500, device: "phone", replaces: .nothing)], to: store)
            _ = try await log.push([change("same", "v", time: Self.now - 400, device: "tablet", replaces: .nothing)], to: store)
            #expect(try await row("gone", in: log, store)?.lost == [])
            #expect(try await row("same", in: log, store)?.lost == [])
        }
    }

    @Test("a pushed change cannot name what lost to it: the rule decides", arguments: Kind.allCases)
    func pushedLostIgnored(_ kind: Kind) async throws {
        try await ChangeLogConformanceTests().withLog(kind) { log, store in
            var forged = change("k", "v", time: Self.now, device: "laptop", replaces: .nothing)
            forged.lost = [KeptChange(value: nil, type: nil, stamp: ChangeStamp(time: Self.now - 1, counter: 0, device: "ghost"))]
            _ = try await log.push([forged], to: store)
            #expect(try await row("k", in: log, store)?.lost == [])
        }
    }
}
