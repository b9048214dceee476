import Foundation
@testable import KVStore
import KVTestSupport
import Testing

/// An import sets many keys as one change: one transaction, all of it or nothing, with the
/// key that does not fit named; and an export gives the store back as one dictionary.
@Suite("Import and export")
struct StoreImportTests {
    private func values(_ pairs: [(String, PropertyListValue)]) -> [String: PropertyListValue] {
        Dictionary(uniqueKeysWithValues: pairs)
    }

    @Test("an import adds, changes and (with replacing) removes keys, and says which; an equal value is left alone")
    func plan() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("same"), forKey: "kept")
            try store.put(.string("old"), forKey: "changed")
            try store.put(.integer(1), forKey: "other")
            let stampOfKept = store.allChanges(forKey: "kept")!.stamp
            let imported = values([("kept", .string("same")), ("changed", .string("new")), ("added", .array([.boolean(true)]))])

            let merged = try store.importValues(imported, replacing: false, dryRun: false)
            #expect(merged.added == ["added"] && merged.changed == ["changed"] && merged.removed == [] && merged.unchanged == 1)
            #expect(store.keys() == ["added", "changed", "kept", "other"])
            #expect(store.allChanges(forKey: "kept")!.stamp == stampOfKept, "an equal value is not written again")

            let replaced = try store.importValues(imported, replacing: true, dryRun: false)
            #expect(replaced.removed == ["other"] && replaced.added == [] && replaced.changed == [] && replaced.unchanged == 3)
            #expect(store.keys() == ["added", "changed", "kept"])
            #expect(try PropertyListCodec.decode(store.entry(forKey: "changed")!.xml) == .string("new"))
        }
    }

    @Test("a dry run reports the same plan and changes nothing")
    func dryRun() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("old"), forKey: "a")
            let before = store.allChanges()
            let plan = try store.importValues(values([("b", .integer(2))]), replacing: true, dryRun: true)
            #expect(plan.added == ["b"] && plan.removed == ["a"])
            #expect(store.allChanges() == before)
        }
    }

    @Test("the changes of an import are one commit: every key pending, all with one stamp time")
    func oneCommit() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.string("x"), forKey: "gone")
            let imported = values((0..<50).map { ("k\($0)", .integer($0)) })
            _ = try store.importValues(imported, replacing: true, dryRun: false)
            let changes = store.pendingChanges()
            #expect(Set(changes.map(\.key)) == Set(imported.keys).union(["gone"]))
            #expect(Set(changes.map(\.stamp.time)).count == 1, "one stamp time for the whole import")
        }
    }

    @Test("over the key quota: nothing changes, and the error names the first key that does not fit")
    func keyQuota() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(totalBytes: 1 << 20, valueBytes: 1 << 20, keys: 3, keyNameBytes: 64))
            try store.put(.string("z"), forKey: "z")
            let before = store.allChanges()
            #expect(throws: ImportRefusal(key: "c", reason: .tooManyKeys(limit: 3))) {
                try store.importValues(values([("a", .integer(1)), ("b", .integer(2)), ("c", .integer(3)), ("d", .integer(4))]),
                                       replacing: false, dryRun: false)
            }
            #expect(store.allChanges() == before)
            // Removals come first: replacing z makes room for three.
            let plan = try store.importValues(values([("a", .integer(1)), ("b", .integer(2)), ("c", .integer(3))]), replacing: true, dryRun: false)
            #expect(plan.added == ["a", "b", "c"] && plan.removed == ["z"])
        }
    }

    @Test("over the byte quota or the per-value limit, or a bad key name: the error names the key and nothing changes")
    func byteQuotaAndNames() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir, limits: QuotaLimits(totalBytes: 1000, valueBytes: 400, keys: 100, keyNameBytes: 10))
            let before = store.allChanges()
            let text = String(repeating: "x", count: 200)
            let refused = #expect(throws: ImportRefusal.self) {
                try store.importValues(values([("a", .string(text)), ("b", .string(text)), ("c", .string(text)), ("d", .string(text))]),
                                       replacing: false, dryRun: false)
            }
            #expect(refused?.key == "c", "a and b fit in 1000 bytes, c does not: \(String(describing: refused))")
            // The refusal names c's own size and the room a and b leave, not the running total.
            let size = try PropertyListCodec.encodeXML(.string(text)).count
            if case .storeFull(let needed, let available, let limit)? = refused?.reason {
                #expect(needed == size && available == 1000 - 2 * size && limit == 1000, "\(String(describing: refused))")
            } else {
                Issue.record("\(String(describing: refused))")
            }
            let tooBig = #expect(throws: ImportRefusal.self) {
                try store.importValues(values([("a", .integer(1)), ("huge", .string(String(repeating: "y", count: 500)))]), replacing: false, dryRun: false)
            }
            #expect(tooBig?.key == "huge")
            let badName = #expect(throws: ImportRefusal.self) {
                try store.importValues(values([("a", .integer(1)), ("much-too-long-a-name", .integer(2))]), replacing: false, dryRun: false)
            }
            #expect(badName?.key == "much-too-long-a-name")
            #expect(store.allChanges() == before)
        }
    }

    @Test("an export is every key as one dictionary, in XML or binary, that decodes to the stored values")
    func export() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let stored = values([("s", .string("<&>")), ("n", .integer(-3)), ("d", .dictionary(["x": .data(Data([0, 1]))])),
                                 ("nul\u{0}key", .boolean(false))])
            _ = try store.importValues(stored, replacing: false, dryRun: false)
            let binary = try store.exportedPropertyList(as: .binary)
            #expect(binary.starts(with: Array("bplist00".utf8)))
            #expect(try PropertyListCodec.decode(binary) == .dictionary(stored))
            try store.removeValue(forKey: "nul\u{0}key")
            let xml = try store.exportedPropertyList(as: .xml)
            var withoutNul = stored
            withoutNul["nul\u{0}key"] = nil
            #expect(try PropertyListCodec.decode(xml) == .dictionary(withoutNul))
            #expect(try store.exportedPropertyList(as: .xml) == xml, "the same store exports the same bytes")
        }
    }

    @Test("an import on a read-only store is refused; its dry run is not")
    func readOnly() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            store.setReadOnly("the token may only read")
            #expect(throws: ImportRefusal.self) { try store.importValues(values([("a", .integer(1))]), replacing: false, dryRun: false) }
            #expect(try store.importValues(values([("a", .integer(1))]), replacing: false, dryRun: true).added == ["a"])
            #expect(store.keys() == [])
        }
    }
}
