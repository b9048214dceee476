import Foundation
import KVTestSupport
import Testing

/// What a writer sees when the disk holding the mount's data directory is full: ENOSPC, not
/// EIO; writes that work again once space is freed, without a remount; and a store whose
/// journal replay meets the full disk, which says so in one line and mounts once there is room,
/// every acknowledged write intact. The data directory is on a small tmpfs of its own.
@Suite("A full disk", .serialized, .hangGuard)
struct FullDiskTests {
    /// A tmpfs of 4 MiB on a fresh 0700 directory in `dir`, unmounted by `remove()`.
    struct SmallDisk {
        let path: String

        init(in dir: TemporaryDirectory) throws {
            path = try dir.privateSubdirectory("disk")
            let mounted = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", path])
            guard mounted.status == 0 else { throw DiskSetupError("cannot mount a tmpfs on \(path): \(mounted)") }
        }

        /// A 0700 directory on the disk, for the daemon's data.
        func dataDirectory() throws -> String {
            let data = path + "/data"
            if mkdir(data, 0o700) != 0, errno != EEXIST { throw DiskSetupError("cannot create \(data)") }
            guard chmod(data, 0o700) == 0 else { throw DiskSetupError("cannot chmod \(data)") }
            return data
        }

        /// Fills the disk to its last byte with a file of its own.
        func fill() throws {
            _ = try shell("dd if=/dev/zero of=\(path)/filler bs=4k 2>/dev/null; sync")
            #expect(try shell("df -B1 --output=avail \(path) | tail -1").standardOutput.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        }

        /// Frees what `fill()` took.
        func free() throws {
            _ = try shell("rm -f \(path)/filler")
        }

        func remove() {
            _ = try? run("/bin/umount", ["-l", path], timeout: 10)
        }
    }

    struct DiskSetupError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// Writes `text` to `path` (opened with O_TRUNC) with write(2), then fsync(2), then close(2);
    /// "ok", or the first call that failed and its errno ("write 28").
    private func writeThenSync(_ text: String, to path: String) throws -> String {
        try run("/usr/bin/python3", ["-c", """
            import os, sys
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            step = "write"
            try:
                os.write(fd, sys.argv[2].encode())
                step = "fsync"
                os.fsync(fd)
                step = "close"
                os.close(fd)
                print("ok")
            except OSError as e:
                print(step, e.errno)
            """, path, text], timeout: 60).standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("a full disk: ENOSPC at write() and at fsync, said once in the log; writes work again once space is freed, no remount")
    func writesRefusedThenResumed() throws {
        let dir = TemporaryDirectory("kvsfs-disk")
        defer { dir.remove() }
        let disk = try SmallDisk(in: dir)
        defer { disk.remove() }
        let daemon = try DaemonMount(mountpoint: try dir.privateSubdirectory("mnt"), dataDirectory: try disk.dataDirectory())
        defer { daemon.stop() }
        // Committed to the journal, not yet to the database: making it durable needs room.
        let big = try shell("printf '\"%s\"' $(head -c 300000 /dev/zero | tr '\\0' x) > \(daemon.path("big2"))")
        #expect(big.status == 0, "\(big)")

        try disk.fill()
        let refused = try run("/bin/bash", ["-c", #"printf '"v"' > "$K""#], environment: ["K": daemon.path("k"), "LC_ALL": "C"])
        #expect(refused.status == 1, "\(refused)")
        #expect(refused.standardError.contains("No space left on device"), "\(refused)")
        #expect(try writeThenSync("\"w\"", to: daemon.path("k2")) == "write \(ENOSPC)")
        #expect(try fsyncErrno(daemon.path("big2")) == ENOSPC)
        #expect(try run(kvsfsBinary, ["get", daemon.path("k")]).status != 0)
        let log = daemon.logText()
        let told = #"refused a write to "k": ENOSPC (No space left on device): the disk holding \#(disk.path)/data is full"#
        #expect(log.components(separatedBy: told).count == 2, "said once: \(log)")
        #expect(!log.contains("EIO"), "\(log)")

        try disk.free()
        let resumed = try run("/bin/bash", ["-c", #"printf '"v"' > "$K""#], environment: ["K": daemon.path("k"), "LC_ALL": "C"])
        #expect(resumed.status == 0, "\(resumed)")
        #expect(try run(kvsfsBinary, ["get", daemon.path("k")]).standardOutput == "v\n")
        #expect(try writeThenSync("\"w\"", to: daemon.path("k2")) == "ok")
        #expect(try run(kvsfsBinary, ["get", daemon.path("k2")]).standardOutput == "w\n")
        #expect(try fsyncErrno(daemon.path("big2")) == 0)
        #expect(try fsyncErrno(daemon.mountpoint) == 0)
    }

    /// A small disk in a fresh directory, a mountpoint beside it and a data directory on it,
    /// for `body`; whatever is still mounted there is unmounted at the end.
    private func withSmallDisk(_ body: (TemporaryDirectory, SmallDisk, String, String) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-disk")
        defer { dir.remove() }
        let disk = try SmallDisk(in: dir)
        defer { disk.remove() }
        let mnt = try dir.privateSubdirectory("mnt")
        let data = try disk.dataDirectory()
        defer { if DaemonMount.isMounted(mnt) { _ = try? run("/bin/umount", ["-l", mnt], timeout: 10) } }
        try body(dir, disk, mnt, data)
    }

    @Test("a journal replay that meets a full disk: one line and a non-zero exit; once space is freed the store mounts, every acknowledged write intact")
    func replayOnFullDisk() throws {
        try withSmallDisk { dir, disk, mnt, data in
            var daemon = try DaemonMount(mountpoint: mnt, dataDirectory: data, extraArguments: ["--remote", "none"])
            defer { daemon.stop() }
            // Acknowledged (close returned) and only in the journal: together under the size at which
            // the journal goes to the database, and more than the database's log has room for.
            let writes = try shell("for i in 1 2 3 4 5 6; do printf '\"%s%s\"' $i $(head -c 120000 /dev/zero | tr '\\0' x) > \(mnt)/key$i || exit 1; done")
            #expect(writes.status == 0, "\(writes)")
            daemon.crash()

            try disk.fill()
            let refused = try run(kvsfsBinary, ["mount", mnt, "--data-dir", data, "--remote", "none"], timeout: 30)
            #expect(refused.status != 0, "\(refused)")
            #expect(refused.standardError == "Error: cannot open the store 'default' in \(data): the disk is full (0 bytes free); free some space and mount again\n",
                    "\(refused)")
            #expect(!DaemonMount.isMounted(mnt))

            try disk.free()
            daemon = try DaemonMount(mountpoint: mnt, dataDirectory: data, extraArguments: ["--remote", "none"])
            let read = try shell("for i in 1 2 3 4 5 6; do \(kvsfsBinary) get \(mnt)/key$i | wc -c; done; ls \(mnt) | wc -l")
            #expect(read.standardOutput == String(repeating: "120002\n", count: 6) + "6\n", "\(read)")
            #expect(!daemon.logText().contains("quarantine"), "\(daemon.logText())")
        }
    }

    @Test("an unmount that meets a full disk says what became of the acknowledged writes and exits non-zero; the next mount has them all")
    func unmountOnFullDisk() throws {
        try withSmallDisk { dir, disk, mnt, data in
            // The daemon's words go off the full disk. Six acknowledged writes, only in the journal.
            let log = dir.path + "/daemon.log"
            let unmounted = try shell("""
                \(kvsfsBinary) mount \(mnt) --data-dir \(data) --remote none 2> \(log) &
                daemon=$!
                \(shellWait(until: "mountpoint -q \(mnt)"))
                for i in 1 2 3 4 5 6; do printf '"%s%s"' $i $(head -c 120000 /dev/zero | tr '\\0' x) > \(mnt)/key$i || exit 1; done
                dd if=/dev/zero of=\(disk.path)/filler bs=4k 2>/dev/null; sync
                umount \(mnt) || exit 2
                wait $daemon; echo "exit=$?"
                """, timeout: 60)
            #expect(unmounted.standardOutput == "exit=1\n", "\(unmounted)")
            let words = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(words.hasSuffix("Error: unmounted, but the store could not be made durable: the disk holding \(data) is full; every acknowledged "
                                    + "write is kept in the store's files and taken in at the next mount, but one not saved with fsync may be lost if "
                                    + "the machine stops before then\n"), "\(words)")

            try disk.free()
            let daemon = try DaemonMount(mountpoint: mnt, dataDirectory: data, extraArguments: ["--remote", "none"])
            defer { daemon.stop() }
            let read = try shell("for i in 1 2 3 4 5 6; do \(kvsfsBinary) get \(mnt)/key$i | wc -c; done")
            #expect(read.standardOutput == String(repeating: "120002\n", count: 6), "\(read)")
        }
    }
}
