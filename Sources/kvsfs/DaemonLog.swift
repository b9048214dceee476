import ArgumentParser
import Foundation
import Glibc
import Logging
import Synchronization

/// What the daemons (`kvsfs mount`, `kvsfs serve`) say: one line per message on standard
/// error, with the time, the process id and the level. Run by systemd (JOURNAL_STREAM names
/// standard error), each line starts with its syslog priority (`<4>`) instead, and journald
/// takes the level and time from there.
///
/// Invariant: one message is one line. Words from outside (a server's refusal, a key's name)
/// may hold control characters; they are written out (`\n` as `\\n`), so that no message
/// can fake a line or a priority, and a line is cut at `maximumLineBytes`.
struct DaemonLogHandler: LogHandler {
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    let toJournal: Bool

    static let maximumLineBytes = 8192
    /// One line is written whole before the next starts, whichever thread logs it.
    private static let writing = Mutex(())

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var text = "\(event.message)"
        let fields = metadata.merging(event.metadata ?? [:]) { $1 }
        if !fields.isEmpty {
            text += " (" + fields.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + ")"
        }
        let prefix = toJournal ? "<\(Self.priority(event.level))>" : "\(Self.time()) kvsfs[\(getpid())] \(event.level): "
        let line = prefix + Self.oneLine(text, within: Self.maximumLineBytes - prefix.utf8.count)
        let bytes = Array((line + "\n").utf8)
        Self.writing.withLock { _ in bytes.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let written = write(STDERR_FILENO, buffer.baseAddress! + done, buffer.count - done)
                if written < 0, errno == EINTR { continue }
                if written <= 0 { return }  // a log that cannot be written loses its line, not the daemon
                done += written
            }
        } }
    }

    /// `text` as one line of at most `limit` bytes: control characters written as escapes, and
    /// a backslash doubled, so that an escape in the log is always one the log made.
    static func oneLine(_ text: String, within limit: Int = maximumLineBytes) -> String {
        var line = ""
        var bytes = 0
        for scalar in text.unicodeScalars {
            let piece: String = switch scalar {
            case "\n": "\\n"
            case "\r": "\\r"
            case "\t": "\\t"
            case "\\": "\\\\"
            case "\u{7F}", _ where scalar.value < 0x20 || (0x80..<0xA0).contains(scalar.value):
                "\\u{\(String(scalar.value, radix: 16))}"
            default: String(scalar)
            }
            bytes += piece.utf8.count
            if bytes > limit - 3 { return line + "..." }
            line += piece
        }
        return line
    }

    /// The syslog priority journald reads at the start of a line (sd-daemon(3)).
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    static func time() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        localtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d.%03d", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int(now.tv_nsec / 1_000_000))
    }

    /// Whether standard error is the stream systemd gave the journal: JOURNAL_STREAM holds its
    /// device and inode (systemd.exec(5)).
    static func standardErrorIsJournal(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let stream = environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(STDERR_FILENO, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }
}

/// How much a daemon says: `--log-level LEVEL`, or `-d` for debug (as sshfs has it).
struct LogOptions: ParsableArguments {
    @Option(name: .customLong("log-level"),
            help: "How much to log to standard error: trace, debug, info, notice, warning, error or critical (default: info).")
    var level: String?

    @Flag(name: .short, help: "Log at debug level (as --log-level debug).")
    var debug = false

    func validate() throws {
        if let level, Logger.Level(rawValue: level) == nil {
            throw ValidationError("--log-level must be trace, debug, info, notice, warning, error or critical")
        }
    }

    var chosenLevel: Logger.Level {
        if let level, let chosen = Logger.Level(rawValue: level) { return chosen }
        return debug ? .debug : .info
    }

    /// Sends every logger of this process to the daemon log, at the level chosen. Called once,
    /// before anything logs.
    func bootstrap() {
        let level = chosenLevel
        let journal = DaemonLogHandler.standardErrorIsJournal()
        LoggingSystem.bootstrap { _ in DaemonLogHandler(logLevel: level, toJournal: journal) }
    }
}
