import Foundation
import Glibc

/// A daemon `MountHelper` has just started, and the pipe on which it says that it is ready,
/// or why not (`Readiness`).
///
/// Invariant: `awaitReady` returns only after `READY`; when it throws, the daemon has ended
/// and been reaped, or its one line says that the daemon would not end even on SIGKILL. No
/// wait is unbounded.
struct StartingDaemon: ~Copyable {
    let pid: pid_t
    /// The read end of the ready pipe; closed with this value.
    private let readyPipe: Int32
    let log: String
    /// The log's size before the daemon started: its lines of this start come after.
    private let logStart: Int

    /// How long a daemon that said FAILED or closed its pipe may take to end, and how long
    /// one sent SIGTERM may take before SIGKILL.
    static let exitGrace: Duration = .seconds(10)

    /// POSIX_SPAWN_SETSID of glibc's spawn.h, a _GNU_SOURCE name Swift's Glibc module leaves out:
    /// the daemon is a session of its own, out of reach of the terminal's signals.
    private static let spawnNewSession: Int16 = 0x80

    private init(pid: pid_t, readyPipe: Int32, log: String, logStart: Int) {
        self.pid = pid
        self.readyPipe = readyPipe
        self.log = log
        self.logStart = logStart
    }

    deinit { close(readyPipe) }

    /// Runs `arguments` (this program, unless `executable` says otherwise) as a new session,
    /// with stdin from /dev/null, stdout and stderr appended to `log`, no signal blocked,
    /// SIGTERM, SIGINT and SIGHUP at their default action, and the ready pipe's write end
    /// named by `$KVSFS_READY_FD`.
    static func spawn(_ arguments: [String], executable: String = "/proc/self/exe", log: String) throws -> StartingDaemon {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw CommandFailure("cannot start the daemon: \(String(cString: strerror(errno)))") }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        // The daemon keeps the pipe's write end and nothing else of this process: a descriptor
        // it inherited (the pipe a caller reads this command's output from, say) would stay
        // open as long as the mount, and the caller would wait for ever.
        keepOnlyAcrossExec(writeEnd)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Whatever this process blocks or ignores (mount(8) run from a script that traps
        // SIGTERM, say), the daemon starts able to be stopped until it handles signals itself.
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, spawnNewSession | Int16(POSIX_SPAWN_SETSIGMASK) | Int16(POSIX_SPAWN_SETSIGDEF))

        var environment = ProcessInfo.processInfo.environment
        environment[Readiness.readyDescriptorVariable] = String(writeEnd)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var existing = stat()
        let logStart = stat(log, &existing) == 0 ? Int(existing.st_size) : 0
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        close(writeEnd)
        guard spawned == 0 else {
            close(readEnd)
            throw CommandFailure("cannot start the daemon: \(String(cString: strerror(spawned)))")
        }
        return StartingDaemon(pid: child, readyPipe: readEnd, log: log, logStart: logStart)
    }

    /// Waits up to `timeout` for the daemon's answer; returns once it is `READY`, else throws
    /// the one line that says what became of it. A daemon that does not end within `grace`
    /// of saying FAILED or closing its pipe, or that did not answer in time, is stopped.
    consuming func awaitReady(within timeout: Duration, grace: Duration = exitGrace) throws {
        switch readAnswer(within: timeout) {
        case .line("READY"):
            return
        case .line(let line) where line.hasPrefix("FAILED "):
            // Its reason is the whole message; the daemon is on its way out.
            if reap(within: grace) == nil { _ = stop(grace: grace) }
            throw CommandFailure(String(line.dropFirst("FAILED ".count)))
        case .line(let line):
            let ending = stop(grace: grace)
            throw CommandFailure("the daemon answered '\(line.prefix(80))' instead of READY; \(ending)\(logEnd()); see \(log)")
        case .endOfFile:
            if let ending = reap(within: grace) {
                throw CommandFailure("the daemon \(ending) before the mount was up\(logEnd()); see \(log)")
            }
            let ending = stop(grace: grace)
            throw CommandFailure("the daemon closed its ready pipe without answering and did not end within \(Self.text(grace)); \(ending)\(logEnd()); see \(log)")
        case .timedOut:
            let ending = stop(grace: grace)
            throw CommandFailure("the mount did not answer within \(Self.text(timeout)); \(ending)\(logEnd()); see \(log)")
        }
    }

    /// What the daemon wrote on its ready pipe.
    private enum Answer: Equatable {
        /// A whole line, without its newline.
        case line(String)
        /// The pipe closed (or could not be read) with no whole line on it.
        case endOfFile
        case timedOut
    }

    /// The first line written on the ready pipe within `timeout` (all of it, not each byte).
    private func readAnswer(within timeout: Duration) -> Answer {
        let deadline = ContinuousClock.now + timeout
        var bytes = [UInt8]()
        var waiting = pollfd(fd: readyPipe, events: Int16(POLLIN), revents: 0)
        while bytes.count < 4096 {
            let ready = poll(&waiting, 1, Self.milliseconds(until: deadline))
            if ready < 0, errno == EINTR { continue }
            guard ready > 0 else { return ready == 0 ? .timedOut : .endOfFile }
            var byte: UInt8 = 0
            let count = Glibc.read(readyPipe, &byte, 1)
            if count < 0, errno == EINTR { continue }
            guard count == 1 else { return .endOfFile }
            if byte == UInt8(ascii: "\n") { break }
            bytes.append(byte)
        }
        return .line(String(decoding: bytes, as: UTF8.self))
    }

    /// How a reaped daemon ended.
    private enum Ending: CustomStringConvertible {
        case exited(Int32)
        case killed(Int32)
        /// Reaped by someone else (ECHILD): its status is not ours to know.
        case unknown

        init(waitStatus: Int32) {
            self = waitStatus & 0x7f == 0 ? .exited((waitStatus >> 8) & 0xff) : .killed(waitStatus & 0x7f)
        }

        var description: String {
            switch self {
            case .exited(let code): return "exited with status \(code)"
            case .killed(let signal): return "was killed by signal \(signal) (\(String(cString: strsignal(signal))))"
            case .unknown: return "ended"
            }
        }
    }

    /// The daemon's end once it has ended and is reaped, waiting at most `limit`; nil while
    /// it runs on.
    private func reap(within limit: Duration) -> Ending? {
        let deadline = ContinuousClock.now + limit
        while true {
            var status: Int32 = 0
            let reaped = waitpid(pid, &status, WNOHANG)
            if reaped == pid { return Ending(waitStatus: status) }
            if reaped < 0, errno != EINTR { return .unknown }
            if ContinuousClock.now >= deadline { return nil }
            usleep(10_000)
        }
    }

    /// Sends SIGTERM, and SIGKILL if the daemon has not ended within `grace`; says which, and
    /// how it ended.
    private func stop(grace: Duration) -> String {
        kill(pid, SIGTERM)
        if let ending = reap(within: grace) {
            if case .killed(SIGTERM) = ending { return "it was stopped with SIGTERM" }
            return "it was sent SIGTERM and \(ending)"
        }
        kill(pid, SIGKILL)
        if reap(within: grace) != nil {
            return "it did not end within \(Self.text(grace)) of SIGTERM and was killed with SIGKILL"
        }
        return "it (pid \(pid)) did not end even on SIGKILL"
    }

    /// "; its log ends: LINE" with the last line the daemon wrote to its log since it
    /// started, if any; else nothing. The log stays the place for the whole story.
    private func logEnd() -> String {
        guard let handle = FileHandle(forReadingAtPath: log) else { return "" }
        defer { handle.closeFile() }
        let written: Data
        do {
            let end = try handle.seekToEnd()
            try handle.seek(toOffset: max(UInt64(logStart), end > 65_536 ? end - 65_536 : 0))
            written = try handle.readToEnd() ?? Data()
        } catch {
            return ""
        }
        let lines = String(decoding: written, as: UTF8.self).split(whereSeparator: \.isNewline)
        guard let last = lines.last(where: { !$0.allSatisfy(\.isWhitespace) }) else { return "" }
        return "; its log ends: " + last.trimmingCharacters(in: .whitespaces).prefix(200)
    }

    /// Milliseconds from now to `deadline` for poll(2), rounded up; 0 once it has passed.
    private static func milliseconds(until deadline: ContinuousClock.Instant) -> Int32 {
        let left = deadline - .now
        guard left > .zero else { return 0 }
        let (seconds, attoseconds) = left.components
        return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
    }

    /// "60 s", "0.5 s".
    private static func text(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 { return "\(seconds) s" }
        return String(format: "%.1f s", Double(seconds) + Double(attoseconds) / 1e18)
    }

    /// Marks every descriptor above stderr close-on-exec, but `kept`.
    private static func keepOnlyAcrossExec(_ kept: Int32) {
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 && descriptor != kept {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        _ = fcntl(kept, F_SETFD, 0)
    }
}
