import Foundation
import Glibc
import KVTestSupport
import Testing

/// kvsfs as mount(8), fstab and systemd start it: the `kvsfs STORE MOUNTPOINT -o OPTIONS` form
/// that mount.fuse3 runs, which returns once the mount answers and leaves a daemon serving it,
/// and the readiness both daemons tell systemd through `$NOTIFY_SOCKET`.
@Suite("Running as a daemon", .serialized)
struct DaemonTests {
    /// The daemons of this test's mounts: `kvsfs mount --store STORE MOUNTPOINT ...`.
    private func daemonIsRunning(_ mountpoint: String) -> Bool {
        (try? shell("pgrep -f -- 'kvsfs mount --store [^ ]+ \(mountpoint)( |$)'").status) == 0
    }

    @Test("kvsfs STORE MOUNTPOINT -o ... returns once the mount answers; umount ends the daemon cleanly, the write kept")
    func mountHelperForm() throws {
        let dir = TemporaryDirectory("kvsfs-daemon")
        defer {
            _ = try? run("/bin/umount", ["-l", dir.path + "/mnt"])
            dir.remove()
        }
        let mountpoint = dir.subdirectory("mnt")
        let data = dir.path + "/data"
        let options = "rw,nosuid,nodev,_netdev,defaults,x-systemd.automount,comment=x-gvfs-show,data_dir=\(data),remote=none"
        let mounted = try run(kvsfsBinary, ["prefs", mountpoint, "-o", options])
        #expect(mounted.status == 0, "\(mounted)")
        // No wait: the mount answers as soon as the command has returned.
        let written = try shell("echo '<string>kept</string>' > \(mountpoint)/greeting && cat \(mountpoint)/greeting")
        #expect(written.status == 0 && written.standardOutput.contains("<string>kept</string>"), "\(written)")
        #expect(daemonIsRunning(mountpoint))

        #expect(try run("/bin/umount", [mountpoint]).status == 0)
        #expect(eventually(within: 10) { !daemonIsRunning(mountpoint) }, "the daemon ends with the mount")
        let log = try String(contentsOfFile: data + "/prefs.log", encoding: .utf8)
        #expect(log.contains("unmounted cleanly"), "\(log)")

        #expect(try run(kvsfsBinary, ["prefs", mountpoint, "-o", "data_dir=\(data),remote=none"]).status == 0)
        defer { _ = try? run("/bin/umount", [mountpoint]) }
        #expect(try String(contentsOfFile: mountpoint + "/greeting", encoding: .utf8).contains("<string>kept</string>"))
    }

    @Test("kvsfs help SUBCOMMAND prints that subcommand's help: it is not the mount(8) form")
    func helpIsNotAMount() throws {
        let result = try run(kvsfsBinary, ["help", "mount"])
        #expect(result.status == 0, "\(result)")
        #expect(result.standardOutput.contains("USAGE: kvsfs mount"), "\(result)")
    }

    @Test("a bad option or mountpoint is one line and exit 1, and nothing is mounted", arguments: [
        ("bogus", "unknown mount option 'bogus'"),
        ("remote", "unknown mount option 'remote': it needs a value"),
        ("defaults=", "unknown mount option 'defaults=': it needs a value"),
        ("format=json", "--format must be xml or binary"),
        ("quota_keys=0", "--quota-keys must be a positive number"),
    ])
    func refusedOptions(option: String, message: String) throws {
        let dir = TemporaryDirectory("kvsfs-daemon")
        defer { dir.remove() }
        let mountpoint = dir.subdirectory("mnt")
        let result = try run(kvsfsBinary, ["default", mountpoint, "-o", "data_dir=\(dir.path)/data,\(option)"])
        #expect(result.status == 1, "\(result)")
        #expect(result.standardError.contains(message), "\(result)")
        #expect(result.standardError.split(separator: "\n").count == 1, "\(result)")
        #expect(!DaemonMount.isMounted(mountpoint))
        let missing = try run(kvsfsBinary, ["default", dir.path + "/missing", "-o", "data_dir=\(dir.path)/data"])
        #expect(missing.status == 1 && missing.standardError.contains("does not exist"), "\(missing)")
    }

    @Test("-o ro: every change through it is EROFS; changes from another mount still come in, and so does an explicit replace-with-remote")
    func readOnlyMount() throws {
        let dir = TemporaryDirectory("kvsfs-daemon")
        defer { dir.remove() }
        let remote = "file://\(dir.subdirectory("cloud"))/cloud.sqlite"
        let writer = try DaemonMount(mountpoint: dir.subdirectory("writer"), dataDirectory: dir.subdirectory("data-w"),
                                     extraArguments: ["--remote", remote])
        defer { writer.stop() }
        let reader = dir.subdirectory("reader")
        let mounted = try run(kvsfsBinary, ["default", reader, "-o", "ro,data_dir=\(dir.path)/data-r,remote=\(remote)"])
        #expect(mounted.status == 0, "\(mounted)")
        defer { _ = try? run("/bin/umount", [reader]) }

        try "<integer>1</integer>".write(toFile: writer.path("count"), atomically: false, encoding: .utf8)
        #expect(try shell("\(kvsfsBinary) sync \(writer.mountpoint) && \(kvsfsBinary) sync \(reader)").status == 0)
        #expect(eventually(within: 10) { (try? String(contentsOfFile: reader + "/count", encoding: .utf8))?.contains("<integer>1</integer>") == true })
        for change in ["echo '<integer>2</integer>' > \(reader)/count", "echo x > \(reader)/new", "rm \(reader)/count",
                       "mv \(reader)/count \(reader)/moved", "touch \(reader)/count", "truncate -s 0 \(reader)/count"] {
            let result = try shell(change)
            #expect(result.status != 0 && result.standardError.contains("Read-only file system"), "\(change): \(result)")
        }
        #expect(try String(contentsOfFile: writer.path("count"), encoding: .utf8).contains("<integer>1</integer>"))

        // Taking the remote's values is what a read-only mirror is for.
        try "<integer>3</integer>".write(toFile: writer.path("count"), atomically: false, encoding: .utf8)
        #expect(try run(kvsfsBinary, ["sync", writer.mountpoint]).status == 0)
        let replaced = try run(kvsfsBinary, ["sync", "--replace-with-remote", reader])
        #expect(replaced.status == 0, "\(replaced)")
        #expect(try String(contentsOfFile: reader + "/count", encoding: .utf8).contains("<integer>3</integer>"))
    }

    @Test("kvsfs mount tells $NOTIFY_SOCKET READY=1 once the mount answers, and STOPPING=1 on SIGTERM")
    func mountNotifiesSystemd() throws {
        let dir = TemporaryDirectory("kvsfs-daemon")
        defer { dir.remove() }
        let notify = try NotifySocket(path: dir.path + "/notify")
        let mountpoint = dir.subdirectory("mnt")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: kvsfsBinary)
        process.arguments = ["mount", mountpoint, "--data-dir", dir.subdirectory("data"), "--remote", "none"]
        process.environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        process.standardError = FileHandle.nullDevice
        try withSignalsUnblocked { try process.run() }
        defer {
            if process.isRunning { process.terminate() }
            _ = try? run("/bin/umount", ["-l", mountpoint])
        }
        #expect(notify.receive(within: 20) == "READY=1")
        // At READY=1 the mount already answers.
        #expect(DaemonMount.isMounted(mountpoint))
        try "<true/>".write(toFile: mountpoint + "/ready", atomically: false, encoding: .utf8)
        #expect(try String(contentsOfFile: mountpoint + "/ready", encoding: .utf8).contains("<true/>"))

        process.terminate()
        #expect(notify.receive(within: 10) == "STOPPING=1")
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }

    @Test("kvsfs serve tells $NOTIFY_SOCKET READY=1 once it answers /health, and STOPPING=1 on SIGTERM")
    func serveNotifiesSystemd() throws {
        let dir = TemporaryDirectory("kvsfs-daemon")
        defer { dir.remove() }
        let notify = try NotifySocket(path: dir.path + "/notify")
        let port = ServerProcess.freePort()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: kvsfsBinary)
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)", "--database", "sqlite://\(dir.path)/server.sqlite"]
        process.environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try withSignalsUnblocked { try process.run() }
        defer { if process.isRunning { process.terminate() } }
        #expect(notify.receive(within: 20) == "READY=1")
        let health = try shell("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:\(port)/health")
        #expect(health.standardOutput == "200", "\(health)")

        process.terminate()
        #expect(notify.receive(within: 10) == "STOPPING=1")
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }
}
