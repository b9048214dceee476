import Foundation
import KVSFS
import KVStore
import Logging

/// The property list `kvsfs mount --defaults FILE` registers, read at mount time and again on
/// each SIGHUP.
///
/// Invariant: a file that cannot be read or breaks a rule changes nothing: at mount time the
/// mount does not start (one line, exit status 1); on reload the defaults registered before
/// stay, and one line in the log says why.
struct DefaultsFile: Sendable {
    /// An absolute path, so that a reload does not depend on the daemon's working directory.
    let path: String

    init(_ path: String) {
        self.path = URL(fileURLWithPath: path).standardizedFileURL.path
    }

    /// Reads and checks the file against the store's quotas (`RegisteredDefaults.decode`).
    func load(limits: QuotaLimits) throws(DefaultsError) -> RegisteredDefaults {
        try RegisteredDefaults.decode(try read(), limits: limits)
    }

    /// The file's bytes, refusing anything but a regular file of at most
    /// `RegisteredDefaults.maxFileBytes` (a FIFO would block the read, a device never end).
    private func read() throws(DefaultsError) -> [UInt8] {
        let limit = RegisteredDefaults.maxFileBytes
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw .unreadable(String(cString: strerror(errno))) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(String(cString: strerror(errno))) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .unreadable("not a regular file") }
        guard info.st_size <= limit else { throw .tooLarge(size: Int(info.st_size), limit: limit) }
        let bytes: [UInt8]
        do {
            bytes = try ValueFile.readToEnd(fd, stoppingPast: limit)
        } catch {
            throw .unreadable(String(cString: strerror(error.code)))
        }
        // The file may have grown since fstat.
        guard bytes.count <= limit else { throw .tooLarge(size: bytes.count, limit: limit) }
        return bytes
    }

    /// Registers the file's defaults anew with `choice`, keeping the old ones on failure.
    func reload(into choice: DefaultsChoice, logger: Logger) {
        do {
            let defaults = try load(limits: choice.limits)
            choice.takeFile(defaults)
            logger.info(choice.schemaGives
                ? "reloaded the defaults file \(path): \(defaults.count) defaults, kept for when the store has no schema: its schema gives the defaults now"
                : "reloaded the defaults file \(path): \(defaults.count) defaults registered")
        } catch {
            logger.error("cannot reload the defaults file \(path): \(error); the defaults registered before are kept")
        }
    }
}

/// The file descriptor SIGHUP's handler writes to; -1 until `HangupReload.install`.
nonisolated(unsafe) private var hangupPipe: Int32 = -1

/// Writes one byte for the thread that reloads: all a signal handler may safely do.
private func noteHangup(_ signal: Int32) {
    let saved = errno
    var byte: UInt8 = 1
    _ = write(hangupPipe, &byte, 1)
    errno = saved
}

/// SIGHUP for a mount with `--defaults`: reloads the file instead of ending the mount.
enum HangupReload {
    /// Replaces SIGHUP's handler (libfuse's ends the session) with one that has `reload`
    /// called on a thread of its own; several signals in a row may make one reload.
    /// Call it once, after `FuseMount.handleSignals()`.
    static func install(_ reload: @escaping @Sendable () -> Void) throws {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw CommandFailure("cannot watch for SIGHUP: \(String(cString: strerror(errno)))") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        // A full pipe already holds a wake-up: the handler must never block.
        _ = fcntl(ends[1], F_SETFL, O_NONBLOCK)
        hangupPipe = ends[1]
        let readEnd = ends[0]
        let thread = Thread {
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                if count <= 0 { return }
                reload()
            }
        }
        thread.name = "kvsfs-defaults"
        thread.start()
        var action = sigaction()
        action.__sigaction_handler.sa_handler = noteHangup
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        guard sigaction(SIGHUP, &action, nil) == 0 else { throw CommandFailure("cannot watch for SIGHUP: \(String(cString: strerror(errno)))") }
    }
}
