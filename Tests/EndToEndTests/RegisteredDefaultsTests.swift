import Foundation
import Glibc
import KVTestSupport
import Testing

/// `--defaults FILE` (`-o defaults=FILE`) on real mounts: what a user sees of a default, of
/// writing and removing it, of a second mount without the file, and of SIGHUP.
@Suite("Registered defaults on real mounts", .serialized)
struct RegisteredDefaultsMountTests {
    private static let defaults = """
        <plist version="1.0"><dict>
        <key>volume</key><integer>3</integer>
        <key>theme</key><string>dark</string>
        </dict></plist>
        """

    /// Mount A (the mount(8) form, with `defaults=`, logging to `data-a/default.log`) and mount
    /// B (no defaults), one store syncing through a file remote; `body` gets A's daemon's pid.
    private func withTwoMounts(_ body: (String, DaemonMount, TemporaryDirectory, Int32) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-defaults")
        defer { dir.remove() }
        let cloud = "file://\(dir.subdirectory("cloud"))/cloud.sqlite"
        try Self.defaults.write(toFile: dir.path + "/defaults.plist", atomically: true, encoding: .utf8)
        let a = dir.subdirectory("a")
        let mounted = try run(kvsfsBinary, ["default", a, "-o", "data_dir=\(dir.path)/data-a,remote=\(cloud),defaults=\(dir.path)/defaults.plist"])
        #expect(mounted.status == 0, "\(mounted)")
        defer {
            _ = try? run("/bin/umount", [a])
            _ = eventually(within: 10) { (try? shell("pgrep -f -- 'kvsfs mount --store default \(a)( |$)'").status) != 0 }
        }
        let pid = try #require(Int32(try shell("pgrep -f -- 'kvsfs mount --store default \(a)( |$)'").standardOutput
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: ["--remote", cloud])
        defer { b.stop() }
        try body(a, b, dir, pid)
    }

    @Test("a default reads, lists and stats like a key, is typed and never synced, and df does not count it; rm and mv of it are EPERM")
    func defaultShown() throws {
        try withTwoMounts { (a, b, _, _) throws in
            let result = try shell("""
                cd \(a)
                echo "ls=$(ls | tr '\\n' ' ')"
                cat volume
                echo "get=$(\(kvsfsBinary) get volume)"
                echo "size=$(stat -c %s volume) $(cat volume | wc -c)"
                echo "type=$(getfattr --only-values -n user.kvsfs.type volume)"
                echo "sync=$(getfattr --only-values -n user.kvsfs.sync volume)"
                echo "df=$(df -B1 --output=used,iused . | tail -1 | tr -s ' ')"
                rm volume; echo "rm=$?"
                rm -f volume; echo "rm-f=$?"
                mv theme other; echo "mv=$?"
                \(kvsfsBinary) sync . && \(kvsfsBinary) sync \(b.mountpoint)
                echo "ls-after=$(ls | tr '\\n' ' ')"
                echo "ls-b=$(ls \(b.mountpoint) | tr '\\n' ' ')"
                """)
            let out = result.standardOutput
            #expect(out.contains("ls=theme volume \n"), "\(result)")
            #expect(out.contains("<integer>3</integer>"))
            #expect(out.contains("get=3\n"))
            let sizes = out.firstMatch(of: /size=(\d+) (\d+)/)
            #expect(sizes != nil && sizes?.1 == sizes?.2, "stat's size is what cat reads: \(result)")
            #expect(out.contains("type=integer\n"))
            #expect(out.contains("sync=default\n"))
            #expect(out.contains("df= 0 0\n") || out.contains("df=0 0\n"), "\(result)")
            #expect(out.contains("rm=1\n") && out.contains("rm-f=1\n") && out.contains("mv=1\n"))
            #expect(result.standardError.contains("cannot remove 'volume': Operation not permitted"), "\(result)")
            #expect(result.standardError.contains("Operation not permitted"))
            #expect(out.contains("ls-after=theme volume \n"), "nothing changed: \(result)")
            #expect(out.contains("ls-b=\n"), "a default is never synced: \(result)")
        }
    }

    @Test("writing a default makes a key the other mount gets; rm of it, here or on the other mount, shows the default again")
    func writeSyncAndRemove() throws {
        try withTwoMounts { (a, b, dir, _) throws in
            let result = try shell("""
                \(kvsfsBinary) set \(a)/volume -int 7 && sed -i 's/dark/light/' \(a)/theme || exit 7
                \(kvsfsBinary) sync \(a) && \(kvsfsBinary) sync \(b.mountpoint) || exit 8
                echo "sync-a=$(getfattr --only-values -n user.kvsfs.sync \(a)/volume)"
                echo "b-volume=$(\(kvsfsBinary) get \(b.path("volume")))"
                echo "df=$(df -B1 --output=iused \(a) | tail -1 | tr -d ' ')"
                rm \(a)/volume; echo "rm=$?"
                echo "a-volume=$(\(kvsfsBinary) get \(a)/volume)"
                echo "ls-a=$(ls \(a) | tr '\\n' ' ')"
                \(kvsfsBinary) sync \(a) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
                echo "ls-b=$(ls \(b.mountpoint) | tr '\\n' ' ')"
                echo "b-theme=$(\(kvsfsBinary) get \(b.path("theme")))"
                HOME=\(dir.path) vim -es -N -u NONE -i NONE -c '%s/>3</>5</' -c 'wq' \(a)/volume; echo "vim=$?"
                echo "a-vim=$(\(kvsfsBinary) get \(a)/volume) $(getfattr --only-values -n user.kvsfs.sync \(a)/volume)"
                echo "ls-vim=$(ls -A \(a) | tr '\\n' ' ')"
                rm \(b.path("theme")) && \(kvsfsBinary) sync \(b.mountpoint) || exit 10
                \(shellWait(until: "\(kvsfsBinary) sync \(a); grep -q '<string>dark</string>' \(a)/theme"))
                echo "a-theme=$(\(kvsfsBinary) get \(a)/theme)"
                """)
            let out = result.standardOutput
            #expect(result.status == 0, "\(result)")
            #expect(out.contains("sync-a=synced\n"), "\(result)")
            #expect(out.contains("b-volume=7\n"), "\(result)")
            #expect(out.contains("df=2\n"), "a written default is a key like any other: \(result)")
            #expect(out.contains("rm=0\n") && out.contains("a-volume=3\n") && out.contains("ls-a=theme volume \n"), "\(result)")
            #expect(out.contains("ls-b=theme \n"), "the deletion reached B, not the default: \(result)")
            #expect(out.contains("b-theme=light\n"), "sed -i's rename over a default made a key: \(result)")
            #expect(out.contains("vim=0\n") && out.contains("ls-vim=theme volume \n"), "vim saves a default, leaving no backup: \(result)")
            #expect(out.contains("a-vim=5 pending\n") || out.contains("a-vim=5 synced\n"), "\(result)")
            #expect(out.contains("a-theme=dark\n"), "a remote deletion shows the default again: \(result)")
        }
    }

    /// Shell lines that replace the defaults file at `file`, as an editor saves it, with the
    /// reload's set: volume changed to 11, font new, theme dropped.
    private static func reloadedDefaults(into file: String) -> String {
        """
        printf '<plist version="1.0"><dict><key>volume</key><integer>11</integer><key>font</key><string>mono</string></dict></plist>' > \(file).new
        mv \(file).new \(file)
        """
    }

    @Test("SIGHUP reloads the file: a new default appears, a dropped one goes; a broken file is one log line and the old defaults stay")
    func hangupReloads() throws {
        try withTwoMounts { (a, _, dir, pid) throws in
            let file = dir.path + "/defaults.plist"
            let log = dir.path + "/data-a/default.log"
            let result = try shell("""
                cat \(a)/theme \(a)/volume > /dev/null; ls \(a) > /dev/null
                \(Self.reloadedDefaults(into: file))
                kill -HUP \(pid)
                \(shellWait(until: "test -e \(a)/font"))
                echo "ls=$(ls \(a) | tr '\\n' ' ')"
                echo "volume=$(\(kvsfsBinary) get \(a)/volume)"
                cat \(a)/theme; echo "theme=$?"
                echo 'not ( a plist' > \(file)
                kill -HUP \(pid)
                \(shellWait(until: "grep -q 'cannot reload' \(log)"))
                echo "after-broken=$(ls \(a) | tr '\\n' ' ')"
                echo "font=$(\(kvsfsBinary) get \(a)/font)"
                echo "lines=$(grep -c 'cannot reload the defaults file' \(log))"
                kill -0 \(pid) && echo alive
                """)
            let out = result.standardOutput
            #expect(out.contains("ls=font volume \n"), "\(result)")
            #expect(out.contains("volume=11\n"), "a default the kernel had seen shows its new value: \(result)")
            #expect(out.contains("theme=1\n") && result.standardError.contains("No such file or directory"), "\(result)")
            #expect(out.contains("after-broken=font volume \n") && out.contains("font=mono\n"), "\(result)")
            #expect(out.contains("lines=1\n") && out.contains("alive\n"), "\(result)")
        }
    }

    @Test("a SIGHUP reload raises a writer's inotify events on the mount: a new default is created, a changed one written, a dropped one deleted")
    func hangupRaisesEvents() throws {
        try withTwoMounts { (a, _, dir, pid) throws in
            let file = dir.path + "/defaults.plist"
            let events = dir.path + "/inotify"
            let result = try shell("""
                ls \(a) > /dev/null
                \(shellWatch(a, events: "create,close_write,delete", into: events, seconds: 60))
                \(Self.reloadedDefaults(into: file))
                kill -HUP \(pid)
                \(shellWait(until: "grep -q 'DELETE theme' \(events) && grep -q 'CLOSE_WRITE,CLOSE font' \(events) && grep -q 'CLOSE_WRITE,CLOSE volume' \(events)"))
                kill $watcher; wait
                sort \(events) | tr '\n' ';'; echo
                echo "volume=$(\(kvsfsBinary) get \(a)/volume) $(getfattr --only-values -n user.kvsfs.sync \(a)/volume)"
                echo "font=$(\(kvsfsBinary) get \(a)/font) $(getfattr --only-values -n user.kvsfs.sync \(a)/font)"
                echo "ls=$(ls \(a) | tr '\n' ' ')"
                """)
            #expect(result.status == 0, "\(result)")
            #expect(result.standardOutput.hasPrefix("CLOSE_WRITE,CLOSE font;CLOSE_WRITE,CLOSE volume;CREATE font;DELETE theme;\n"), "\(result)")
            #expect(result.standardOutput.contains("volume=11 default\nfont=mono default\nls=font volume \n"), "still defaults, not keys: \(result)")
        }
    }

    @Test("an invalid defaults file at mount time is one line and exit status 1, and nothing is mounted", arguments: [
        ("<plist version=\"1.0\"><array/></plist>", "its root is of type array"),
        ("<plist version=\"1.0\"><dict><key>ok</key><true/><key>\(String(repeating: "k", count: 65))</key><true/></dict></plist>",
         "entry \"kkkk"),
        ("", "not a property list"),
    ])
    func invalidAtMount(contents: String, message: String) throws {
        let dir = TemporaryDirectory("kvsfs-defaults")
        defer { dir.remove() }
        try contents.write(toFile: dir.path + "/defaults.plist", atomically: true, encoding: .utf8)
        let mountpoint = dir.subdirectory("mnt")
        for arguments in [["mount", mountpoint, "--data-dir", dir.path + "/data", "--remote", "none", "--defaults", dir.path + "/defaults.plist"],
                          ["default", mountpoint, "-o", "data_dir=\(dir.path)/data,remote=none,defaults=\(dir.path)/defaults.plist"]] {
            let result = try run(kvsfsBinary, arguments)
            #expect(result.status == 1, "\(result)")
            #expect(result.standardError.contains("invalid defaults file \(dir.path)/defaults.plist: "), "\(result)")
            #expect(result.standardError.contains(message), "\(result)")
            #expect(result.standardError.split(separator: "\n").count == 1, "\(result)")
            #expect(!DaemonMount.isMounted(mountpoint))
        }
    }
}
