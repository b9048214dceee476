import Glibc
import KVStore

/// How a mount shows its store.
public struct MountConfiguration: Sendable {
    /// The form in which files show values.
    public var format: ValueFormat
    /// How long the kernel may cache names and attributes of keys nobody is writing. Safe to
    /// make long: every change to the mount's files passes through the kernel.
    public var cacheTimeout: Double
    /// How many placeholders and editor files may exist at once.
    public var maxPendingFiles: Int
    public var uid: UInt32
    public var gid: UInt32
    /// A read-only mount (`-o ro`): every change through it is EROFS, while remote changes
    /// still come in through the applier.
    public var readOnly: Bool

    public init(format: ValueFormat = .xml, cacheTimeout: Double = 3600, maxPendingFiles: Int = 256,
                uid: UInt32 = getuid(), gid: UInt32 = getgid(), readOnly: Bool = false) {
        self.readOnly = readOnly
        self.format = format
        self.cacheTimeout = cacheTimeout
        self.maxPendingFiles = maxPendingFiles
        self.uid = uid
        self.gid = gid
    }
}
