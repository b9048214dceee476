import Foundation
import KVTestSupport
import Testing

/// On an `--allow-other` mount, another user reads what the permissions allow and acts on
/// nothing: syncing and replacing the store are the mount owner's alone.
@Suite("Acts that change state belong to the mount's owner", .serialized, .hangGuard)
struct OwnershipTests {
    @Test("another uid can neither sync nor throw away the owner's pending writes, by attribute or by command")
    func otherUserCannotReplace() throws {
        let dir = TemporaryDirectory("kvsfs-owner")
        defer { dir.remove() }
        // The other user must reach the mount, its parent, and a kvsfs binary it may run.
        #expect(chmod(dir.path, 0o755) == 0)
        let binary = dir.path + "/kvsfs"
        try FileManager.default.copyItem(atPath: kvsfsBinary, toPath: binary)
        // The remote is behind a link that does not exist yet: the owner's write stays pending.
        let cloud = dir.subdirectory("cloud")
        let mount = try DaemonMount(mountpoint: dir.subdirectory("mnt"), dataDirectory: dir.subdirectory("data"),
                                    extraArguments: ["--allow-other", "--remote", "file://\(dir.path)/link/cloud.sqlite"])
        defer { mount.stop() }
        let nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
        let result = try shell("""
            echo mine > \(mount.path("mine"))
            ln -s \(cloud) \(dir.path)/link
            \(nobody) cat \(mount.path("mine")) > /dev/null; echo "read=$?"
            \(nobody) getfattr -n user.kvsfs.replace-with-remote \(mount.mountpoint); echo "getfattr-replace=$?"
            \(nobody) getfattr -n user.kvsfs.synchronize \(mount.mountpoint); echo "getfattr-sync=$?"
            \(nobody) \(binary) sync --replace-with-remote \(mount.mountpoint); echo "replace=$?"
            \(nobody) \(binary) sync \(mount.mountpoint); echo "sync=$?"
            echo "still=$(\(binary) get \(mount.path("mine")))"
            \(binary) sync \(mount.mountpoint); echo "owner-sync=$?"
            echo "synced=$(getfattr --only-values -n user.kvsfs.sync \(mount.path("mine")))"
            """)
        #expect(result.standardOutput.contains("read=0"), "another user reads what the permissions allow: \(result)")
        #expect(result.standardOutput.contains("getfattr-replace=1"), "\(result)")
        #expect(result.standardOutput.contains("getfattr-sync=1"), "\(result)")
        #expect(result.standardError.contains("No such attribute"), "\(result)")
        #expect(result.standardOutput.contains("replace=1"), "\(result)")
        #expect(result.standardOutput.contains("sync=1"), "\(result)")
        #expect(result.standardError.contains("cannot reach the control socket"), "\(result)")
        #expect(result.standardOutput.contains("still=mine"), "\(result)")
        #expect(result.standardOutput.contains("owner-sync=0"), "\(result)")
        #expect(result.standardOutput.contains("synced=synced"), "the pending write reached the remote: \(result)")
    }
}
