import Foundation
import Glibc
import KVTestSupport
import Testing

/// kill -9 of a daemon while it shows remote changes through its own mount: the daemon ends at
/// once, and `kvsfs mount` on the dead mount it leaves says so and mounts again.
@Suite("A killed daemon", .serialized)
struct KilledDaemonTests {
    @Test("a daemon killed while a request of its own applier waits on its mount ends at once; kvsfs mount on the dead mount unmounts it, says so, and every synced value is there")
    func killedWhileApplying() throws {
        let dir = TemporaryDirectory("kvsfs-killed")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("remote"))/cloud.sqlite",
                      "--quota-total", "40000000", "--quota-value", "1000000", "--quota-keys", "1000"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let mountpoint = dir.subdirectory("b")
        var waitingKills = 0
        for cycle in 0..<6 {
            let b = try DaemonMount(mountpoint: mountpoint, dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
            // A dead mount is listed as a mount as well: up means its root answers.
            #expect(Self.answers(mountpoint, within: 20), "cycle \(cycle): \(b.logText())")
            if cycle > 0 {
                #expect(b.logText().contains("\(mountpoint) was a kvsfs mount whose daemon had gone away; unmounted it"), "cycle \(cycle): \(b.logText())")
            }
            // Large values, so that the applier spends its time in requests of the mount.
            let writer = try shell("""
                for k in $(seq 24); do printf '"%s"' "$(head -c 150000 /dev/zero | tr '\\0' \(cycle % 10))" > \(a.path("c\(cycle)-"))$k; done
                \(kvsfsBinary) sync \(a.mountpoint)
                """, timeout: 60)
            #expect(writer.status == 0, "\(writer)")
            let pid = b.process.processIdentifier
            let deadline = Date().addingTimeInterval(5)
            var waiting = false
            while !waiting, Date() < deadline { waiting = Self.waitsOnAMount(pid) }
            if waiting { waitingKills += 1 }
            kill(pid, SIGKILL)
            let ended = Self.ends(b.process, within: 5)
            #expect(ended, "cycle \(cycle): the killed daemon had not ended 5 s later (waiting on a mount when killed: \(waiting))")
            if !ended {
                Self.abortConnection(of: mountpoint)
                b.process.waitUntilExit()
            }
        }
        #expect(waitingKills > 0, "no kill came while a request waited on the mount")
        // The last daemon's dead mount is taken over once more, and the mount holds every value A synced.
        let b = try DaemonMount(mountpoint: mountpoint, dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        #expect(Self.answers(mountpoint, within: 20), "\(b.logText())")
        let held = try shell("\(kvsfsBinary) sync \(mountpoint) && ls \(mountpoint) | wc -l && diff -r \(a.mountpoint) \(mountpoint) && echo same")
        #expect(held.standardOutput == "144\nsame\n", "\(held)\n\(b.logText())")
    }

    /// Whether a thread of `pid`, or of a child of it, waits for the answer to a FUSE request.
    static func waitsOnAMount(_ pid: Int32) -> Bool {
        var processes = [pid]
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? [] {
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8)) ?? ""
            processes += children.split(separator: " ").compactMap { Int32($0) }
        }
        for process in processes {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process)/task")) ?? []
            for task in tasks {
                guard let stack = try? String(contentsOfFile: "/proc/\(process)/task/\(task)/stack", encoding: .utf8) else { continue }
                if stack.contains("request_wait_answer") || stack.contains("fuse_simple_request") || stack.contains("fuse_flush") { return true }
            }
        }
        return false
    }

    /// Whether a live mount answers on `mountpoint` within `seconds` (statfs always asks the
    /// daemon, where stat may be answered from the kernel's cache of a dead mount's root).
    static func answers(_ mountpoint: String, within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        var space = statvfs()
        while Date() < deadline {
            if DaemonMount.isMounted(mountpoint), statvfs(mountpoint, &space) == 0 { return true }
            usleep(20_000)
        }
        return false
    }

    static func ends(_ process: Process, within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        return !process.isRunning
    }

    /// Frees a daemon that cannot end: aborts its mount's FUSE connection through fusectl.
    static func abortConnection(of mountpoint: String) {
        guard let table = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
              let line = table.split(separator: "\n").last(where: { $0.split(separator: " ").count > 4 && $0.split(separator: " ")[4] == mountpoint }),
              let minor = line.split(separator: " ")[2].split(separator: ":").last else { return }
        _ = try? shell("mountpoint -q /sys/fs/fuse/connections || mount -t fusectl none /sys/fs/fuse/connections; echo 1 > /sys/fs/fuse/connections/\(minor)/abort")
    }
}
