import Foundation
import KVTestSupport
import Testing
@testable import kvsfs

/// The mount(8) form's `-o` options against `kvsfs mount`'s: one spelling for each.
@Suite("mount -o spellings")
struct MountOptionsTests {
    @Test("every kvsfs mount option has an -o spelling (--store is the mount(8) form's device)")
    func everyOptionIsSpelled() {
        let help = Mount.helpMessage(columns: 400)
        // Each option's line starts with it (its help may name other commands' options).
        let options = Swift.Set(help.split(separator: "\n").compactMap { line in
            line.firstMatch(of: /^\s+(--[a-z][a-z-]*)/).map { String($0.output.1) }
        })
        let spelled = Swift.Set(MountOptions.valued.values).union(MountOptions.flags.values).union(["--store", "--help"])
        #expect(options.contains("--history-versions"), "the help lists the options: \(help)")
        #expect(options.subtracting(spelled).isEmpty, "kvsfs mount options with no -o spelling: \(options.subtracting(spelled).sorted())")
    }

    @Test("history_versions and history_days become --history-versions and --history-days")
    func historyOptions() throws {
        let options = try MountOptions(store: "default", mountpoint: "/mnt/kv", options: "history_versions=3,history_days=7,rw")
        #expect(options.arguments == ["--store", "default", "/mnt/kv", "--history-versions", "3", "--history-days", "7"])
    }

    @Test("of ro and rw, the last one named wins, as mount(8) reads them")
    func lastAccessWins() throws {
        #expect(try MountOptions(store: "s", mountpoint: "/m", options: "ro,quota_keys=3,rw").arguments == ["--store", "s", "/m", "--quota-keys", "3"])
        #expect(try MountOptions(store: "s", mountpoint: "/m", options: "rw,ro").arguments == ["--read-only", "--store", "s", "/m"])
        #expect(try MountOptions.expanding(["/mnt/kv", "-o", "ro", "-o", "rw"]) == ["/mnt/kv"])
        #expect(try MountOptions.expanding(["--read-only", "/mnt/kv", "-orw,allow_other"]) == ["/mnt/kv", "--allow-other"])
        #expect(try MountOptions.expanding(["-o", "rw", "/mnt/kv", "-o", "ro", "-o", "ro"]) == ["/mnt/kv", "--read-only"])
    }

    @Test("device_name becomes --device-name")
    func deviceNameOption() throws {
        let options = try MountOptions(store: "default", mountpoint: "/mnt/kv", options: "device_name=ann's laptop")
        #expect(options.arguments == ["--store", "default", "/mnt/kv", "--device-name", "ann's laptop"])
    }
}

/// `kvsfs mount MOUNTPOINT -o ...`: the same options, through the same table, as the mount(8) form.
@Suite("kvsfs mount -o", .serialized)
struct MountCommandOptionsTests {
    @Test("-o lists become the long options they stand for, before parsing; -f and what follows -- are left alone")
    func expanding() throws {
        #expect(try MountOptions.expanding(["/mnt/kv", "-o", "ro,quota_keys=3", "--data-dir", "/d", "-f"])
            == ["/mnt/kv", "--read-only", "--quota-keys", "3", "--data-dir", "/d", "-f"])
        #expect(try MountOptions.expanding(["-o", "ro", "/mnt/kv", "-oallow_other,nosuid,foreground", "-o", "history_days=7"])
            == ["--read-only", "/mnt/kv", "--allow-other", "--history-days", "7"])
        #expect(try MountOptions.expanding(["/mnt/kv", "--", "-o"]) == ["/mnt/kv", "--", "-o"])
        #expect(try MountOptions.expanding(["/mnt/kv", "--data-dir", "-odd", "--store", "-o"]) == ["/mnt/kv", "--data-dir", "-odd", "--store", "-o"])
        #expect(throws: CommandFailure.self) { try MountOptions.expanding(["/mnt/kv", "-o"]) }
        do {
            _ = try MountOptions.expanding(["/mnt/kv", "-o", "ro,bogus=1"])
            Issue.record("bogus=1 was taken")
        } catch {
            #expect("\(error)" == "unknown mount option 'bogus=1'")
        }
    }

    @Test("kvsfs mount MNT -o ro,quota_keys=3 -f mounts read-only with that quota: a write fails with EROFS")
    func readOnlyThroughO() throws {
        let directory = TemporaryDirectory("kvsfs-mount-o")
        defer { directory.remove() }
        let daemon = try DaemonMount(mountpoint: try directory.privateSubdirectory("mnt"), dataDirectory: try directory.privateSubdirectory("data"),
                                     extraArguments: ["-o", "ro,quota_keys=3", "-f", "--remote", "none"])
        defer { daemon.stop() }
        let write = try shell("echo hello > \(daemon.path("greeting"))")
        #expect(write.status != 0 && write.standardError.contains("Read-only file system"), "\(write)")
        #expect(!FileManager.default.fileExists(atPath: daemon.path("greeting")))
        let status = try run(kvsfsBinary, ["status", daemon.mountpoint])
        #expect(status.standardOutput.contains("0 of 3 used"), "\(status)")
    }

    @Test("an unknown -o option is refused by its name in one line, and nothing stays mounted")
    func unknownOption() throws {
        let directory = TemporaryDirectory("kvsfs-mount-o")
        defer { directory.remove() }
        let mountpoint = try directory.privateSubdirectory("mnt")
        let result = try run(kvsfsBinary, ["mount", mountpoint, "-o", "ro,bogus", "--data-dir", try directory.privateSubdirectory("data")],
                             timeout: 20)
        defer { if DaemonMount.isMounted(mountpoint) { _ = try? run("/bin/umount", ["-l", mountpoint]) } }
        #expect(result.status != 0, "\(result)")
        #expect(result.standardError == "Error: unknown mount option 'bogus'\n", "\(result)")
        #expect(!DaemonMount.isMounted(mountpoint))
    }

    @Test("kvsfs mount --help shows the -o spellings beside the options they stand for")
    func help() throws {
        let help = Mount.helpMessage(columns: 200)
        #expect(help.contains("-o <opt[,opt...]>"), "\(help)")
        #expect(help.contains(/quota_keys=VALUE +--quota-keys VALUE/), "\(help)")
        #expect(help.contains(/\bro +--read-only/), "\(help)")
    }
}
