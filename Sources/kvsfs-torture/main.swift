// kvsfs-torture: kills a kvsfs mount daemon with SIGKILL while threads write, rename, unlink
// and save keys as editors do, remounts the store, and checks that every change that returned
// success is there (scripts/torture builds and runs it).
//
// Each cycle runs the workload on a live mount for a random time, kills the daemon in the
// middle of it, clears the dead mount and mounts the same data directory again. What the mount
// then shows must be the model of acknowledged changes, but for the one step per thread that
// was in flight, which may have happened or not (as a whole); after a sync it must still be.
// What was seen becomes the model of the next cycle. Exits 1 at the first mismatch, naming
// the cycle, the key, what was expected and what was found.
import Foundation

let options = Options.parseOrExit()
let mountpoint = options.work + "/mnt"
let dataDirectory = options.work + "/data"
let pidFile = options.work + "/daemon.pid"
let logPath = options.work + "/daemon.log"
try? FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
try? FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
_ = chmod(dataDirectory, 0o700)  // a data directory that group or others may write is refused
_ = FileManager.default.createFile(atPath: logPath, contents: nil)
guard let log = FileHandle(forWritingAtPath: logPath) else { fatalError("cannot write \(logPath)") }

var generator = SplitMix(seed: options.seed)
var tally = Tally()
let started = ContinuousClock.now
say("torture: \(options.cycles) cycles of \(options.threads) threads, each killed with SIGKILL after 0.2-\(options.seconds) s; "
      + "seed \(options.seed); store in \(dataDirectory)")

@MainActor func mount(cycle: Int) -> MountDaemon {
    log.write(Data("--- mount for cycle \(cycle)\n".utf8))
    do {
        return try MountDaemon(kvsfs: options.kvsfs, mountpoint: mountpoint, dataDirectory: dataDirectory, log: log, pidFile: pidFile)
    } catch {
        fail("cycle \(cycle): \(error)", daemon: nil)
    }
}

/// Reports, unmounts, and exits 1.
@MainActor func fail(_ lines: String..., daemon: MountDaemon?) -> Never {
    for line in lines { say("torture: FAILED: \(line)") }
    daemon?.stop()
    say("torture: seed \(options.seed); the store is kept in \(dataDirectory), the daemon's log in \(logPath)")
    tally.print(after: ContinuousClock.now - started)
    exit(1)
}

/// Lists and reads the mount; a call that fails there is a failure of the run.
@MainActor func observe(_ daemon: MountDaemon, model: [String: [UInt8]], cycle: Int) -> Observation {
    do { return try Observation(of: mountpoint, model: model) } catch { fail("cycle \(cycle): reading the mount back: \(error)", daemon: daemon) }
}

var model: [String: [UInt8]] = [:]
var daemon = mount(cycle: 1)
// The values are written in the mount's canonical XML, so that bytes compare as written.
let probe = Value.make(tag: "probe", size: 300)
if let failure = MountCalls.write(probe, to: mountpoint + "/probe", chunk: 4096) { fail("writing a probe: \(failure)", daemon: daemon) }
guard case .success(let read?) = MountCalls.read(mountpoint + "/probe"), read == probe, MountCalls.unlink(mountpoint + "/probe") == nil else {
    fail("a value does not read back as written: the canonical XML differs from Value.make's", daemon: daemon)
}

for cycle in 1...options.cycles {
    let killSwitch = KillSwitch()
    let deadline = ContinuousClock.now + .seconds(options.seconds + 10)
    let workers = (0..<options.threads).map { thread in
        Worker(thread: thread, cycle: cycle, mountpoint: mountpoint, model: model.filter { Worker.owns(thread, $0.key) },
               seed: generator.next(), killSwitch: killSwitch)
    }
    let finished = DispatchSemaphore(value: 0)
    for worker in workers {
        Thread.detachNewThread {
            worker.run(until: deadline)
            finished.signal()
        }
    }
    let killAfter = Double.random(in: 0.2...options.seconds, using: &generator)
    usleep(UInt32(killAfter * 1_000_000))
    killSwitch.set()
    daemon.kill9()
    tally.kills += 1
    for _ in workers where finished.wait(timeout: .now() + 20) == .timedOut {
        daemon.clearDeadMount()
        fail("cycle \(cycle): a workload thread did not return within 20 s of the kill", daemon: nil)
    }
    daemon.clearDeadMount()
    for worker in workers {
        if let (operation, failure) = worker.unexpected {
            fail("cycle \(cycle), thread \(worker.thread): \(operation) failed before the kill: \(failure)", daemon: nil)
        }
    }
    let acknowledged = workers.reduce(into: [String: [UInt8]]()) { $0.merge($1.model) { $1 } }
    let inFlight = workers.compactMap(\.inFlight)
    tally.add(workers)

    daemon = mount(cycle: cycle + 1)
    let afterRemount = observe(daemon, model: acknowledged, cycle: cycle)
    let verdict = check(afterRemount, model: acknowledged, inFlight: inFlight, cycle: cycle, stage: "after the remount")
    tally.lost += verdict.mismatches.count
    tally.happened += verdict.happened
    tally.notHappened += verdict.notHappened
    if !verdict.mismatches.isEmpty {
        fail(verdict.mismatches.map(\.description).joined(separator: "\ntorture: FAILED: "),
             "cycle \(cycle): in flight at the kill: " + inFlight.map(\.operation).joined(separator: "; "), daemon: daemon)
    }
    // The sync thread pushes the changes the crash left pending; nothing it fetches may undo one.
    if let failure = daemon.synchronize(kvsfs: options.kvsfs) { fail("cycle \(cycle): sync after the remount: \(failure)", daemon: daemon) }
    let afterSync = check(observe(daemon, model: afterRemount.contents, cycle: cycle), model: afterRemount.contents, inFlight: [],
                          cycle: cycle, stage: "after a sync that followed the remount")
    tally.lost += afterSync.mismatches.count
    if !afterSync.mismatches.isEmpty { fail(afterSync.mismatches.map(\.description).joined(separator: "\ntorture: FAILED: "), daemon: daemon) }
    model = afterRemount.contents
    tally.cycles = cycle
    say(String(format: "torture: cycle %d: killed after %.2f s; %d operations, %d changes acknowledged; "
                 + "in flight: %d happened, %d did not; %d keys check",
                 cycle, killAfter, workers.reduce(0) { $0 + $1.operations }, workers.reduce(0) { $0 + $1.acknowledged },
                 verdict.happened, verdict.notHappened, model.count))
}
daemon.stop()
tally.print(after: ContinuousClock.now - started)
