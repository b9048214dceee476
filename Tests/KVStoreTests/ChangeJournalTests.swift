import Foundation
@testable import KVStore
import KVTestSupport
import Testing

/// A commit reaches the change journal before it is acknowledged and SQLite in batches. These
/// tests take the store's files as a crash would leave them, copied while the store is still
/// open (nothing flushed, no clean close), and open the copy.
@Suite("Change journal")
struct ChangeJournalTests {
    private static let files = ["test.sqlite", "test.sqlite-wal", "test.sqlite.changes"]

    /// The store's files as they are on disk right now, in `directory`.
    private func crashImage(of source: String, in directory: String, editing journal: ((inout [UInt8]) -> Void)? = nil) throws -> KeyValueStore {
        for name in Self.files {
            let from = (source as NSString).appendingPathComponent(name)
            let to = (directory as NSString).appendingPathComponent(name)
            guard var bytes = FileManager.default.contents(atPath: from).map([UInt8].init) else { continue }
            if name.hasSuffix(".changes") { journal?(&bytes) }
            #expect(FileManager.default.createFile(atPath: to, contents: Data(bytes)))
        }
        return try KeyValueStore(path: (directory as NSString).appendingPathComponent("test.sqlite"))
    }

    private func journalSize(_ dir: TemporaryDirectory) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: (dir.path as NSString).appendingPathComponent("test.sqlite.changes"))
        return (attributes[.size] as? Int) ?? -1
    }

    @Test("every acknowledged change, delete and move is back after a crash, with its stamp and sync state")
    func crashKeepsEveryChange() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("one"), forKey: "a")
            try store.put(.integer(2), forKey: "b")
            try store.put(.array([.boolean(true), .data(Data([0, 255]))]), forKey: "c")
            try store.removeValue(forKey: "b")
            try store.apply([.move(from: "a", to: "moved")])
            try store.put(.string("again"), forKey: "c")
            #expect(try journalSize(dir) > 0, "the changes are still only in the journal")

            let copy = dir.subdirectory("crash")
            let recovered = try crashImage(of: dir.path, in: copy)
            #expect(recovered.keys() == store.keys())
            #expect(recovered.allChanges() == store.allChanges())
            #expect(recovered.usage == store.usage)
            for key in store.keys() { #expect(recovered.entry(forKey: key) == store.entry(forKey: key)) }
            #expect(try recovered.changes().map(\.key) == ["b", "a", "moved", "c"])
            // A change after recovery takes a later stamp and a later sequence.
            try recovered.put(.string("after"), forKey: "a")
            #expect(recovered.allChanges(forKey: "a")!.stamp > store.allChanges(forKey: "moved")!.stamp)
            #expect(try recovered.changes().last?.key == "a")
        }
    }

    @Test("a torn last record is dropped and every record before it is kept")
    func tornTail() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("kept"), forKey: "first")
            let intact = try journalSize(dir)
            try store.put(.string("torn"), forKey: "second")
            let whole = try journalSize(dir)

            for cut in [intact + 1, intact + 12, whole - 1] {
                let recovered = try crashImage(of: dir.path, in: dir.subdirectory("cut\(cut)")) { $0.removeLast($0.count - cut) }
                #expect(recovered.keys() == ["first"], "cut at \(cut) of \(whole)")
            }
            let flipped = try crashImage(of: dir.path, in: dir.subdirectory("flipped")) { $0[whole - 3] ^= 0x20 }
            #expect(flipped.keys() == ["first"])
            let zeroed = try crashImage(of: dir.path, in: dir.subdirectory("zeroed")) { $0 += [UInt8](repeating: 0, count: 4096) }
            #expect(zeroed.keys() == ["first", "second"])
            // What follows a recovered torn tail is appended where the good records end.
            try zeroed.put(.string("third"), forKey: "third")
            let again = try crashImage(of: dir.subdirectory("zeroed"), in: dir.subdirectory("again"))
            #expect(again.keys() == ["first", "second", "third"])
        }
    }

    @Test("an import is one record: a crash anywhere in writing it recovers all of it or none of it")
    func importIsOneRecord() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("before"), forKey: "old")
            let intact = try journalSize(dir)
            let imported = Dictionary(uniqueKeysWithValues: (0..<40).map { ("k\($0)", PropertyListValue.string(String(repeating: "v", count: $0))) })
            _ = try store.importValues(imported, replacing: true, dryRun: false)
            let whole = try journalSize(dir)
            let none: [String] = ["old"]
            let all = imported.keys.sorted()
            for cut in stride(from: intact, through: whole, by: max(1, (whole - intact) / 37)) + [whole - 1, whole] {
                let recovered = try crashImage(of: dir.path, in: dir.subdirectory("cut\(cut)")) { $0.removeLast($0.count - cut) }
                #expect(recovered.keys() == (cut == whole ? all : none), "cut at \(cut) of \(whole)")
            }
        }
    }

    @Test("a journal replayed over a database that already has its changes, or later ones, changes nothing")
    func replayIsIdempotent() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("old"), forKey: "k")
            let stale = try #require(FileManager.default.contents(atPath: (dir.path as NSString).appendingPathComponent("test.sqlite.changes")))
            // The database takes the journal, then the remote confirms the change and the key changes again.
            try store.markPushed(store.pendingChanges())
            #expect(store.syncState(forKey: "k") == .synced)
            try store.put(.string("new"), forKey: "other")
            try store.makeDurable()

            // A crash between the database's commit and emptying the journal leaves the old records.
            let recovered = try crashImage(of: dir.path, in: dir.subdirectory("crash")) { $0 = [UInt8](stale) }
            #expect(recovered.allChanges() == store.allChanges())
            #expect(recovered.syncState(forKey: "k") == .synced)
        }
    }

    @Test("the journal moves to the database in batches and is empty after a clean close")
    func batches() throws {
        try withTemporaryDirectory { dir in
            do {
                let store = try makeStore(in: dir)
                for index in 0..<600 { try store.put(.integer(index), forKey: "k\(index % 50)") }
                #expect(try journalSize(dir) < 256 * 200, "the journal never grows past a batch")
            }
            #expect(try journalSize(dir) == 0)
            let reopened = try makeStore(in: dir)
            #expect(reopened.keys().count == 50)
            #expect(try PropertyListCodec.decode(reopened.entry(forKey: "k49")!.xml) == .integer(599))
        }
    }

    @Test("keys holding NUL keep every byte across a clean restart and a crash")
    func keysWithNUL() throws {
        try withTemporaryDirectory { dir in
            let keys = ["\u{0}lead", "mid\u{0}dle", "mid"]
            do {
                let store = try makeStore(in: dir)
                for (index, key) in keys.enumerated() { try store.put(.integer(index), forKey: key) }
                let crashed = try crashImage(of: dir.path, in: dir.subdirectory("crash"))
                #expect(crashed.keys() == keys.sorted())
            }
            let reopened = try makeStore(in: dir)
            #expect(reopened.keys() == keys.sorted())
            for (index, key) in keys.enumerated() { #expect(try PropertyListCodec.decode(reopened.entry(forKey: key)!.xml) == .integer(index)) }
            #expect(try Set(reopened.changes().map(\.key)) == Set(keys))
        }
    }

    @Test("a journaled row the database refuses is quarantined, not dropped: the store still opens with every other change")
    func refusedRowSkipped() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("kept"), forKey: "a")
            let stamp = ChangeStamp(time: 1, counter: 0, device: "elsewhere")
            let entry = { (key: String) in KeyValueStore.Entry(key: key, xml: Array("<string>x</string>".utf8), type: .string, modifiedAt: stamp.date) }
            let rows = [ChangeJournal.Row(key: "", entry: entry(""), stamp: stamp, syncState: .synced, sequence: 100),
                        ChangeJournal.Row(key: "b", entry: entry("b"), stamp: stamp, syncState: .synced, sequence: 101)]
            let recovered = try crashImage(of: dir.path, in: dir.subdirectory("crash")) { $0 += ChangeJournal.encodeRecord(rows) }
            #expect(recovered.keys() == ["a", "b"])
            #expect(try recovered.changes().map(\.key) == ["a", "b"])
            #expect(recovered.quarantined.map(\.key) == [""], "the refused row is kept where it can be seen")
            #expect(recovered.quarantined.first?.value == Data("<string>x</string>".utf8))
        }
    }

    /// Reading `/proc/self/mem` from offset 0 fails with EIO, as a failing disk would: the
    /// journal stands in for one whose sectors cannot be read.
    @Test("a journal that cannot be read refuses the open instead of being taken for empty and truncated")
    func unreadableJournal() throws {
        try withTemporaryDirectory { dir in
            let path = (dir.path as NSString).appendingPathComponent("test.sqlite")
            #expect(symlink("/proc/self/mem", path + ".changes") == 0)
            #expect {
                _ = try KeyValueStore(path: path)
            } throws: { error in
                "\(error)".contains("cannot read the change journal") && "\(error)".contains("Input/output error")
            }
        }
    }
}
