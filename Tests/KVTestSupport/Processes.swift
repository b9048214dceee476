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
                         standardOutput: String(decoding: outputData.wait(), as: UTF8.self),
                         standardError: String(decoding: errorData.wait(), as: UTF8.self))
}

/// Runs `body` (which starts a child process) with no signal blocked on this thread, so that
/// the child starts with none blocked: test threads block SIGTERM and SIGINT, and a child
/// inheriting that mask could not be stopped by `kill` or `timeout`.
func withSignalsUnblocked<T>(_ body: () throws -> T) rethrows -> T {
    var none = sigset_t()
    var previous = sigset_t()
    sigemptyset(&none)
    pthread_sigmask(SIG_SETMASK, &none, &previous)
    defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
    return try body()
}

/// Drains a pipe on a background thread so that a chatty child never blocks.
private final class ReadAll: @unchecked Sendable {
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)
    init(_ handle: FileHandle) {
        DispatchQueue.global().async {
            self.data = handle.readDataToEndOfFile()
            self.done.signal()
        }
    }
    func wait() -> Data {
        done.wait()
        return data
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

/// A `kvsfs mount` daemon started from the built binary.
public final class DaemonMount: @unchecked Sendable {
    public let mountpoint: String
    public let dataDirectory: String
    public let process: Process
    private let log: Pipe

    /// Starts `kvsfs mount` and waits until the mount answers.
    public init(mountpoint: String, dataDirectory: String, extraArguments: [String] = []) throws {
        self.mountpoint = mountpoint
        self.dataDirectory = dataDirectory
        process = Process()
        process.executableURL = URL(fileURLWithPath: kvsfsBinary)
        process.arguments = ["mount", mountpoint, "--data-dir", dataDirectory] + extraArguments
        log = Pipe()
        process.standardOutput = log
        process.standardError = log
        try withSignalsUnblocked { try process.run() }
        let deadline = Date().addingTimeInterval(20)
        while !Self.isMounted(mountpoint) {
            if !process.isRunning {
                let output = String(decoding: log.fileHandleForReading.availableData, as: UTF8.self)
                throw DaemonError(description: "kvsfs mount exited with status \(process.terminationStatus): \(output)")
            }
            if Date() > deadline {
                stop()
                throw DaemonError(description: "kvsfs mount did not come up within 20 s")
            }
            usleep(20_000)
        }
    }

    public func path(_ name: String) -> String { (mountpoint as NSString).appendingPathComponent(name) }

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
