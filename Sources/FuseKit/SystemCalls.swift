import CFuse

/// C library calls a FUSE daemon and its clients need that the Glibc module does not export
/// (their headers are in the CFuse shim).
public enum SystemCalls {
    /// Raises glibc's trim threshold to 64 MiB (`mallopt(M_TRIM_THRESHOLD, ...)`): a daemon
    /// that frees a few tens of KiB per request would otherwise hand them back to the kernel
    /// (an madvise) on worker-thread arenas, to be faulted in again on the next request.
    public static func keepFreedMemory() {
        _ = mallopt(M_TRIM_THRESHOLD, 64 << 20)
    }

    /// `getxattr(2)` of `path`: the attribute's length, or -1 with `errno` set.
    public static func extendedAttribute(of path: String, named name: String, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        getxattr(path, name, buffer.baseAddress, buffer.count)
    }
}
