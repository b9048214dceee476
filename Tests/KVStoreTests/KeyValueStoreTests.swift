import Foundation
import KVStore
import KVTestSupport
import Testing

@Suite("Key-value store")
struct KeyValueStoreTests {
    @Test("a put reads back, survives reopening, and is logged")
    func putPersists() throws {
        try withTemporaryDirectory { dir in
            do {
                let store = try makeStore(in: dir)
                try store.put(.string("hello"), forKey: "greeting")
                #expect(store.entry(forKey: "greeting")?.type == .string)
            }
            let reopened = try makeStore(in: dir)
            let entry = try #require(reopened.entry(forKey: "greeting"))
            #expect(try PropertyListCodec.decode(entry.xml) == .string("hello"))
            #expect(reopened.usage == QuotaUsage(bytes: entry.size, keys: 1))
            let log = try reopened.changes()
            #expect(log.map(\.key) == ["greeting"])
            #expect(log.first?.value == Data(entry.xml))
        }
    }

    @Test("a value over the per-value limit is refused and changes nothing")
    func perValueLimit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(totalBytes: 10_000, valueBytes: 300))
            try store.put(.string("old"), forKey: "k")
            let before = store.entry(forKey: "k")
            let large = PropertyListValue.string(String(repeating: "x", count: 300))
            let size = try PropertyListCodec.encodeXML(large).count
            #expect(throws: StoreError.valueTooLarge(size: size, limit: 300)) { try store.put(large, forKey: "k") }
            #expect(store.entry(forKey: "k") == before)
            #expect(try store.changes().count == 1)
        }
    }

    @Test("the byte total counts every value, and a refusal leaves the store as it was")
    func totalLimit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(totalBytes: 600, valueBytes: 600))
            try store.put(.string("a"), forKey: "a")
            try store.put(.string("b"), forKey: "b")
            let usage = store.usage
            #expect(throws: StoreError.self) { try store.put(.string(String(repeating: "x", count: 250)), forKey: "c") }
            #expect(store.usage == usage)
            #expect(store.entry(forKey: "c") == nil)
            // Replacing a value counts only the difference.
            try store.put(.string(String(repeating: "y", count: 150)), forKey: "a")
        }
    }

    @Test("one key too many is refused; replacing an existing key is not")
    func keyLimit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(keys: 2))
            try store.put(.integer(1), forKey: "a")
            try store.put(.integer(2), forKey: "b")
            #expect(throws: StoreError.tooManyKeys(limit: 2)) { try store.put(.integer(3), forKey: "c") }
            try store.put(.integer(4), forKey: "b")
            try store.removeValue(forKey: "a")
            try store.put(.integer(3), forKey: "c")
            #expect(store.keys() == ["b", "c"])
        }
    }

    @Test("key names over 64 bytes of UTF-8 are refused; 64 are fine")
    func keyNameLimit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.integer(1), forKey: String(repeating: "k", count: 64))
            #expect(throws: StoreError.keyTooLong(bytes: 66, limit: 64)) {
                try store.put(.integer(1), forKey: String(repeating: "é", count: 33))
            }
            #expect(throws: StoreError.emptyKey) { try store.put(.integer(1), forKey: "") }
        }
    }

    @Test("a batch is all or nothing")
    func batchAtomic() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(keys: 2))
            try store.put(.integer(1), forKey: "a")
            #expect(throws: StoreError.self) {
                try store.apply([.put("b", .integer(2)), .put("c", .integer(3))])
            }
            #expect(store.keys() == ["a"])
            try store.apply([.put("b", .integer(2)), .delete("a")])
            #expect(store.keys() == ["b"])
        }
    }

    @Test("a move replaces the destination in one change and keeps the value")
    func move() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("one"), forKey: "a")
            try store.put(.string("two"), forKey: "b")
            try store.apply([.move(from: "a", to: "b")])
            #expect(store.keys() == ["b"])
            #expect(try PropertyListCodec.decode(store.entry(forKey: "b")!.xml) == .string("one"))
        }
    }

    @Test("writing the same value again changes nothing, not even the time")
    func samePutIsNoChange() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let first = try store.put(.integer(7), forKey: "k")
            let second = try store.put(.integer(7), forKey: "k")
            #expect(first == second)
            #expect(try store.changes().count == 1)
        }
    }

    @Test("the change log keeps each key's latest change, in commit order, deletes included")
    func changeLog() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.integer(1), forKey: "a")
            try store.put(.integer(2), forKey: "b")
            try store.put(.integer(3), forKey: "a")
            try store.removeValue(forKey: "b")
            let log = try store.changes()
            #expect(log.map(\.key) == ["a", "b"])
            #expect(log[1].value == nil)
            #expect(log[0].sequence < log[1].sequence)
            #expect(try store.changes(after: log[0].sequence).map(\.key) == ["b"])
        }
    }

    @Test("limits set for a store are kept with it")
    func limitsPersist() throws {
        try withTemporaryDirectory { dir in
            let limits = QuotaLimits(totalBytes: 5000, valueBytes: 1000, keys: 10, keyNameBytes: 20)
            _ = try makeStore(in: dir, limits: limits)
            #expect(try makeStore(in: dir).limits == limits)
        }
    }

    @Test("a second lock on a store is refused while the first is held")
    func storeLock() throws {
        try withTemporaryDirectory { dir in
            let location = try StoreLocation(dataDirectory: URL(fileURLWithPath: dir.path), storeID: "s")
            let first = try StoreLock(location: location)
            #expect(throws: StoreError.storeInUse(location.databasePath)) { try StoreLock(location: location) }
            withExtendedLifetime(first) {}
        }
    }

    @Test("store names are checked", arguments: [("default", true), ("my.store-2_x", true), ("", false), ("../x", false), (".hidden", false), ("a b", false)])
    func storeNames(name: String, valid: Bool) {
        #expect(StoreLocation.isValidStoreID(name) == valid)
    }

    @Test("the data directory follows XDG_DATA_HOME, else ~/.local/share")
    func dataDirectory() {
        #expect(StoreLocation.defaultDataDirectory(environment: ["XDG_DATA_HOME": "/x", "HOME": "/h"]).path == "/x/kvsfs")
        #expect(StoreLocation.defaultDataDirectory(environment: ["HOME": "/h"]).path == "/h/.local/share/kvsfs")
    }
}
