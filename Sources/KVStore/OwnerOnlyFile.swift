import Glibc

/// Database files that only their owner may read or write (0600): a store's values, a file
/// remote's, a sync server's token hashes.
///
/// SQLite creates a database 0644 (less the umask) and gives its `-wal` and `-shm` files the
/// database's own mode, so a database created 0600 keeps all three 0600.
public enum OwnerOnlyFile {
    /// Creates `path`, empty and 0600, when nothing is there; a file that exists keeps its
    /// mode. Call before SQLite opens `path`. (An empty file is an empty database to SQLite.)
    public static func create(_ path: String) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if descriptor >= 0 { close(descriptor) }
    }

    /// `create`, and takes group and other permissions off `path`, `path-wal` and `path-shm`
    /// where they exist and belong to this user: for a database made before files were 0600.
    /// Returns why, for a file whose permissions could not be taken off.
    public static func restrict(_ path: String) -> String? {
        create(path)
        for file in [path, path + "-wal", path + "-shm"] {
            var info = stat()
            guard stat(file, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o077 != 0 else { continue }
            if chmod(file, info.st_mode & 0o7700) != 0 {
                return "cannot make \(file) readable by its owner only: \(String(cString: strerror(errno)))"
            }
        }
        return nil
    }
}
