import Foundation
import Glibc

/// The files a mount trusts with its store and its token, checked as sshd's StrictModes checks
/// a user's files: another user who may write the data directory could swap the store, its
/// journal or its control socket; a token others may read is a token others hold.
///
/// Invariant: a refusal names the file, what is wrong with it, and the command that mends it;
/// nothing is mounted after one.
enum OwnFiles {
    /// The most bytes a token file may hold: a token is a line.
    static let maximumTokenFileBytes = 64 << 10

    /// The data directory `path` names, resolved, once it and every directory above it are
    /// trusted: each owned by this user or root; the data directory not writable by group or
    /// others; a directory above it only if sticky (as /tmp is), where no one else can move
    /// or remove what is ours.
    static func trustedDataDirectory(_ path: String) throws -> String {
        guard let resolvedPointer = realpath(path, nil) else {
            throw CommandFailure("cannot use the data directory \(path): \(String(cString: strerror(errno)))")
        }
        let resolved = String(cString: resolvedPointer)
        free(resolvedPointer)
        try checkDataDirectory(resolved)
        var above = (resolved as NSString).deletingLastPathComponent
        while true {
            var info = stat()
            guard stat(above, &info) == 0 else {
                throw CommandFailure("cannot use the data directory \(path): \(above): \(String(cString: strerror(errno)))")
            }
            try checkOwner(info, of: "the directory \(above), above the data directory", path: above)
            let mode = info.st_mode & 0o7777
            if mode & 0o022 != 0, mode & mode_t(S_ISVTX) == 0 {
                throw CommandFailure("the directory \(above), above the data directory, may be written by group or others "
                    + "(mode \(octal(mode))): run 'chmod go-w \(above)' or use another data directory")
            }
            if above == "/" { break }
            above = (above as NSString).deletingLastPathComponent
        }
        return resolved
    }

    /// Refuses a data directory that another user than this one (or root) owns, or that group
    /// or others may write.
    private static func checkDataDirectory(_ path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw CommandFailure("cannot use the data directory \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw CommandFailure("the data directory \(path) is not a directory") }
        try checkOwner(info, of: "the data directory \(path)", path: path)
        let mode = info.st_mode & 0o7777
        guard mode & 0o022 == 0 else {
            throw CommandFailure("the data directory \(path) may be written by group or others (mode \(octal(mode))): "
                + "run 'chmod go-w \(path)'")
        }
    }

    /// The token in the file at `path` (its first line, trimmed): a regular file of this user
    /// (or root) that neither group nor others may read or write, and not empty.
    static func readToken(_ path: String) throws -> String {
        let (descriptor, info) = try openRegularFile(path, what: "the token file")
        defer { close(descriptor) }
        try checkOwner(info, of: "the token file \(path)", path: path)
        let mode = info.st_mode & 0o7777
        guard mode & 0o077 == 0 else {
            throw CommandFailure("the token file \(path) may be read or written by group or others (mode \(octal(mode))): "
                + "run 'chmod 600 \(path)'")
        }
        guard Int(info.st_size) <= maximumTokenFileBytes else {
            throw CommandFailure("the token file \(path) is larger than a token (\(info.st_size) bytes)")
        }
        var bytes = [UInt8](repeating: 0, count: maximumTokenFileBytes)
        var count = 0
        while count < bytes.count {
            let got = bytes[count...].withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if got < 0, errno == EINTR { continue }
            guard got >= 0 else { throw CommandFailure("cannot read the token file \(path): \(String(cString: strerror(errno)))") }
            if got == 0 { break }
            count += got
        }
        let token = String(decoding: bytes[..<count], as: UTF8.self)
            .split(whereSeparator: \.isNewline).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        guard !token.isEmpty else { throw CommandFailure("the token file \(path) holds no token") }
        return token
    }

    /// Refuses a file to be read that is not a regular file (a FIFO would hang the reader
    /// before anything is said), naming it as `what`.
    static func checkRegularFile(_ path: String, what: String) throws {
        close(try openRegularFile(path, what: what).descriptor)
    }

    /// `path` opened to read, with what fstat says of it, once it is a regular file. O_NONBLOCK:
    /// a FIFO planted there must not hang the reader before its type is seen.
    private static func openRegularFile(_ path: String, what: String) throws -> (descriptor: Int32, info: stat) {
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard descriptor >= 0 else { throw CommandFailure("cannot read \(what) \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw CommandFailure("cannot read \(what) \(path): \(reason)")
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            throw CommandFailure("\(what) \(path) is not a regular file")
        }
        return (descriptor, info)
    }

    private static func checkOwner(_ info: stat, of what: String, path: String) throws {
        guard info.st_uid == getuid() || info.st_uid == 0 else {
            throw CommandFailure("\(what) belongs to another user (uid \(info.st_uid)): "
                + "run 'chown \(getuid()) \(path)' or use a file of your own")
        }
    }

    private static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
