import Foundation
import KVTestSupport
import Testing

/// Changes the kernel did not make, made on the mount that is watched: each raises the events
/// a writer would, as a remote change does.
@Suite("Events on the mount that made the change", .serialized)
struct SameMountEventsTests {
    @Test("kvsfs resolve, import, revert and import --replace each raise a writer's inotify events on the mount they act on")
    func sameMountEvents() throws {
        let dir = TemporaryDirectory("kvsfs-same-mount")
        defer { dir.remove() }
        let remote = ["--remote", "file://\(dir.subdirectory("cloud"))/cloud.sqlite"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        do {
            let offline = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: ["--remote", "none"])
            defer { offline.stop() }
            try #require(try run(kvsfsBinary, ["set", offline.path("theme"), "-string", "laptop"]).status == 0)
        }
        try #require(try shell("\(kvsfsBinary) set \(a.path("theme")) -string phone && \(kvsfsBinary) sync \(a.mountpoint)").status == 0)
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        try Data("<plist><dict><key>fresh</key><string>new</string></dict></plist>".utf8).write(to: URL(fileURLWithPath: dir.path + "/add.plist"))
        try Data("<plist><dict><key>other</key><string>only this</string></dict></plist>".utf8).write(to: URL(fileURLWithPath: dir.path + "/replace.plist"))
        let events = "\(dir.path)/inotify"
        let result = try shell("""
            \(kvsfsBinary) sync \(b.mountpoint) && \(kvsfsBinary) get \(b.path("theme")) | grep -qx phone || exit 1
            \(shellWatch(b.mountpoint, events: "create,close_write,delete", into: events, seconds: 60))
            \(kvsfsBinary) resolve \(b.path("theme")) --keep-local || exit 2
            \(shellWait(until: "grep -q 'CLOSE_WRITE,CLOSE theme' \(events)")); echo "resolve: $(grep -c 'CLOSE_WRITE,CLOSE theme' \(events))"
            \(kvsfsBinary) import \(b.mountpoint) \(dir.path)/add.plist > /dev/null || exit 3
            \(shellWait(until: "grep -q 'CLOSE_WRITE,CLOSE fresh' \(events)")); echo "import: $(grep -c '^CREATE fresh$' \(events)) $(grep -c 'CLOSE_WRITE,CLOSE fresh' \(events))"
            \(kvsfsBinary) revert \(b.path("theme")) 1 || exit 4
            \(shellWait(until: "test $(grep -c 'CLOSE_WRITE,CLOSE theme' \(events)) -ge 2")); echo "revert: $(grep -c 'CLOSE_WRITE,CLOSE theme' \(events))"
            \(kvsfsBinary) import --replace \(b.mountpoint) \(dir.path)/replace.plist > /dev/null || exit 5
            \(shellWait(until: "grep -q 'CLOSE_WRITE,CLOSE other' \(events) && grep -q 'DELETE fresh' \(events)"))
            echo "replace: $(grep -c -e '^DELETE theme$' -e '^DELETE fresh$' \(events)) $(grep -c '^CREATE other$' \(events))"
            kill $watcher; wait
            ls \(b.mountpoint)
            """, timeout: 120)
        #expect(result.status == 0, "\(result)")
        #expect(result.standardOutput == "resolve: 1\nimport: 1 1\nrevert: 2\nreplace: 2 1\nother\n", "\(result)\n\((try? String(contentsOfFile: events, encoding: .utf8)) ?? "")")
    }
}
