import Foundation
import KVCloud
import KVStore
@testable import KVSync
import KVTestSupport
import PropertyBased
import Synchronization
import Testing

/// Three replicas, one remote, and random schedules of writes, removals, pushes and fetches,
/// each step taken alone so that a write may fall between a push and its fetch. What each
/// replica knew of a key when it wrote is followed from outside: the stamps its store held.
/// Two writes are concurrent when neither writer knew the other's. After every push the
/// remote's conflicts are those the rule gives from that knowledge alone, every change that
/// lost among them, each device's newest; every kept change was concurrent with the change it
/// lost to, so no sequential write is ever one; and once all have synchronised, every replica
/// shows the remote's values and conflicts.
@Suite("Kept conflicts over random schedules", .hangGuard, .shrinking(false))
struct ConflictPropertyTests {
    private static let tallies = Mutex((conflicts: 0, settled: 0, sequential: 0, severalLost: 0))

    @Test("every concurrent loss is a recorded conflict, no sequential write is, and every replica shows the same")
    func conflictsFollowTheRule() async throws {
        await propertyCheck(count: 25, input: Gen.int(in: 0...Int(Int32.max)).array(of: 20...80)) { operations in
            try await withTemporaryDirectory { dir in
                try await run(operations, in: dir)
            }
        }
        let tally = Self.tallies.withLock { $0 }
        print("conflict schedules: \(tally)")
        #expect(tally.conflicts > 0 && tally.settled > 0 && tally.sequential > 0 && tally.severalLost > 0,
                "schedules met conflicts, several changes lost at once, settlements and sequential writes: \(tally)")
    }

    /// The remote as the rule says it stands: each key's winner, the changes kept as lost
    /// (newest first), and for each change that lost, the change it lost to.
    private struct Model {
        var head = [String: StampedChange]()
        var lost = [String: [KeptChange]]()
        var lostTo = [ChangeStamp: ChangeStamp]()
    }

    private func run(_ operations: [Int], in dir: TemporaryDirectory) async throws {
        let storage = MemoryCloudStorage()
        let keys = ["a", "b", "c"]
        let replicas = try (0..<3).map { index in
            let store = try KeyValueStore(path: dir.subdirectory("r\(index)") + "/store.sqlite")
            let remote = EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage }
            return (store: store, engine: SyncEngine(store: store, remote: remote, remoteStore: "default", applier: StoreApplier(store: store)))
        }
        // Per replica and key, every stamp its store has held; per write, what its writer held.
        var knows = Array(repeating: [String: Set<ChangeStamp>](), count: 3)
        var knewAtWrite = [ChangeStamp: Set<ChangeStamp>]()
        var model = Model()
        func look() {
            for (index, replica) in replicas.enumerated() {
                for key in keys {
                    if let held = replica.store.allChanges(forKey: key) { knows[index][key, default: []].insert(held.stamp) }
                }
            }
        }

        for operation in operations {
            let index = operation % 3
            let replica = replicas[index]
            let key = keys[(operation / 18) % keys.count]
            switch (operation / 3) % 6 {
            case 0, 1, 2:
                let before = knows[index][key] ?? []
                if (operation / 3) % 6 == 2, replica.store.entry(forKey: key) != nil {
                    try replica.store.removeValue(forKey: key)
                } else {
                    try replica.store.put(.integer(operation), forKey: key)
                }
                if let written = replica.store.allChanges(forKey: key), !before.contains(written.stamp) {
                    knewAtWrite[written.stamp] = before
                }
            case 3:
                let pending = replica.store.changesToPush()
                try await replica.engine.push()
                for change in pending { arrive(change, at: &model, knewAtWrite: knewAtWrite) }
                try checkRemote(storage, against: model, knewAtWrite: knewAtWrite)
            case 4:
                try await replica.engine.pull()
            default:
                let pending = replica.store.changesToPush()
                try await replica.engine.synchronize()
                for change in pending { arrive(change, at: &model, knewAtWrite: knewAtWrite) }
                try checkRemote(storage, against: model, knewAtWrite: knewAtWrite)
            }
            look()
        }

        // Twice round: the second lets each replica fetch what the others pushed in the first.
        for _ in 0..<2 {
            for replica in replicas {
                let pending = replica.store.changesToPush()
                try await replica.engine.synchronize()
                for change in pending { arrive(change, at: &model, knewAtWrite: knewAtWrite) }
            }
        }
        try checkRemote(storage, against: model, knewAtWrite: knewAtWrite)
        let remote = try storage.changes(in: "default", after: 0, limit: 1000).changes
        let remoteConflicts = remote.compactMap { change in
            change.lost.isEmpty ? nil : KeyConflict(key: change.key, lost: change.lost, won: change.kept)
        }
        for (index, replica) in replicas.enumerated() {
            #expect(replica.store.conflicts() == remoteConflicts.sorted { $0.key < $1.key }, "replica \(index) shows the remote's conflicts")
            for change in remote {
                #expect(replica.store.allChanges(forKey: change.key)?.stamp == change.stamp, "replica \(index) holds the remote's \(change.key)")
            }
            #expect(replica.store.changesToPush().isEmpty)
        }
    }

    /// The rule, from the writers' knowledge: a pushed change arrives at the key's winner.
    private func arrive(_ change: StampedChange, at model: inout Model, knewAtWrite: [ChangeStamp: Set<ChangeStamp>]) {
        guard let head = model.head[change.key] else {
            model.head[change.key] = change
            return
        }
        guard change.stamp != head.stamp else { return }
        let concurrent = !(knewAtWrite[change.stamp] ?? []).contains(head.stamp)
        // Two removals (or one value twice) agree: no conflict.
        let agree = change.value == head.value && change.type == head.type
        // A writer lets go of the kept change it replaced; a winner also of those it settles.
        let unreplaced = (model.lost[change.key] ?? []).filter { change.replaces != .change($0.stamp) }
        let kept = unreplaced.filter { !change.settles.contains($0.stamp) }
        if change.stamp < head.stamp {
            guard concurrent, !agree else { return }
            let lost = Self.eachDevicesNewest(unreplaced + [change.kept], winner: head)
            if lost != model.lost[change.key] ?? [] {
                model.lost[change.key] = lost
                model.lostTo[change.stamp] = head.stamp
                Self.tallies.withLock {
                    $0.conflicts += 1
                    if lost.count > 1 { $0.severalLost += 1 }
                }
            }
            return
        }
        if concurrent {
            if !agree {
                model.lostTo[head.stamp] = change.stamp
                Self.tallies.withLock { $0.conflicts += 1 }
            }
            model.lost[change.key] = Self.eachDevicesNewest(kept + (agree ? [] : [head.kept]), winner: change)
        } else {
            // What lost before goes on with the new change, but for what its writer held.
            let lost = Self.eachDevicesNewest(kept, winner: change)
            Self.tallies.withLock {
                $0.sequential += 1
                if lost.count < (model.lost[change.key] ?? []).count { $0.settled += 1 }
            }
            model.lost[change.key] = lost
        }
        model.head[change.key] = change
    }

    /// Of the changes that lost to `winner`, those kept: each device's newest but the winner's
    /// (a device holds its own changes), none that agrees with the winner, newest first.
    private static func eachDevicesNewest(_ lost: [KeptChange], winner: StampedChange) -> [KeptChange] {
        var byDevice = [String: KeptChange]()
        for change in lost where change.stamp.device != winner.stamp.device && (change.value != winner.value || change.type != winner.type) {
            if byDevice[change.stamp.device].map({ $0.stamp < change.stamp }) ?? true { byDevice[change.stamp.device] = change }
        }
        return byDevice.values.sorted { $0.stamp > $1.stamp }
    }

    private func checkRemote(_ storage: MemoryCloudStorage, against model: Model, knewAtWrite: [ChangeStamp: Set<ChangeStamp>]) throws {
        let rows = try storage.changes(in: "default", after: 0, limit: 1000).changes
        for row in rows {
            #expect(row.stamp == model.head[row.key]?.stamp, "\(row.key): the winner is the greatest stamp")
            #expect(row.lost == model.lost[row.key] ?? [], "\(row.key): the conflict the rule gives")
            for lost in row.lost {
                // Neither writer knew the other's change: no sequential write is a conflict.
                let winner = try #require(model.lostTo[lost.stamp])
                #expect(!(knewAtWrite[winner] ?? []).contains(lost.stamp) && !(knewAtWrite[lost.stamp] ?? []).contains(winner),
                        "\(row.key): a change kept as lost was concurrent with the change it lost to")
            }
        }
        #expect(rows.count == model.head.count)
    }
}
