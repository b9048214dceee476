import ArgumentParser
import Foundation
import Glibc
import KVStore

/// `kvsfs STORE MOUNTPOINT [-o OPTIONS]`: what mount.fuse3 runs for `mount -t fuse.kvsfs STORE
/// MOUNTPOINT -o OPTIONS` and for an fstab line `STORE MOUNTPOINT fuse.kvsfs OPTIONS 0 0`.
///
/// Invariant: it returns 0 only once the mount answers requests, with the daemon serving it
/// in the background; anything that fails before then is its exit status and one line on
/// stderr, and nothing stays mounted.
struct MountHelper: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvsfs STORE MOUNTPOINT",
        abstract: "Mount store STORE on MOUNTPOINT in the background, as mount(8) does (see MOUNT(8) AND FSTAB in kvsfs(1)).")

    @Argument(help: "The store's id.")
    var store: String

    @Argument(help: "An existing, empty directory.")
    var mountpoint: String

    @Option(name: .short, help: "Mount options, comma-separated (see kvsfs(1)).")
    var o: [String] = []

    @Flag(name: .short, help: "Stay in the foreground.")
    var f = false

    /// POSIX_SPAWN_SETSID of glibc's spawn.h, a _GNU_SOURCE name Swift's Glibc module leaves out:
    /// the daemon is a session of its own, out of reach of the terminal's signals.
    private static let spawnNewSession: Int16 = 0x80

    /// How long the daemon may take to answer before the mount is given up.
    static let startTimeout: Int32 = 60_000

    func run() throws {
        let options = try MountOptions(store: store, mountpoint: mountpoint, options: o.joined(separator: ","))
        let mount: Mount
        do {
            mount = try Mount.parse(options.arguments)
        } catch {
            throw CommandFailure(Mount.message(for: error).split(separator: "\n").first.map(String.init) ?? "invalid mount options")
        }
        if f || options.foreground {
            try mount.run()
            return
        }
        let dataDirectory = options.dataDirectory.map { URL(fileURLWithPath: $0) } ?? StoreLocation.defaultDataDirectory()
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let log = dataDirectory.appendingPathComponent("\(store).log").path
        try Self.daemonize(["kvsfs", "mount"] + options.arguments, log: log)
    }

    /// Runs `arguments` as a new session with stdin from /dev/null and stdout and stderr to
    /// `log`, and waits for it to say it is ready (or why not) on a pipe.
    private static func daemonize(_ arguments: [String], log: String) throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw CommandFailure("cannot start the daemon: \(String(cString: strerror(errno)))") }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        // The daemon keeps the pipe's write end and nothing else of this process: a descriptor
        // it inherited (the pipe a caller reads this command's output from, say) would stay
        // open as long as the mount, and the caller would wait for ever.
        keepOnlyAcrossExec(writeEnd)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, spawnNewSession)

        var environment = ProcessInfo.processInfo.environment
        environment[Readiness.readyDescriptorVariable] = String(writeEnd)
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv + envp { free(pointer) }
        }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, "/proc/self/exe", &actions, &attributes, argv, envp)
        close(writeEnd)
        defer { close(readEnd) }
        guard spawned == 0 else { throw CommandFailure("cannot start the daemon: \(String(cString: strerror(spawned)))") }

        let answer = readLine(from: readEnd, timeout: startTimeout)
        if answer == "READY" { return }
        if let answer, answer.hasPrefix("FAILED ") {
            _ = waitpid(child, nil, 0)
            throw CommandFailure(String(answer.dropFirst("FAILED ".count)))
        }
        if answer == nil, waitpid(child, nil, WNOHANG) == 0 {
            kill(child, SIGTERM)
            throw CommandFailure("the mount did not answer within \(startTimeout / 1000) s; see \(log)")
        }
        var status: Int32 = 0
        _ = waitpid(child, &status, 0)
        throw CommandFailure("the daemon ended (wait status \(status)) before the mount was up; see \(log)")
    }

    /// Marks every descriptor above stderr close-on-exec, but `kept`.
    private static func keepOnlyAcrossExec(_ kept: Int32) {
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 && descriptor != kept {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        }
        _ = fcntl(kept, F_SETFD, 0)
    }

    /// The first line written to `descriptor`, or nil at end of file or after `timeout` ms.
    private static func readLine(from descriptor: Int32, timeout: Int32) -> String? {
        var bytes = [UInt8]()
        var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while bytes.count < 4096 {
            guard poll(&waiting, 1, timeout) == 1 else { return nil }
            var byte: UInt8 = 0
            guard Glibc.read(descriptor, &byte, 1) == 1 else { break }
            if byte == UInt8(ascii: "\n") { break }
            bytes.append(byte)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
    }
}

/// The `-o` options of the mount(8) form, as `kvsfs mount` arguments. Every `kvsfs mount`
/// option has its spelling here; the generic options mount(8) and fstab pass along are taken
/// and ignored; anything else is refused by name.
struct MountOptions {
    private(set) var arguments: [String]
    private(set) var foreground = false
    private(set) var dataDirectory: String?

    /// Options with a value, and the `kvsfs mount` option each stands for.
    static let valued: [String: String] = [
        "remote": "--remote", "data_dir": "--data-dir", "token_file": "--token-file", "tls_ca": "--tls-ca",
        "format": "--format", "quota_total": "--quota-total", "quota_value": "--quota-value",
        "quota_keys": "--quota-keys", "quota_key_length": "--quota-key-length",
    ]
    /// Options without a value, and the `kvsfs mount` flag each stands for.
    static let flags: [String: String] = ["allow_other": "--allow-other", "ro": "--read-only"]
    /// What mount(8), fstab and mount.fuse3 pass along that means nothing more here: a FUSE
    /// mount is always nodev and nosuid, and `rw` is the default.
    static let ignored: Swift.Set<String> = [
        "defaults", "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime",
        "strictatime", "diratime", "nodiratime", "auto", "noauto", "user", "nouser", "users", "owner", "group",
        "_netdev", "nofail", "sync", "async",
    ]

    init(store: String, mountpoint: String, options: String) throws {
        arguments = ["--store", store, mountpoint]
        for option in options.split(separator: ",", omittingEmptySubsequences: true).map(String.init) {
            let (name, value) = option.firstIndex(of: "=").map { (String(option[..<$0]), String(option[option.index(after: $0)...])) }
                ?? (option, nil)
            if let flag = Self.flags[name], value == nil {
                arguments.append(flag)
            } else if let long = Self.valued[name], let value, !value.isEmpty {
                arguments += [long, value]
                if name == "data_dir" { dataDirectory = value }
            } else if name == "foreground", value == nil {
                foreground = true
            } else if Self.ignored.contains(name) || name.hasPrefix("x-") || name == "comment" {
                continue
            } else {
                throw CommandFailure("unknown mount option '\(option)'\(Self.valued[name] != nil ? ": it needs a value" : "")")
            }
        }
    }
}
