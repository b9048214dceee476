import Foundation
import KVStore
import Testing

@Suite("A store's schema: each rule kind, and what a schema may be")
struct KeySchemaTests {
    static let example = """
        {
          "description": "The service's settings.",
          "keys": {
            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 8080,
                     "description": "The port the service listens on."},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1.5},
            "mode": {"type": "string", "choices": ["fast", "safe"], "default": "safe"},
            "host": {"type": "string", "pattern": "[a-z0-9.-]+", "minLength": 1, "maxLength": 253},
            "token": {"type": "data", "maxLength": 4},
            "peers": {"type": "array", "maxLength": 3, "items": {"type": "string", "maxLength": 10, "pattern": "[a-z]+"}},
            "limits": {"type": "dictionary", "required": ["cpu"], "otherMembers": false,
                       "members": {"cpu": {"type": "integer", "minimum": 1}, "memory": {"type": "string"}}}
          },
          "patterns": {"feature.*": {"type": "boolean"}, "*.enabled": {"type": "boolean"}}
        }
        """

    private func schema(_ text: String = example) throws -> KeySchema {
        try KeySchema(decoding: Array(text.utf8))
    }

    /// The words of the refusal of `value` as `key`, or nil when it conforms.
    private func refusal(_ key: String, _ value: PropertyListValue, in text: String = example) throws -> String? {
        try schema(text).violation(key: key, value: value)?.description
    }

    /// The reason a schema is refused, or nil when it is taken.
    private func schemaRefusal(_ text: String) -> String? {
        do {
            _ = try KeySchema(decoding: Array(text.utf8))
            return nil
        } catch {
            return error.description
        }
    }

    @Test("conforming values pass")
    func conforming() throws {
        let values: [(String, PropertyListValue)] = [
            ("port", .integer(443)), ("ratio", .integer(1)), ("ratio", .real(0.5)), ("mode", .string("fast")),
            ("host", .string("db.example.org")), ("token", .data(Data([1, 2]))),
            ("peers", .array([.string("a"), .string("b")])),
            ("limits", .dictionary(["cpu": .integer(2), "memory": .string("1G")])),
            ("feature.dark", .boolean(true)), ("unnamed", .date(Date(timeIntervalSince1970: 0))),
        ]
        for (key, value) in values {
            #expect(try refusal(key, value) == nil, "\(key)")
        }
    }

    @Test("each rule kind refuses with the key, the value's type and the rule")
    func eachRule() throws {
        #expect(try refusal("port", .string("80")) == #""port": a string breaks the rule type integer: it is a string"#)
        #expect(try refusal("port", .integer(70000)) == #""port": an integer breaks the rule maximum 65535: it is 70000"#)
        #expect(try refusal("port", .integer(0)) == #""port": an integer breaks the rule minimum 1: it is 0"#)
        #expect(try refusal("ratio", .real(1.75)) == #""ratio": a real breaks the rule maximum 1.5: it is 1.75"#)
        #expect(try refusal("mode", .string("turbo")) == #""mode": a string breaks the rule choices: it is none of "fast", "safe""#)
        #expect(try refusal("host", .string("DB")) == #""host": a string breaks the rule pattern "[a-z0-9.-]+""#)
        #expect(try refusal("host", .string("")) == #""host": a string breaks the rule minLength 1: its length is 0"#)
        #expect(try refusal("token", .data(Data(count: 5))) == #""token": a data breaks the rule maxLength 4: its length is 5"#)
        #expect(try refusal("peers", .array([.string("a"), .string("B")])) == #""peers" at member 1: a string breaks the rule pattern "[a-z]+""#)
        #expect(try refusal("limits", .dictionary(["memory": .string("1G")])) == #""limits": a dictionary breaks the rule required: it has no member "cpu""#)
        #expect(try refusal("limits", .dictionary(["cpu": .integer(0)])) == #""limits" at member cpu: an integer breaks the rule minimum 1: it is 0"#)
        #expect(try refusal("limits", .dictionary(["cpu": .integer(1), "disk": .integer(1)])) == #""limits": a dictionary breaks the rule otherMembers false: it has a member "disk" that no rule names"#)
        #expect(try refusal("feature.dark", .integer(1)) == #""feature.dark": an integer breaks the rule type boolean: it is an integer"#)
    }

    @Test("a key no rule names is refused only when otherKeys is false; every matching pattern applies")
    func otherKeysAndPatterns() throws {
        let closed = #"{"otherKeys": false, "keys": {"a": {}}, "patterns": {"x*": {"type": "integer"}, "*y": {"type": "integer", "minimum": 5}}}"#
        #expect(try refusal("b", .string("v"), in: closed) == #""b": a string breaks the rule otherKeys false: no rule names this key"#)
        #expect(try refusal("a", .string("v"), in: closed) == nil)
        #expect(try refusal("xy", .integer(3), in: closed) == #""xy": an integer breaks the rule minimum 5: it is 3"#)
        #expect(try refusal("xz", .integer(3), in: closed) == nil)
    }

    @Test("defaults come from the keys' rules")
    func defaults() throws {
        #expect(try schema().defaults == ["port": .integer(8080), "mode": .string("safe")])
        #expect(try schema().rules(for: "port").first?.description == "The port the service listens on.")
    }

    @Test("a key's rule in words, as user.kvsfs.schema and kvsfs get --describe show it")
    func described() throws {
        let schema = try schema()
        #expect(schema.describe("port") == "type integer, minimum 1, maximum 65535, default 8080\nThe port the service listens on.")
        #expect(schema.describe("mode") == #"type string, choices "fast" | "safe", default "safe""#)
        #expect(schema.describe("limits") == #"type dictionary, required "cpu", member "cpu" (type integer, minimum 1), member "memory" (type string), otherMembers false"#)
        #expect(schema.describe("peers") == #"type array, maxLength 3, items (type string, maxLength 10, pattern "[a-z]+")"#)
        #expect(schema.describe("feature.enabled") == "pattern *.enabled: type boolean\npattern feature.*: type boolean")
        #expect(schema.describe("unnamed") == nil)
        let closed = try KeySchema(decoding: Array(#"{"otherKeys": false, "keys": {"a": {}}}"#.utf8))
        #expect(closed.describe("a") == "any value")
        #expect(closed.describe("b") == "no rule names this key, and the schema takes no key it does not name")
    }

    @Test("NaN is within no minimum or maximum")
    func notANumber() throws {
        #expect(try refusal("ratio", .real(.nan)) == #""ratio": a real breaks the rule minimum 0: it is nan"#)
        #expect(try refusal("ratio", .real(.infinity)) == #""ratio": a real breaks the rule maximum 1.5: it is inf"#)
    }

    @Test("a malformed schema is refused with where and why")
    func malformed() {
        let cases: [(String, String)] = [
            (#"[1]"#, "the schema is an array, not a dictionary"),
            (#"{"key": {}}"#, #"unknown member "key""#),
            (#"{"keys": {"a": {"type": "text"}}}"#, "keys.a: type is one of string, integer, real, number"),
            (#"{"keys": {"a": {"type": "string", "minimum": 1}}}"#, "keys.a: minimum and maximum need type integer, real or number"),
            (#"{"keys": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}}"#, "keys.a: minimum 5 is above maximum 1"),
            (#"{"keys": {"a": {"type": "integer", "maxLength": 1}}}"#, "keys.a: minLength and maxLength need type string"),
            (#"{"keys": {"a": {"type": "string", "maxLength": 9, "pattern": "(a"}}}"#, "keys.a: invalid schema: the pattern \"(a\": a '(' is never closed"),
            (#"{"keys": {"a": {"type": "string", "pattern": "a+"}}}"#, "keys.a: a pattern needs a maxLength"),
            (#"{"keys": {"a": {"type": "string", "maxLength": 1000000, "pattern": "(a|b|c){100}"}}}"#, "may take more than 4000000 steps"),
            (#"{"patterns": {"a*b*c*d*e*f*g*h*i*": {}}}"#, "has more than 8 '*'"),
            (#"{"keys": {"a": {"type": "integer", "choices": ["x"]}}}"#, #"keys.a: the choice "x" is not of type integer"#),
            (#"{"keys": {"a": {"type": "integer", "default": "x"}}}"#, "keys.a: the default breaks the rule type integer: it is a string"),
            (#"{"patterns": {"a*": {"type": "integer", "default": 1}}}"#, "patterns.a*: only a key named in keys has a default"),
            (#"{"keys": {"a": {"type": "string", "items": {}}}}"#, "keys.a: items needs type array"),
            (#"{"keys": {"a": {"typo": 1}}}"#, #"keys.a: unknown member "typo""#),
            (#"{"keys": {"": {}}}"#, "keys.: not a key name"),
            (#"{"keys": {"a": {"type": "dictionary", "required": ["b"], "otherMembers": false}}}"#, #""b" is required, but otherMembers is false"#),
        ]
        for (text, expected) in cases {
            let reason = schemaRefusal(text)
            #expect(reason?.contains(expected) == true, "\(text): \(reason ?? "taken")")
        }
    }

    @Test("bounds: size, rule depth, rule count and patterns")
    func bounds() {
        let deep = String(repeating: #"{"type": "array", "items": "#, count: 20) + "{}" + String(repeating: "}", count: 20)
        #expect(schemaRefusal(#"{"keys": {"a": \#(deep)}}"#)?.contains("rules nest deeper than 16") == true)
        let huge = #"{"description": ""# + String(repeating: "x", count: 300_000) + #""}"#
        #expect(schemaRefusal(huge)?.contains("a schema is at most 262144") == true)
        let many = (0..<257).map { #""k\#($0)*": {}"# }.joined(separator: ",")
        #expect(schemaRefusal(#"{"patterns": {\#(many)}}"#)?.contains("at most 256") == true)
        let rules = (0..<10_001).map { #""k\#($0)": {}"# }.joined(separator: ",")
        #expect(schemaRefusal(#"{"keys": {\#(rules)}}"#)?.contains("more than 10000 rules") == true)
    }

    @Test("the schema reads in every format the store reads values in")
    func formats() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <plist version="1.0"><dict><key>keys</key><dict><key>port</key><dict>
            <key>type</key><string>integer</string><key>maximum</key><integer>10</integer></dict></dict></dict></plist>
            """
        #expect(try refusal("port", .integer(11), in: xml) == #""port": an integer breaks the rule maximum 10: it is 11"#)
    }
}
