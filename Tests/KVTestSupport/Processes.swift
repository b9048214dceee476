import Foundation

/// What a finished command printed and its exit status.
public struct CommandResult: Sendable, CustomStringConvertible {
    public let status: Int32
    public let standardOutput: String
    public let standardError: String
    public var description: String { "status \(status)\nstdout: \(standardOutput)\nstderr: \(standardError)" }
}

/// Runs `/bin/bash -c script` and waits for it (at most `timeout` seconds, then it is killed).
@discardableResult
public func shell(_ script: String, environment: [String: String] = [:], timeout: Double = 60) throws -> CommandResult {
    try run("/bin/bash", ["-c", script], environment: environment, timeout: timeout)
}

@discardableResult
public func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: Double = 60) throws -> CommandResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let output = Pipe()
    let error = Pipe()
    process.standardOutput = output
    process.standardError = error
    process.standardInput = FileHandle.nullDevice
    try withSignalsUnblocked { try process.run() }
    let deadline = DispatchTime.now() + timeout
    let outputData = ReadAll(output.fileHandleForReading)
    let errorData = ReadAll(error.fileHandleForReading)
    let exited = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        process.waitUntilExit()
        exited.signal()
    }
    if exited.wait(timeout: deadline) == .timedOut {
        kill(process.processIdentifier, SIGKILL)
        exited.wait()
    }
    return CommandResult(status: process.terminationStatus,
                         standardOutput: String(decoding: outputData.wait(until: deadline), as: UTF8.self),
                         standardError: String(decoding: errorData.wait(until: deadline), as: UTF8.self))
}

/// Runs `body` (which starts a child process) with no signal blocked on this thread, so that
/// the child starts with none blocked: test threads block SIGTERM and SIGINT, and a child
/// inheriting that mask could not be stopped by `kill` or `timeout`.
public func withSignalsUnblocked<T>(_ body: () throws -> T) rethrows -> T {
    var none = sigset_t()
    var previous = sigset_t()
    sigemptyset(&none)
    pthread_sigmask(SIG_SETMASK, &none, &previous)
    defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
    return try body()
}

/// Drains a pipe on a background thread so that a chatty child never blocks.
private final class ReadAll: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)
    init(_ handle: FileHandle) {
        DispatchQueue.global().async {
            while case let chunk = handle.availableData, !chunk.isEmpty {
                self.lock.withLock { self.data.append(chunk) }
            }
            self.done.signal()
        }
    }

    /// What the pipe gave up to its end, or up to `deadline` when something the child started
    /// (a script's background process) still holds it open: a test then fails on what it
    /// read instead of hanging.
    func wait(until deadline: DispatchTime) -> Data {
        _ = done.wait(timeout: deadline)
        return lock.withLock { data }
    }
}

/// The directory holding the built products (`kvsfs`), next to the test bundle.
public var productsDirectory: URL {
    if let explicit = ProcessInfo.processInfo.environment["KVSFS_PRODUCTS"] { return URL(fileURLWithPath: explicit) }
    var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while url.path != "/" {
        if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("kvsfs").path) { return url }
        url.deleteLastPathComponent()
    }
    return URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent(".build/debug")
}

public var kvsfsBinary: String { productsDirectory.appendingPathComponent("kvsfs").path }

/// Shell lines that wait (up to 10 s) until the shell `condition` holds.
public func shellWait(until condition: String) -> String {
    "for i in $(seq 500); do \(condition) && break; sleep 0.02; done"
}

/// Shell lines that start `inotifywait -m` on `directory` in the background for `seconds`, its
/// events (`%e %f`, one a line) going to `output`, and go on once its watches are established:
/// after a fixed sleep, a loaded machine could make the change before the watch and lose its
/// first event. The watcher's pid is in `$watcher`.
public func shellWatch(_ directory: String, events: String, into output: String, seconds: Int) -> String {
    """
    timeout \(seconds) inotifywait -m --format '%e %f' -e \(events) \(directory) > \(output) 2> \(output).setup &
    watcher=$!
    \(shellWait(until: "grep -q 'Watches established' \(output).setup"))
    """
}

/// A `kvsfs mount` daemon started from the built binary.
public final class DaemonMount: @unchecked Sendable {
    public let mountpoint: String
    public let dataDirectory: String
    public let process: Process
    /// Where the daemon's standard output and error go: a file beside the data directory, so
    /// that a chatty daemon never blocks on a full pipe, and a test can read what it said.
    public let logPath: String

    /// Starts `kvsfs mount` and waits until the mount answers.
    public init(mountpoint: String, dataDirectory: String, extraArguments: [String] = []) throws {
        self.mountpoint = mountpoint
        self.dataDirectory = dataDirectory
        logPath = dataDirectory + ".\(UUID().uuidString.prefix(8)).log"
        process = Process()
        process.executableURL = URL(fileURLWithPath: kvsfsBinary)
        process.arguments = ["mount", mountpoint, "--data-dir", dataDirectory] + extraArguments
        guard FileManager.default.createFile(atPath: logPath, contents: nil, attributes: [.posixPermissions: 0o600]), let log = FileHandle(forWritingAtPath: logPath) else {
            throw DaemonError(description: "cannot create the daemon's log \(logPath)")
        }
        process.standardOutput = log
        process.standardError = log
        try withSignalsUnblocked { try process.run() }
        try? log.close()
        let deadline = Date().addingTimeInterval(20)
        while !Self.isMounted(mountpoint) {
            if !process.isRunning {
                throw DaemonError(description: "kvsfs mount exited with status \(process.terminationStatus): \(logText())")
            }
            if Date() > deadline {
                stop()
                throw DaemonError(description: "kvsfs mount did not come up within 20 s")
            }
            usleep(20_000)
        }
    }

    public func path(_ name: String) -> String { (mountpoint as NSString).appendingPathComponent(name) }

    /// What the daemon has written to its standard output and error so far.
    public func logText() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Unmounts (as `fusermount3 -u` would) and waits for the daemon to exit; returns its status.
    @discardableResult
    public func stop() -> Int32 {
        if process.isRunning {
            _ = try? run("/bin/fusermount3", ["-u", mountpoint], timeout: 10)
            let deadline = Date().addingTimeInterval(10)
            while process.isRunning, Date() < deadline { usleep(20_000) }
            if process.isRunning {
                _ = try? run("/bin/umount", ["-l", mountpoint], timeout: 10)
                process.terminate()
                process.waitUntilExit()
            }
        }
        if Self.isMounted(mountpoint) { _ = try? run("/bin/umount", ["-l", mountpoint], timeout: 10) }
        return process.terminationStatus
    }

    /// Kills the daemon with SIGKILL and clears the dead mount it leaves.
    public func crash() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        _ = try? run("/bin/fusermount3", ["-u", mountpoint], timeout: 10)
        if Self.isMounted(mountpoint) { _ = try? run("/bin/umount", ["-l", mountpoint], timeout: 10) }
    }

    public static func isMounted(_ path: String) -> Bool {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        return table.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 && fields[4] == path
        }
    }
}

public struct DaemonError: Error, CustomStringConvertible {
    public let description: String
}

/// Starts a daemon on fresh directories, runs `body`, and always stops it and cleans up.
public func withDaemon<T>(extraArguments: [String] = [], _ body: (DaemonMount, TemporaryDirectory) throws -> T) throws -> T {
    let directory = TemporaryDirectory("kvsfs-e2e")
    defer { directory.remove() }
    let daemon = try DaemonMount(mountpoint: directory.subdirectory("mnt"), dataDirectory: directory.subdirectory("data"),
                                 extraArguments: extraArguments)
    defer { daemon.stop() }
    return try body(daemon, directory)
}

/// A `kvsfs serve` process on a loopback port, with its database.
public final class ServerProcess: @unchecked Sendable {
    public let port: Int
    public let database: String
    public let extraArguments: [String]
    public private(set) var process: Process
    /// Where the server's standard output and error go, across restarts: a file of its own,
    /// so that a test can read what the server said.
    public let logPath: String
    /// http://127.0.0.1:PORT, or https://localhost:PORT when serving TLS.
    public var url: String { extraArguments.contains("--tls-cert") ? "https://localhost:\(port)" : "http://127.0.0.1:\(port)" }

    /// Starts a server on `database` (sqlite:///... or postgres://...), on `port` or a free
    /// one, and waits until it answers /health.
    public init(database: String, port: Int? = nil, extraArguments: [String] = []) throws {
        self.database = database
        self.extraArguments = extraArguments
        self.port = port ?? ServerProcess.freePort()
        logPath = NSTemporaryDirectory() + "kvsfs-serve-\(self.port)-\(UUID().uuidString.prefix(8)).log"
        process = Process()
        try start()
    }

    /// Starts the server again (after `stop()`), on the same port and database.
    public func start() throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: kvsfsBinary)
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)", "--database", database] + extraArguments
        let descriptor = open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw DaemonError(description: "cannot open the server's log \(logPath)") }
        let log = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        process.standardOutput = log
        process.standardError = log
        try withSignalsUnblocked { try process.run() }
        try? log.close()
        let deadline = Date().addingTimeInterval(20)
        while (try? shell("curl -sfk \(url)/health", timeout: 5))?.status != 0 {
            if !process.isRunning { throw DaemonError(description: "kvsfs serve exited with status \(process.terminationStatus)") }
            if Date() > deadline { throw DaemonError(description: "kvsfs serve did not answer within 20 s") }
            usleep(50_000)
        }
    }

    /// SIGTERM, and waits for the exit; returns the status.
    @discardableResult
    public func stop() -> Int32 {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        return process.terminationStatus
    }

    deinit {
        stop()
        unlink(logPath)
    }

    /// What the server has said so far, across its restarts.
    public func logText() -> String {
        (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
    }

    /// Runs a `kvsfs account` or `kvsfs token` command on this server's database; returns its output.
    public func admin(_ arguments: [String]) throws -> String {
        let result = try run(kvsfsBinary, arguments + ["--database", database])
        guard result.status == 0 else { throw DaemonError(description: "kvsfs \(arguments.joined(separator: " ")): \(result)") }
        return result.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A port nothing listens on now (the kernel picks it).
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Where a test server keeps its data.
public enum ServerBackend: String, CaseIterable, Sendable {
    case sqlite, postgres
}

/// A server database for one test: a SQLite file in `directory`, or a fresh PostgreSQL
/// database on the server that scripts/test starts ($KVSFS_TEST_POSTGRES:
/// postgres://USER:PASSWORD@HOST:PORT), dropped by `remove()`.
public struct TestDatabase: Sendable {
    public let url: String
    private let postgresName: String?

    public init(_ backend: ServerBackend, in directory: TemporaryDirectory) throws {
        switch backend {
        case .sqlite:
            url = "sqlite://\(directory.path)/server.sqlite"
            postgresName = nil
        case .postgres:
            let name = "kvsfs_test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
            try Self.psql("CREATE DATABASE \(name)")
            url = "\(try Self.postgresServer())/\(name)"
            postgresName = name
        }
    }

    public func remove() {
        if let postgresName { _ = try? Self.psql("DROP DATABASE IF EXISTS \(postgresName) WITH (FORCE)") }
    }

    private static func postgresServer() throws -> String {
        guard let server = ProcessInfo.processInfo.environment["KVSFS_TEST_POSTGRES"], !server.isEmpty else {
            throw DaemonError(description: "KVSFS_TEST_POSTGRES is not set: run scripts/test, which starts PostgreSQL and sets it")
        }
        guard server.hasPrefix("postgres://"), !server.contains("\n") else {
            throw DaemonError(description: "KVSFS_TEST_POSTGRES is not one postgres:// URL: \(server)")
        }
        return server
    }

    @discardableResult
    private static func psql(_ statement: String) throws -> CommandResult {
        let result = try run("/usr/bin/psql", ["\(try postgresServer())/postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c", statement])
        guard result.status == 0 else { throw DaemonError(description: "psql \(statement): \(result)") }
        return result
    }
}

/// Writes a sync token to `path`, readable by its owner alone, as `--token-file` wants it.
public func writeTokenFile(_ token: String, to path: String) throws {
    try (token + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    guard chmod(path, 0o600) == 0 else { throw DaemonError(description: "cannot chmod the token file \(path)") }
}

/// The errno fsync(2) of `path` fails with, as a process sees it; 0 when it succeeds.
public func fsyncErrno(_ path: String) throws -> Int32 {
    let result = try run("/usr/bin/python3", ["-c", """
        import os, sys
        fd = os.open(sys.argv[1], os.O_RDONLY)
        try:
            os.fsync(fd); print(0)
        except OSError as e:
            print(e.errno)
        """, path], timeout: 90)
    return Int32(result.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
}

/// Makes a self-signed certificate for localhost and 127.0.0.1 in `directory` (`cert.pem`,
/// `key.pem`), for a `kvsfs serve --tls-cert --tls-key` the test starts.
public func makeSelfSignedCertificate(in directory: String) throws {
    let made = try shell("""
        cd \(directory) && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \\
          -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout key.pem -out cert.pem 2>&1
        """)
    guard made.status == 0 else { throw DaemonError(description: "openssl could not make a certificate: \(made)") }
}
