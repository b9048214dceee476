import Glibc

/// What a chmod, a chown or the mode given at create may ask. Nothing of a mode or an owner is
/// stored: files show 0644 and the directory 0755, owned by the mounting user. A request
/// succeeds when what is shown already gives what it asks, and is refused (EPERM) otherwise:
/// - the owner's bits asked must be within those shown (0444 is given by 0644; 0755 is not);
/// - the group's and others' bits count only on an `--allow-other` mount, where the kernel
///   checks them, and there they must be exactly those shown: more cannot be given, and fewer
///   (a 0600 asked of a key shown 0644) would tell the caller that others cannot read what
///   they can;
/// - set-user-ID, set-group-ID and sticky bits are never given;
/// - the owner and group must be the mounting user's.
///
/// The mode given at create asks less: only that a key is not made under a umask that hides it
/// from group or others while it shows readable to them (on an `--allow-other` mount). Bits it
/// gives beyond those shown (an executable copied with cp, a 0666 of a umask 000) are not
/// given, as on a file system without them, but do not refuse the value. It is judged
/// when the new file's first value is committed, not at create, as `cp -a` and `tar` create
/// 0600 and chmod before they close; a chmod the rule gives replaces it. A scratch file's
/// modes are not judged: mkstemp always asks 0600, whatever the file it stands in for, and
/// rsync chmods it 0600 again; the key it becomes shows 0644 like any other.
struct ModeRule {
    /// Whether group and other bits count (`--allow-other`).
    let allowOther: Bool
    let uid: UInt32
    let gid: UInt32

    static let fileMode: UInt32 = 0o644
    static let directoryMode: UInt32 = 0o755

    /// Whether `shown` already gives the mode `requested` asks.
    func gives(mode requested: UInt32, shown: UInt32) -> Bool {
        let requested = requested & 0o7777
        if requested & UInt32(S_ISUID | S_ISGID | S_ISVTX) != 0 { return false }
        if requested & 0o700 & ~shown != 0 { return false }
        return !allowOther || requested & 0o077 == shown & 0o077
    }

    /// Whether a new key may be made with the mode `requested` at create: it must not hide
    /// from group or others what they can read.
    func admitsCreated(mode requested: UInt32) -> Bool {
        !allowOther || requested & 0o044 == Self.fileMode & 0o044
    }

    /// Refuses a requested mode that `shown` does not already give.
    func check(mode requested: UInt32, shown: UInt32) throws {
        if !gives(mode: requested, shown: shown) { throw FileSystemError.permissionsFixed }
    }

    /// Refuses an owner or group other than the mounting user's.
    func check(uid requestedUID: UInt32?, gid requestedGID: UInt32?) throws {
        if let requestedUID, requestedUID != uid { throw FileSystemError.ownershipFixed }
        if let requestedGID, requestedGID != gid { throw FileSystemError.ownershipFixed }
    }
}

extension KeyValueFileSystem {
    var modeRule: ModeRule { ModeRule(allowOther: configuration.allowOther, uid: configuration.uid, gid: configuration.gid) }
}
