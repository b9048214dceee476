import Foundation

/// C library functions the Glibc module does not export, looked up at run time.
enum SystemFunctions {
    private static func function<F>(_ name: String, as type: F.Type) -> F? {
        guard let symbol = dlsym(nil, name) else { return nil }
        return unsafeBitCast(symbol, to: type)
    }

    /// Raises glibc's trim threshold to 64 MiB (`mallopt(M_TRIM_THRESHOLD, ...)`): SQLite frees a
    /// few tens of KiB per commit, which the default threshold hands back to the kernel (an
    /// madvise) on worker-thread arenas, to be faulted in again on the next request.
    static func keepFreedMemory() {
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mTrimThreshold: Int32 = -1
        _ = function("mallopt", as: Mallopt.self)?(mTrimThreshold, 64 << 20)
    }

    static func getxattr(_ path: String, _ name: String, _ value: UnsafeMutableRawPointer, _ size: Int) -> Int {
        typealias GetXattr = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
        guard let getxattr = function("getxattr", as: GetXattr.self) else { return -1 }
        return getxattr(path, name, value, size)
    }

    /// Raises the soft limit on open files to the hard one: a server holds a socket per
    /// connected mount, and the usual soft limit (1024) is below a thousand mounts.
    static func allowManyOpenFiles() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
