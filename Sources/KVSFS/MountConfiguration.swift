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
    /// A read-only mount (`--read-only`, `-o ro`): every change made through the mount is
    /// EROFS. Changes coming from the remote are applied (through the applier): those a sync
    /// fetches, and an explicit `kvsfs sync --replace-with-remote`, which takes the remote's
    /// values, as a read-only mirror of the remote should be able to.
    public var readOnly: Bool
    /// Where the store lives, shown on the root (`user.kvsfs.store`, ...); nil when the store
    /// was opened by path alone.
    public var location: StoreLocation?
    /// Whether defaults may be registered (`--defaults`, `KeyValueFileSystem.registerDefaults`):
    /// the kernel then caches no negative look-up, as a name may gain a default at any time.
    public var registersDefaults: Bool
    /// Whether other users may use the mount (`--allow-other`): the kernel then checks the
    /// permissions shown, so group and other bits count in `ModeRule`.
    public var allowOther: Bool

    public init(format: ValueFormat = .xml, cacheTimeout: Double = 3600, maxPendingFiles: Int = 256,
                uid: UInt32 = getuid(), gid: UInt32 = getgid(), readOnly: Bool = false, location: StoreLocation? = nil,
                registersDefaults: Bool = false, allowOther: Bool = false) {
        self.readOnly = readOnly
        self.location = location
        self.registersDefaults = registersDefaults
        self.allowOther = allowOther
        self.format = format
        self.cacheTimeout = cacheTimeout
        self.maxPendingFiles = maxPendingFiles
        self.uid = uid
        self.gid = gid
    }
}
