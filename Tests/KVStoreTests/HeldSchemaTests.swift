import Foundation
import KVStore
import KVTestSupport
import Testing

/// The schema a store holds: every local write is checked against it before anything is
/// committed, values held before it stay, and it survives a restart.
@Suite("The store's held schema")
struct HeldSchemaTests {
    static let schema = Array("""
        {"keys": {"port": {"type": "integer", "minimum": 1, "maximum": 65535},
                  "mode": {"type": "string", "choices": ["fast", "safe"]}},
         "patterns": {"feature.*": {"type": "boolean"}}}
        """.utf8)

    /// The words of the store's refusal of `body`, or nil when it passed.
    private func refusal(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return String(describing: error)
        }
    }

    @Test("a write, a rename and an import that break the schema are refused and change nothing")
    func refusedAtEveryDoor() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.integer(70000), forKey: "old")
            try store.put(.string("yes"), forKey: "draft")
            try store.takeSchema(version: 1, text: Self.schema)

            #expect(refusal { _ = try store.put(.integer(70000), forKey: "port") } == #""port": an integer breaks the rule maximum 65535: it is 70000"#)
            #expect(refusal { try store.apply([.move(from: "old", to: "port")]) } == #""port": an integer breaks the rule maximum 65535: it is 70000"#)
            #expect(refusal { try store.apply([.move(from: "draft", to: "feature.x")]) } == #""feature.x": a string breaks the rule type boolean: it is a string"#)
            #expect(store.keys() == ["draft", "old"])
            do {
                _ = try store.importValues(["mode": .string("safe"), "port": .string("80")], replacing: false, dryRun: false)
                Issue.record("the import was taken")
            } catch let refusal as ImportRefusal {
                #expect(refusal.key == "port")
                #expect(refusal.reason.description == #""port": a string breaks the rule type integer: it is a string"#)
            }
            #expect(store.keys() == ["draft", "old"], "an import is all or nothing")

            try store.put(.integer(8080), forKey: "port")
            try store.put(.boolean(true), forKey: "feature.x")
            try store.removeValue(forKey: "port")
            #expect(store.keys() == ["draft", "feature.x", "old"])
        }
    }

    @Test("values held before the schema stay, and are listed as breaking it")
    func heldValuesStay() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            try store.put(.integer(70000), forKey: "port")
            try store.put(.string("turbo"), forKey: "mode")
            try store.put(.string("free"), forKey: "other")
            try store.takeSchema(version: 3, text: Self.schema)
            #expect(store.keys() == ["mode", "other", "port"])
            #expect(store.violations().map(\.description) == [
                #""mode": a string breaks the rule choices: it is none of "fast", "safe""#,
                #""port": an integer breaks the rule maximum 65535: it is 70000"#,
            ])
            let proposed = try KeySchema(decoding: Array(#"{"otherKeys": false, "keys": {"port": {}}}"#.utf8))
            #expect(store.violations(of: proposed).map(\.key) == ["mode", "other"])
        }
    }

    @Test("the schema survives a restart; a removed one checks nothing")
    func keptAcrossRestarts() throws {
        try withTemporaryDirectory { dir in
            do {
                let store = try makeStore(in: dir)
                try store.takeSchema(version: 2, text: Self.schema)
            }
            let reopened = try makeStore(in: dir)
            #expect(reopened.schema.version == 2 && reopened.schema.text == Self.schema)
            #expect(refusal { _ = try reopened.put(.string("x"), forKey: "port") } != nil)
            try reopened.takeSchema(version: 3, text: nil)
            #expect(refusal { _ = try reopened.put(.string("x"), forKey: "port") } == nil)
        }
    }

    @Test("a schema this kvsfs cannot read is held as unreadable, with why, and checks nothing here")
    func unreadableHeld() throws {
        try withTemporaryDirectory { dir in
            let store = try makeStore(in: dir)
            let held = try store.takeSchema(version: 4, text: Array(#"{"keys": {"a": {"type": "colour"}}}"#.utf8))
            #expect(held.rules == nil)
            #expect(held.unreadable?.contains("type is one of") == true)
            try store.put(.string("red"), forKey: "a")
        }
    }

    @Test("what the first bytes settle: a whole document for any rule; text for its type, and for a string what more characters cannot mend")
    func settledAtWrite() throws {
        let held = HeldSchema(version: 1, text: Self.schema)
        func settled(_ text: String, _ key: String = "port") -> String? {
            held.settledViolation(ofWritten: Array(text.utf8), forKey: key)?.breach.part.ruleName
        }
        #expect(settled("8080\n") == "type", "unquoted text is a string whatever follows")
        #expect(settled("<integer>70000</integer>\n") == "maximum")
        #expect(settled("<integer>70000</inte") == nil, "not whole yet")
        #expect(settled("<integer>8080</integer>") == nil)
        #expect(settled("fas", "mode") == nil, "text may yet become a choice")
        #expect(settled("slo", "mode") == "choices", "no choice begins with it")
        #expect(settled("slow\n", "mode") == "choices", "whitespace ended the word")
        #expect(settled("fast\n", "mode") == nil)
        #expect(settled("// a comment\n", "mode") == nil, "not a string yet")
        #expect(settled("\"turbo\"", "mode") == "choices", "a quoted string is whole, or begins a dictionary, which a string rule refuses too")
        #expect(settled("<string>turbo</string>", "mode") == "choices")
        #expect(settled("yes", "feature.on") == "type", "a boolean is neither a string nor a dictionary")
        #expect(settled("{\"a\": 1}", "other") == nil, "no rule for the key")
        #expect(settled("[1]", "feature.on") == "type")
    }
}
