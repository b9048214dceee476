import Foundation
import Glibc
import KVTestSupport
import Testing
@testable import kvsfs

/// What `kvsfs STORE MOUNTPOINT` says when its daemon does not become ready, with bash
/// scripts standing in for the daemon: they get the ready pipe and the log as it would.
@Suite("The mount(8) form waiting on its daemon")
struct StartingDaemonTests {
    /// How waiting on a daemon went: the line `awaitReady` threw (nil: it returned), how long
    /// it took, and whether the daemon was reaped by then.
    private struct Outcome {
        var failure: String?
        var elapsed: Duration
        var reaped: Bool
    }

    /// Starts `script` as the daemon, its log already holding a line of an earlier start, and
    /// waits on it; `LOG` in the failure stands for the log's path. `done` gets the pid before
    /// the directory goes.
    private func outcome(of script: String, within timeout: Duration, grace: Duration,
                         done: (pid_t) -> Void = { _ in }) throws -> Outcome {
        let directory = TemporaryDirectory("kvsfs-start")
        defer { directory.remove() }
        let log = directory.path + "/store.log"
        try "Error: an earlier start failed\n".write(toFile: log, atomically: false, encoding: .utf8)
        let daemon = try StartingDaemon.spawn(["bash", "-c", script], executable: "/bin/bash", log: log)
        let pid = daemon.pid
        defer { done(pid) }
        let started = ContinuousClock.now
        var failure: String?
        do {
            try daemon.awaitReady(within: timeout, grace: grace)
        } catch {
            failure = String(describing: error).replacingOccurrences(of: log, with: "LOG")
        }
        // Reaped: no longer a child of this process.
        return Outcome(failure: failure, elapsed: ContinuousClock.now - started,
                       reaped: waitpid(pid, nil, WNOHANG) == -1 && errno == ECHILD)
    }

    @Test("a daemon that does not become ready is reaped within the bounds, and one line says how it ended", arguments: [
        // Closes the pipe, then takes a while to exit: end of file comes long before the exit.
        (#"echo 'Error: the store is damaged' >&2; eval "exec $KVSFS_READY_FD>&-"; sleep 0.5; exit 3"#, Duration.seconds(30), Duration.seconds(10),
         "the daemon exited with status 3 before the mount was up; its log ends: Error: the store is damaged; see LOG"),
        (#"kill -KILL $$"#, .seconds(30), .seconds(10), "the daemon was killed by signal 9 (Killed) before the mount was up; see LOG"),
        // Half a line is no answer.
        (#"printf READ >&$KVSFS_READY_FD; exit 4"#, .seconds(30), .seconds(10), "the daemon exited with status 4 before the mount was up; see LOG"),
        ("exec sleep 30", .milliseconds(500), .seconds(10), "the mount did not answer within 0.5 s; it was stopped with SIGTERM; see LOG"),
        ("trap '' TERM; echo 'still starting' >&2; exec sleep 30", .milliseconds(500), .milliseconds(300),
         "the mount did not answer within 0.5 s; it did not end within 0.3 s of SIGTERM and was killed with SIGKILL; its log ends: still starting; see LOG"),
        // Its reason is the line; the daemon is waited for at most the grace, then stopped.
        (#"echo 'FAILED mountpoint /mnt/x is not empty' >&$KVSFS_READY_FD; exec sleep 30"#, .seconds(30), .milliseconds(300),
         "mountpoint /mnt/x is not empty"),
    ])
    func notReady(script: String, timeout: Duration, grace: Duration, message: String) throws {
        let outcome = try outcome(of: script, within: timeout, grace: grace)
        #expect(outcome.failure == message)
        #expect(outcome.elapsed < .seconds(10))
        #expect(outcome.reaped)
    }

    @Test("READY returns at once and leaves the daemon running")
    func ready() throws {
        let outcome = try outcome(of: #"echo READY >&$KVSFS_READY_FD; exec sleep 30"#, within: .seconds(30), grace: .seconds(10)) { pid in
            #expect(kill(pid, 0) == 0 && waitpid(pid, nil, WNOHANG) == 0, "still running")
            kill(pid, SIGKILL)
            waitpid(pid, nil, 0)
        }
        #expect(outcome.failure == nil)
        #expect(outcome.elapsed < .seconds(10))
    }
}
