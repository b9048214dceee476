import Foundation
import FuseKit
import Glibc
import KVSFS
import KVStore
import Synchronization
import Testing

/// The applier as the file system sees it: one process, one change at a time, which the
/// store holds before it is shown.
private final class OneApplier: ChangeShowing {
    static let applierThread: Int32 = 7
    let inFlight = Mutex<ShownChange?>(nil)

    func shownChange(for context: RequestContext) -> ShownChange? {
        context.threadID == Self.applierThread ? inFlight.withLock { $0 } : nil
    }

    func show(_ changes: [StampedChange], newKeys: Swift.Set<String>) -> Swift.Set<String> { Swift.Set(changes.map(\.key)) }
}

/// The sync side, for the root's attributes and fsync.
private final class OfflineDoor: MountSynchronizer {
    func pushNow(then answer: @escaping @Sendable (Result<Void, SyncFailure>) -> Void) {
        answer(.failure(.busy("8 requests already wait on the remote: retry")))
    }
    func rootAttributes() -> [String: String] { ["user.kvsfs.sync": "synced"] }
    func standing() -> SyncStanding {
        SyncStanding(remote: "file:///cloud.sqlite", reachability: .offline("connection refused"), lastSync: nil,
                     eventLog: "/events.jsonl", eventCursor: 0)
    }
    func record(refusedWriteOf key: String, reason: String) {}
}

@Suite("The door between the mount and sync")
struct MountSynchronizerTests {
    private let applier = RequestContext(threadID: OneApplier.applierThread, uid: getuid(), gid: getgid())

    /// The errno fsync of the root is answered with, now or later (within 5 s); nil if none.
    private func answer(toFsyncOfRoot fs: KeyValueFileSystem) throws -> Int32? {
        let answered = Mutex<[Int32]>([])
        let done = DispatchSemaphore(value: 0)
        switch try fs.fsyncdir(inode: .root, handle: FileHandle(1), dataOnly: false) {
        case .now:
            return 0
        case .later(let start):
            start(Reply(errnoFrom: fs) { code in
                answered.withLock { $0.append(code) }
                done.signal()
            })
        }
        guard done.wait(timeout: .now() + 5) == .success else { return nil }
        return answered.withLock { $0.count == 1 ? $0[0] : nil }
    }

    private func write(_ harness: Harness, _ name: String, _ text: String, as context: RequestContext) throws {
        let (entry, reply) = try harness.fs.create(parent: .root, name: name, mode: 0o644,
                                                   flags: OpenFlags(rawValue: O_WRONLY | O_CREAT | O_TRUNC), context: context)
        let ino = entry.attributes.inode
        defer { harness.fs.release(inode: ino, handle: reply.handle) }
        _ = try Array(text.utf8).withUnsafeBytes { try harness.fs.write(inode: ino, handle: reply.handle, offset: 0, bytes: $0, context: context) }
        try harness.fs.flush(inode: ino, handle: reply.handle, context: context)
    }

    @Test("the applier's write shows the change the store holds, even on a read-only store, and writes nothing; anyone else's is EROFS")
    func applierShowsTheRemoteChange() throws {
        let door = OneApplier()
        let harness = try Harness(sync: OfflineDoor(), applier: door)
        let xml = try PropertyListCodec.encodeXML(.string("from elsewhere"))
        let stamp = ChangeStamp(time: 1_700_000_000_000, counter: 3, device: "other-device")
        let change = StampedChange(key: "greeting", value: Data(xml), type: .string, stamp: stamp)
        harness.store.setReadOnly("the token may only read")

        #expect(errnoOf(harness.fs) { try write(harness, "greeting", "mine", as: harness.context) } == EROFS)
        _ = try harness.store.applyExternal([change])
        door.inFlight.withLock { $0 = ShownChange(change: change, keyIsNew: true) }
        // What the applier writes only shows the change: the store is not written again.
        try write(harness, "greeting", "<string>not the value</string>", as: applier)
        #expect(harness.store.allChanges(forKey: "greeting") == change, "the remote's change, with its stamp")
        #expect(harness.store.syncState(forKey: "greeting") == .synced, "not to be pushed back")
        #expect(try harness.value("greeting") == .string("from elsewhere"))

        let tombstone = StampedChange.tombstone("greeting", stamp: ChangeStamp(time: stamp.time + 1, counter: 0, device: "other-device"))
        _ = try harness.store.applyExternal([tombstone])
        door.inFlight.withLock { $0 = ShownChange(change: tombstone, keyIsNew: false) }
        #expect(errnoOf(harness.fs) { try harness.fs.unlink(parent: .root, name: "greeting", context: harness.context) } == EROFS)
        try harness.fs.unlink(parent: .root, name: "greeting", context: applier)
        #expect(harness.store.allChanges(forKey: "greeting") == tombstone)
    }

    @Test("a read-only mount refuses every change with EROFS but the applier's, and reads on")
    func readOnlyMount() throws {
        let door = OneApplier()
        let harness = try Harness(readOnly: true, sync: OfflineDoor(), applier: door)
        try harness.store.put(.string("kept"), forKey: "kept")
        let refused: [(String, () throws -> Void)] = [
            ("echo >", { try write(harness, "new", "<string>x</string>", as: harness.context) }),
            ("write open", { _ = try harness.open("kept", O_WRONLY) }),
            ("rm", { try harness.unlink("kept") }),
            ("mv", { try harness.rename("kept", "moved") }),
            ("truncate", { _ = try harness.fs.setattr(inode: try #require(try harness.inode("kept")), changes: AttributeChanges(size: 0),
                                                      handle: nil, context: harness.context) }),
            ("editor file", { try write(harness, ".kept.swp", "scratch", as: harness.context) }),
        ]
        for (name, change) in refused {
            #expect(errnoOf(harness.fs, change) == EROFS, "\(name)")
        }
        #expect(try harness.readFile("kept").contains("<string>kept</string>"))
        #expect(try harness.names() == ["kept"])

        let xml = try PropertyListCodec.encodeXML(.string("from elsewhere"))
        let change = StampedChange(key: "new", value: Data(xml), type: .string, stamp: ChangeStamp(time: 1_700_000_000_000, counter: 0, device: "other"))
        _ = try harness.store.applyExternal([change])
        door.inFlight.withLock { $0 = ShownChange(change: change, keyIsNew: true) }
        try write(harness, "new", String(decoding: xml, as: UTF8.self), as: applier)
        #expect(try harness.value("new") == .string("from elsewhere"))
    }

    @Test("reading an attribute acts on nothing: no sync, no replacement; fsync of the root pushes and maps its failure to an errno")
    func attributesAreFacts() throws {
        let harness = try Harness(sync: OfflineDoor())
        // No attribute reaches a sync or a replacement: the door has neither (the control
        // socket's acts), so a read can only be a fact.
        for name in ["user.kvsfs.synchronize", "user.kvsfs.replace-with-remote"] {
            #expect(errnoOf(harness.fs) { _ = try harness.fs.getxattr(inode: .root, name: name) } == ENODATA, "\(name)")
        }
        #expect(try answer(toFsyncOfRoot: harness.fs) == EAGAIN)
        #expect(try harness.fs.getxattr(inode: .root, name: "user.kvsfs.sync") == Array("synced".utf8))
    }

    @Test("the applier's steps that show a default's change yield to what was written since: a value, or a writer's new file")
    func shownDefaultYieldsToWrites() throws {
        let door = OneApplier()
        let harness = try Harness(registersDefaults: true, applier: door)
        let user = harness.context
        // A default went (a reload), and before the applier unlinks its file a writer creates it.
        let (entry, reply) = try harness.fs.create(parent: .root, name: "theme", mode: 0o644,
                                                   flags: OpenFlags(rawValue: O_WRONLY | O_CREAT), context: user)
        defer { harness.fs.release(inode: entry.attributes.inode, handle: reply.handle) }
        door.inFlight.withLock { $0 = ShownChange(change: StampedChange(key: "theme", value: nil, type: nil, stamp: ShownChange.unstamped), keyIsNew: false) }
        #expect(errnoOf(harness.fs) { try harness.fs.unlink(parent: .root, name: "theme", context: applier) } == ENOENT)
        guard case .found = try harness.fs.lookup(parent: .root, name: "theme", context: user) else {
            Issue.record("the writer's file went")
            return
        }
        // A default changed, and before the applier writes its file the key gets a value.
        try harness.writeFile("volume", "7")
        let shown = try PropertyListCodec.encodeXML(.integer(11))
        door.inFlight.withLock { $0 = ShownChange(change: StampedChange(key: "volume", value: Data(shown), type: .integer, stamp: ShownChange.unstamped), keyIsNew: false) }
        #expect(errnoOf(harness.fs) { try write(harness, "volume", String(decoding: shown, as: UTF8.self), as: applier) } == ENOENT)
        #expect(try harness.value("volume") == .string("7"))
    }
}
