import Foundation
import FuseKit
import Glibc
import KVSFS
import KVStore
import Testing

@Suite("The root's status attributes and their JSON")
struct MountStatusTests {
    private func rootAttribute(_ harness: Harness, _ name: String) throws -> String {
        String(decoding: try harness.fs.getxattr(inode: .root, name: name), as: UTF8.self)
    }

    @Test("a mount without sync lists the store's facts on its root, and none of sync's")
    func withoutSync() throws {
        let harness = try Harness(limits: QuotaLimits(totalBytes: 900, valueBytes: 500, keys: 3, keyNameBytes: 16))
        try harness.store.put(.string("hello"), forKey: "greeting")
        let size = try #require(harness.store.entry(forKey: "greeting")?.size)

        let names = try harness.fs.listxattr(inode: .root)
        #expect(names == ["user.kvsfs.bytes", "user.kvsfs.conflicts", "user.kvsfs.key-name-limit", "user.kvsfs.keys", "user.kvsfs.last-sync",
                          "user.kvsfs.nonconforming", "user.kvsfs.pending", "user.kvsfs.reachable", "user.kvsfs.schema-version",
                          "user.kvsfs.status", "user.kvsfs.value-limit"])
        #expect(try rootAttribute(harness, "user.kvsfs.schema-version") == "0")
        #expect(try rootAttribute(harness, "user.kvsfs.nonconforming") == "0")
        #expect(try rootAttribute(harness, "user.kvsfs.bytes") == "\(size)/900")
        #expect(try rootAttribute(harness, "user.kvsfs.keys") == "1/3")
        #expect(try rootAttribute(harness, "user.kvsfs.value-limit") == "500")
        #expect(try rootAttribute(harness, "user.kvsfs.key-name-limit") == "16")
        #expect(try rootAttribute(harness, "user.kvsfs.pending") == "1")
        #expect(try rootAttribute(harness, "user.kvsfs.reachable") == "none")
        #expect(try rootAttribute(harness, "user.kvsfs.last-sync") == "never")
        for name in ["user.kvsfs.remote", "user.kvsfs.sync", "user.kvsfs.synchronize", "user.kvsfs.replace-with-remote"] {
            #expect(errnoOf(harness.fs) { _ = try harness.fs.getxattr(inode: .root, name: name) } == ENODATA, "\(name)")
        }
        let status = try MountStatus(json: Array(try rootAttribute(harness, "user.kvsfs.status").utf8))
        #expect(status.bytes == MountStatus.Usage(used: size, quota: 900))
        #expect(status.reachable == .none && status.remote == nil && status.eventCursor == nil)
    }

    @Test("a status read back from its JSON is the same status")
    func roundTrip() throws {
        let harness = try Harness()
        let standing = SyncStanding(remote: "https://example.org:8443", reachability: .offline("connection refused"),
                                    lastSync: Date(timeIntervalSince1970: 1_790_000_000), eventLog: "/data/default.events.jsonl", eventCursor: 9)
        let status = MountStatus(store: harness.store, location: try StoreLocation(dataDirectory: URL(fileURLWithPath: "/data"), storeID: "default"),
                                 sync: standing)
        let json = try status.json()
        #expect(json.contains(#""lastSync":"2026-09-21T"#), "ISO 8601 in UTC: \(json)")
        #expect(json.contains(#""offlineReason":"connection refused","pending":0"#))
        #expect(try MountStatus(json: Array(json.utf8)) == status)
    }

    @Test("an offline reason is cut so that every attribute fits the kernel's 64 KiB")
    func longReason() throws {
        let harness = try Harness()
        let standing = SyncStanding(remote: "file:///cloud.sqlite", reachability: .offline(String(repeating: "é", count: 70_000)),
                                    lastSync: nil, eventLog: "/events.jsonl", eventCursor: 0)
        let status = MountStatus(store: harness.store, location: nil, sync: standing)
        #expect(status.offlineReason?.unicodeScalars.count == 1000)
        #expect(try status.json().utf8.count < MountStatus.maximumJSONBytes)
    }

    @Test("JSON that is not a status is refused with the reason, in one line", arguments: [
        ("{", "it is not a JSON object"),
        (#"{"store":null}"#, "the field dataDirectory is missing"),
        (#"[1,2]"#, "it is not a JSON object"),
        (#"{"store":7}"#, "the field store is not what it should be"),
    ])
    func refusedShapes(json: String, reason: String) {
        #expect(throws: StatusError.unreadable(reason)) { try MountStatus(json: Array(json.utf8)) }
    }

    @Test("a status with a bad value is refused: negative counts, a reason without offline, a time that is not ISO 8601, too many bytes")
    func refusedValues() throws {
        let harness = try Harness()
        let good = try MountStatus(store: harness.store, location: nil, sync: nil).json()
        #expect(throws: Never.self) { try MountStatus(json: Array(good.utf8)) }
        let bad = [
            good.replacingOccurrences(of: #""pending":0"#, with: #""pending":-1"#),
            good.replacingOccurrences(of: #""offlineReason":null"#, with: #""offlineReason":"gone""#),
            good.replacingOccurrences(of: #""lastSync":null"#, with: #""lastSync":"yesterday""#),
            good.replacingOccurrences(of: #""reachable":"none""#, with: #""reachable":"maybe""#),
            good.replacingOccurrences(of: #""pending":0"#, with: #""pending":"0""#),
            good + String(repeating: " ", count: MountStatus.maximumJSONBytes),
        ]
        for json in bad {
            #expect(json != good)
            #expect(throws: StatusError.self, "\(json.prefix(300))") { try MountStatus(json: Array(json.utf8)) }
        }
    }
}
