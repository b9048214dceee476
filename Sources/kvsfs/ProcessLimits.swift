import Foundation

/// Process limits the server adjusts for itself.
enum ProcessLimits {
    /// Raises the soft limit on open files to the hard one: a server holds a socket per
    /// connected mount, and the usual soft limit (1024) is below a thousand mounts.
    static func allowManyOpenFiles() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
