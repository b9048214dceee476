import Foundation
import KVTestSupport
import Testing

/// A mount trusts only files of its own user: a data directory others may write, or a token
/// file others may read, is refused with one line that names the file, its mode and the
/// command that mends it, and nothing is mounted.
@Suite("Files of one's own", .serialized)
struct OwnFilesTests {
    /// `kvsfs mount` with `arguments`, which must be refused: its result, and no mount left,
    /// even if a regression lets it mount.
    private func refusedMount(_ dir: TemporaryDirectory, _ arguments: [String]) throws -> CommandResult {
        let mountpoint = dir.subdirectory("mnt")
        defer {
            if DaemonMount.isMounted(mountpoint) { _ = try? run("/bin/fusermount3", ["-u", mountpoint], timeout: 10) }
        }
        let result = try run(kvsfsBinary, ["mount", mountpoint] + arguments, timeout: 15)
        #expect(!DaemonMount.isMounted(mountpoint), "nothing is mounted")
        return result
    }

    @Test("a data directory that group or others may write is refused, with its mode and the chmod that mends it",
          arguments: [0o775, 0o777, 0o1777, 0o757])
    func writableDataDirectory(mode: Int) throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let data = dir.subdirectory("data")
        #expect(chmod(data, mode_t(mode)) == 0)
        let result = try refusedMount(dir, ["--data-dir", data, "--remote", "none"])
        #expect(result.status == 1)
        let shown = String(repeating: "0", count: max(0, 4 - String(mode, radix: 8).count)) + String(mode, radix: 8)
        #expect(result.standardError == "Error: the data directory \(data) may be written by group or others (mode \(shown)): "
                + "run 'chmod go-w \(data)'\n", "\(result)")
    }

    @Test("a data directory of another user is refused")
    func foreignDataDirectory() throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let data = dir.subdirectory("data")
        #expect(chown(data, 65534, 65534) == 0)
        let result = try refusedMount(dir, ["--data-dir", data, "--remote", "none"])
        #expect(result.status == 1)
        #expect(result.standardError.hasPrefix("Error: the data directory \(data) belongs to another user (uid 65534)"), "\(result)")
    }

    @Test("a directory above the data directory that others may write is refused, unless sticky as /tmp is")
    func writableParent() throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let parent = dir.subdirectory("shared")
        let data = dir.subdirectory("shared/data")
        #expect(chmod(parent, 0o777) == 0)
        let refused = try refusedMount(dir, ["--data-dir", data, "--remote", "none"])
        #expect(refused.status == 1)
        #expect(refused.standardError == "Error: the directory \(parent), above the data directory, may be written by group or others "
                + "(mode 0777): run 'chmod go-w \(parent)' or use another data directory\n", "\(refused)")
        #expect(chmod(parent, 0o1777) == 0)
        let daemon = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: data, extraArguments: ["--remote", "none"])
        #expect(daemon.stop() == 0, "a sticky directory above is trusted: \(daemon.logText())")
    }

    @Test("a token file that group or others may read is refused, and its token never used", arguments: [0o644, 0o640, 0o604, 0o660])
    func readableTokenFile(mode: Int) throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let token = dir.path + "/token"
        try writeTokenFile("kvs_a_b", to: token)
        #expect(chmod(token, mode_t(mode)) == 0)
        let result = try refusedMount(dir, ["--data-dir", dir.subdirectory("data"), "--remote", "http://127.0.0.1:1", "--token-file", token])
        #expect(result.status == 1)
        #expect(result.standardError == "Error: the token file \(token) may be read or written by group or others "
                + "(mode 0\(String(mode, radix: 8))): run 'chmod 600 \(token)'\n", "\(result)")
    }

    @Test("a refused token file changes nothing in the store: the limits given with it are not kept")
    func refusalChangesNothing() throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let token = dir.path + "/token"
        try writeTokenFile("kvs_a_b", to: token)
        #expect(chmod(token, 0o644) == 0)
        let data = dir.subdirectory("data")
        let refused = try refusedMount(dir, ["--data-dir", data, "--quota-keys", "3", "--remote", "http://127.0.0.1:1", "--token-file", token])
        #expect(refused.status == 1, "\(refused)")
        let daemon = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: data, extraArguments: ["--remote", "none"])
        defer { daemon.stop() }
        let status = try run(kvsfsBinary, ["status", daemon.mountpoint])
        #expect(status.standardOutput.contains("of 1024 used"), "the store keeps its limit of keys: \(status)")
    }

    @Test("a FIFO or an empty file as the token file is refused at once")
    func fifoOrEmptyTokenFile() throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let fifo = dir.path + "/fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        let started = Date()
        let viaFifo = try refusedMount(dir, ["--data-dir", dir.subdirectory("data"), "--remote", "http://127.0.0.1:1", "--token-file", fifo])
        #expect(viaFifo.standardError == "Error: the token file \(fifo) is not a regular file\n", "\(viaFifo)")
        #expect(Date().timeIntervalSince(started) < 10, "no wait for a writer")
        let empty = dir.path + "/empty"
        try writeTokenFile("", to: empty)
        let viaEmpty = try refusedMount(dir, ["--data-dir", dir.subdirectory("data"), "--remote", "http://127.0.0.1:1", "--token-file", empty])
        #expect(viaEmpty.standardError == "Error: the token file \(empty) holds no token\n", "\(viaEmpty)")
    }

    @Test("the mount(8) form refuses a data directory others may write before it opens the daemon's log there")
    func plantedLogLink() throws {
        let dir = TemporaryDirectory("kvsfs-own")
        defer { dir.remove() }
        let data = dir.subdirectory("data")
        #expect(chmod(data, 0o777) == 0)
        let target = dir.path + "/target"
        #expect(symlink(target, data + "/planted.log") == 0)
        let mountpoint = dir.subdirectory("mnt")
        defer {
            if DaemonMount.isMounted(mountpoint) { _ = try? run("/bin/fusermount3", ["-u", mountpoint], timeout: 10) }
        }
        let result = try run(kvsfsBinary, ["planted", mountpoint, "-o", "data_dir=\(data),remote=none"], timeout: 30)
        #expect(result.status == 1, "\(result)")
        #expect(result.standardError.contains("may be written by group or others (mode 0777)"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: target), "the link's target got nothing")
        #expect(!DaemonMount.isMounted(mountpoint))
    }
}
