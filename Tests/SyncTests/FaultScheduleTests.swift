import Foundation
import KVCloud
import KVStore
import KVSync
import KVTestSupport
import PropertyBased
import Synchronization
import Testing

/// Three replicas syncing through their own engines, each over a remote that loses requests
/// and answers, pushes twice, shuffles, repeats and replays batches, delays, answers 503 and
/// is partitioned at random. Whatever the schedule: once the faults stop and everyone has synchronised, every
/// replica holds what the remote holds, and that is, for each key, the write with the greatest
/// stamp ever acknowledged: no acknowledged write is lost except to a later one.
@Suite("Sync under random fault schedules", .hangGuard, .shrinking(false))
struct FaultScheduleTests {
    private static let tallies = Mutex(FaultyRemote.Tally())

    @Test("replicas converge and keep every acknowledged write, whatever the network and the remote do")
    func convergesUnderFaults() async throws {
        // The schedule: a seed for each replica's faults, then one number per operation.
        let schedule = Gen.int(in: 0...Int(Int32.max)).array(of: 10...50)
        await propertyCheck(count: 30, input: Gen.int(in: 0...Int(Int32.max)), schedule) { seed, operations in
            try await withTemporaryDirectory { dir in
                try await run(operations, seed: UInt64(seed), in: dir)
            }
        }
        let tally = Self.tallies.withLock { $0 }
        print("fault schedules: \(tally)")
        #expect(tally.lostAnswers > 0 && tally.staleBatches > 0 && tally.busy > 0 && tally.partitioned > 0,
                "every kind of fault was met: \(tally)")
    }

    private func run(_ operations: [Int], seed: UInt64, in dir: TemporaryDirectory) async throws {
        let storage = MemoryCloudStorage()
        let skews: [TimeInterval] = [0, 0.040, -0.025]
        let replicas = try (0..<3).map { index in
            let store = try KeyValueStore(path: dir.subdirectory("r\(index)") + "/store.sqlite") {
                Date().addingTimeInterval(skews[index])
            }
            let link = FaultyRemote(EmbeddedChangeLog(description: "memory", clock: ContinuousClock()) { storage },
                                    seed: seed &+ UInt64(index))
            let engine = SyncEngine(store: store, remote: link, remoteStore: "default", applier: StoreApplier(store: store))
            return (store: store, link: link, engine: engine)
        }
        for replica in replicas { replica.engine.start() }
        defer { for replica in replicas { replica.engine.stop() } }
        var partitioned = [false, false, false]
        var written = [String: StampedChange]()  // the greatest stamp acknowledged for each key

        for operation in operations {
            let index = operation % 3
            let replica = replicas[index]
            let key = "k\((operation / 30) % 5)"
            switch (operation / 3) % 8 {
            case 0, 1, 2, 3:
                try replica.store.put(.integer(operation), forKey: key)
            case 4:
                if replica.store.entry(forKey: key) != nil { try replica.store.removeValue(forKey: key) }
            case 5:
                partitioned[index].toggle()
                replica.link.partition(partitioned[index])
            case 6:
                // A failure here is the schedule's doing; what matters is the end state.
                do { try await replica.engine.synchronize() } catch {}
            default:
                try await Task.sleep(for: .milliseconds(operation % 7))
            }
            // Read at once: what a replica holds for the key may change as soon as its engine's
            // next round takes in another replica's change.
            if let latest = replica.store.allChanges(forKey: key), written[key].map({ latest.stamp > $0.stamp }) ?? true {
                written[key] = latest
            }
            // Gives the engines' background rounds a moment between operations.
            try await Task.sleep(for: .milliseconds(1))
        }

        for replica in replicas { replica.link.heal() }
        // Twice round: the second lets each replica fetch what the others pushed in the first.
        for _ in 0..<2 {
            for replica in replicas { try await synchronizeUntilDone(replica.engine) }
        }

        // The changes as they were made: a conflict kept with one is not the change.
        let remote = Dictionary(uniqueKeysWithValues: try storage.changes(in: "default", after: 0, limit: 1000).changes.map { change in
            (change.key, StampedChange(key: change.key, value: change.value, type: change.type, stamp: change.stamp))
        })
        for (key, latest) in written {
            #expect(remote[key] == latest, "\(key): the remote holds the greatest-stamped write, a deletion as any other")
        }
        for (index, replica) in replicas.enumerated() {
            let held = Dictionary(uniqueKeysWithValues: replica.store.allChanges().filter { !$0.isTombstone }.map { ($0.key, $0) })
            #expect(held == remote.filter { !$0.value.isTombstone }, "replica \(index) holds what the remote holds")
            #expect(replica.store.pendingChanges().isEmpty, "replica \(index) has nothing left to push")
        }
        let tally = replicas.map(\.link.tally).reduce(FaultyRemote.Tally(), +)
        Self.tallies.withLock { $0 = $0 + tally }
    }

    /// `synchronize()` until it succeeds, for up to 20 s: a round the faults interrupted may
    /// still be finishing, and the machine may be busy with other tests.
    private func synchronizeUntilDone(_ engine: SyncEngine) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            do {
                try await engine.synchronize()
                return
            } catch where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            } catch {
                Issue.record("synchronize() still fails once the faults stopped: \(error)")
                throw error
            }
        }
    }
}
