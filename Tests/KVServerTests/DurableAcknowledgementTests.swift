import Foundation
import KVCloud
import KVServer
import KVStore
import KVTestSupport
import Testing

/// A push is answered only once it is on disk. What a power cut would show cannot be seen
/// here: these tests check what makes it so on the connections that commit pushes.
@Suite("Durable acknowledgements", .hangGuard)
struct DurableAcknowledgementTests {
    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func change(_ key: String, _ text: String) -> StampedChange {
        StampedChange(key: key, value: Data(try! PropertyListCodec.encodeXML(.string(text))), type: .string,
                      stamp: ChangeStamp(time: Self.now, counter: 0, device: "d"))
    }

    @Test("the file remote commits pushes with synchronous = FULL (2), which flushes SQLite's log at each commit")
    func fileRemoteCommitsDurably() throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteCloudStorage(path: directory.path + "/cloud.sqlite")
        #expect(try storage.commitSynchronous() == 2)
    }

    @Test("a server on SQLite commits pushes with synchronous = FULL (2)")
    func sqliteServerCommitsDurably() async throws {
        let directory = TemporaryDirectory("kvsfs-durable")
        defer { directory.remove() }
        let storage = try SQLiteServerStorage(path: directory.path + "/server.sqlite")
        #expect(try await storage.commitSynchronous() == 2)
    }
}
