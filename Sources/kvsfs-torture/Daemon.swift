import Foundation

struct DaemonFailure: Error, CustomStringConvertible {
    let description: String
}

/// A `kvsfs mount` daemon: this harness's child, in the foreground, on the store's default
/// remote (a file remote in its data directory), so that its sync thread runs too.
///
/// Its pid is kept in `pidFile` while it may run, for scripts/torture to kill it should this
/// process die first.
final class MountDaemon {
    let mountpoint: String
    private let process = Process()
    private let pidFile: String

    /// Starts the daemon and waits (up to 20 s) until the mount answers.
    init(kvsfs: String, mountpoint: String, dataDirectory: String, log: FileHandle, pidFile: String) throws(DaemonFailure) {
        self.mountpoint = mountpoint
        self.pidFile = pidFile
        process.executableURL = URL(fileURLWithPath: kvsfs)
        process.arguments = ["mount", mountpoint, "--data-dir", dataDirectory]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        do { try process.run() } catch { throw DaemonFailure(description: "cannot start \(kvsfs): \(error)") }
        try? "\(process.processIdentifier)\n".write(toFile: pidFile, atomically: true, encoding: .utf8)
        let deadline = ContinuousClock.now + .seconds(20)
        while !Self.isMounted(mountpoint) {
            if !process.isRunning {
                throw DaemonFailure(description: "kvsfs mount exited with status \(process.terminationStatus) (see its log)")
            }
            if ContinuousClock.now > deadline {
                stop()
                throw DaemonFailure(description: "kvsfs mount did not come up within 20 s")
            }
            usleep(10_000)
        }
    }

    /// SIGKILL, and waits for the daemon to be gone. The dead mount stays until `clearDeadMount`.
    func kill9() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: pidFile)
    }

    /// Unmounts what a killed daemon left (the kernel answers ENOTCONN on it until then).
    func clearDeadMount() {
        Self.tool("/bin/fusermount3", ["-u", mountpoint])
        if Self.isMounted(mountpoint) { Self.tool("/bin/umount", ["-l", mountpoint]) }
    }

    /// A clean unmount (the daemon exits); SIGKILL and a lazy unmount if it has not within 10 s.
    func stop() {
        if process.isRunning {
            Self.tool("/bin/fusermount3", ["-u", mountpoint])
            let deadline = ContinuousClock.now + .seconds(10)
            while process.isRunning, ContinuousClock.now < deadline { usleep(20_000) }
            if process.isRunning { kill9() }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: pidFile)
        if Self.isMounted(mountpoint) { Self.tool("/bin/umount", ["-l", mountpoint]) }
    }

    static func isMounted(_ path: String) -> Bool {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return false }
        return table.split(separator: "\n").contains { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 && fields[4] == path
        }
    }

    /// Runs `kvsfs sync` on the mount: it returns once what was pending is pushed and what the
    /// remote has is applied. Nil when it succeeded, else why not.
    func synchronize(kvsfs: String) -> String? {
        let status = Self.tool(kvsfs, ["sync", mountpoint], timeout: 60)
        return status == 0 ? nil : "kvsfs sync \(mountpoint) exited with status \(status)"
    }

    /// Runs a tool, waiting at most `timeout` seconds for it (then it is killed); its exit status.
    @discardableResult
    private static func tool(_ executable: String, _ arguments: [String], timeout: Int64 = 10) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        let deadline = ContinuousClock.now + .seconds(timeout)
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
