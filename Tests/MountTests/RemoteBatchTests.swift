import Foundation
import Glibc
import FuseKit
import KVSFS
import KVStore
import KVSync
import KVTestSupport
import Testing

/// No remote: the batches come from the test.
private final class NoRemote: MountSynchronizer, @unchecked Sendable {
    func synchronize() throws { throw SyncFailure.unreachable("no remote in this test") }
    func pushNow(then answer: @escaping @Sendable (Result<Void, SyncFailure>) -> Void) {
        answer(.failure(.unreachable("no remote in this test")))
    }
    func replaceWithRemote() throws { throw SyncFailure.unreachable("no remote in this test") }
    func rootAttributes() -> [String: String] { [:] }
    func standing() -> SyncStanding {
        SyncStanding(remote: "none", reachability: .connecting, lastSync: nil, eventLog: "", eventCursor: 0)
    }
    func record(refusedWriteOf key: String, reason: String) {}
}

/// A batch of remote changes on a real mount: taken into the store as one commit, then shown
/// file by file with the inotify events a writer would raise.
@Suite("Remote batches on a real mount", .serialized)
struct RemoteBatchTests {
    @Test("a fetched batch is one commit of the store, and a watcher sees a create, a close-write or a delete for each key")
    func batchIsOneCommit() async throws {
        let directory = TemporaryDirectory("kvsfs-batch")
        defer { directory.remove() }
        let store = try makeStore(in: directory)
        try store.put(.string("kept"), forKey: "kept")
        try store.put(.string("old"), forKey: "old")
        let mountpoint = directory.subdirectory("mnt")
        let applier = MountApplier(mountpoint: mountpoint, store: store, executable: kvsfsBinary)
        defer { applier.stop() }
        let mount = try InProcessMount(store: store, mountpoint: mountpoint, sync: NoRemote(), applier: applier)
        applier.mounted()
        defer { mount.unmount() }
        #expect(try String(contentsOfFile: mount.path("kept"), encoding: .utf8).contains("kept"), "the kernel knows kept")

        let watcher = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        #expect(watcher >= 0)
        defer { close(watcher) }
        #expect(inotify_add_watch(watcher, mountpoint, UInt32(IN_CREATE | IN_CLOSE_WRITE | IN_DELETE)) >= 0)

        let stamp = ChangeStamp(time: milliseconds(Date()) + 1000, counter: 0, device: "elsewhere")
        let added = (0..<20).map { "new\($0)" }
        let changes = try added.map { key in
            StampedChange(key: key, value: Data(try PropertyListCodec.encodeXML(.string(key))), type: .string, stamp: stamp)
        } + [
            StampedChange(key: "kept", value: Data(try PropertyListCodec.encodeXML(.string("changed"))), type: .string, stamp: stamp),
            StampedChange.tombstone("old", stamp: stamp),
        ]
        let revision = store.revision
        let changed = try await applier.apply(changes, mode: .merge)
        #expect(Set(changed) == Set(added + ["kept", "old"]))
        #expect(store.revision == revision + 1, "one commit for the whole batch: a crash keeps all of it or none")
        #expect(store.keys() == (added + ["kept"]).sorted())
        #expect(store.pendingCount == 0, "taken in as the remote's, not to be pushed back")

        let events = Self.events(from: watcher)
        for key in added {
            #expect(events.contains("CREATE \(key)") && events.contains("CLOSE_WRITE \(key)"), "\(key): \(events)")
        }
        #expect(events.contains("CLOSE_WRITE kept") && !events.contains("CREATE kept"), "\(events)")
        #expect(events.contains("DELETE old"), "\(events)")
        #expect(try String(contentsOfFile: mount.path("kept"), encoding: .utf8).contains("changed"))
        #expect(!FileManager.default.fileExists(atPath: mount.path("old")))
    }
}

extension RemoteBatchTests {
    /// The events waiting on an inotify descriptor, as "CREATE name", "CLOSE_WRITE name" and
    /// "DELETE name".
    static func events(from watcher: Int32) -> [String] {
        var events: [String] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = read(watcher, &buffer, buffer.count)
            guard count > 0 else { return events }
            var offset = 0
            while offset + 16 <= count {
                let mask = buffer.withUnsafeBytes { $0.load(fromByteOffset: offset + 4, as: UInt32.self) }
                let length = Int(buffer.withUnsafeBytes { $0.load(fromByteOffset: offset + 12, as: UInt32.self) })
                let name = String(decoding: buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }, as: UTF8.self)
                let kind = mask & UInt32(IN_CREATE) != 0 ? "CREATE" : mask & UInt32(IN_CLOSE_WRITE) != 0 ? "CLOSE_WRITE" : "DELETE"
                events.append("\(kind) \(name)")
                offset += 16 + length
            }
        }
    }
}

private func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }

