import FoundationEssentials
import Glibc
import KVStore
import Logging
import Synchronization

/// Tells the person why the mount refused a write: one line in the daemon's log with the key,
/// the errno and the reason, and a `refused-local-write` event in the event log (through the
/// mount's synchronizer), for someone whose `cp` only said "Invalid argument".
///
/// Invariant: each key is told at most once per `interval`; the refusals of a key in between
/// are counted and named in its next line, so a program retrying in a loop cannot flood the
/// log. The table of keys told is bounded (`maxKeys`): past it, the oldest are forgotten.
final class RefusalReports: Sendable {
    static let interval: Duration = .seconds(10)
    static let maxKeys = 1024

    private struct Told {
        var at: ContinuousClock.Instant
        /// Refusals since `at` that were not told.
        var untold: Int
    }

    private let logger: Logger
    private let told = Mutex<[String: Told]>([:])

    init(logger: Logger) {
        self.logger = logger
    }

    /// Tells that a write to `key` was refused with `error`; nil when the key's last refusal was
    /// told less than `interval` ago. Returns the words told, for the event log.
    func tell(key: String, error: any Error, errno code: Int32) -> String? {
        let now = ContinuousClock.now
        let untold: Int? = told.withLock { table in
            if var last = table[key], now - last.at < Self.interval {
                last.untold += 1
                table[key] = last
                return nil
            }
            let before = table[key]?.untold ?? 0
            if table.count >= Self.maxKeys, table[key] == nil {
                let oldest = table.min { $0.value.at < $1.value.at }!.key
                table[oldest] = nil
            }
            table[key] = Told(at: now, untold: 0)
            return before
        }
        guard let untold else { return nil }
        let words = "\(Self.errnoName(code)) (\(String(cString: strerror(code)))): \(Self.reason(error))"
        let more = untold > 0 ? " (and \(untold) more refusals of it before, not told)" : ""
        logger.warning("refused a write to \(key.debugDescription): \(words)\(more)")
        return words
    }

    /// The reason in words: what the store or the mount says of the refusal.
    static func reason(_ error: any Error) -> String {
        switch error {
        case let error as StoreError: error.description
        case let error as FileSystemError: error.description
        default: String(describing: error)
        }
    }

    /// The symbolic name of the errnos a refused write gets, as the manual lists them.
    static func errnoName(_ code: Int32) -> String {
        switch code {
        case EINVAL: "EINVAL"
        case EFBIG: "EFBIG"
        case EDQUOT: "EDQUOT"
        case ENOSPC: "ENOSPC"
        case ENAMETOOLONG: "ENAMETOOLONG"
        case EROFS: "EROFS"
        case EPERM: "EPERM"
        case EACCES: "EACCES"
        case EIO: "EIO"
        default: "errno \(code)"
        }
    }
}

extension KeyValueFileSystem {
    /// Tells of a refused write to `key` (see `RefusalReports`), in the log and the event log.
    func tell(refusalOf key: String, _ error: any Error) {
        guard let words = refusals.tell(key: key, error: error, errno: errno(for: error)) else { return }
        sync?.record(refusedWriteOf: key, reason: words)
    }
}
