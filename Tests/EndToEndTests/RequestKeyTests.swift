import Foundation
import KVStore
import KVTestSupport
import Testing

/// Every server route that takes a key (a push's changes, `key=` of history, `mark-key=` of a
/// push, a fetch and an event stream) applies the one key rule: 1 to 1024 bytes of UTF-8,
/// percent-encoded in a query. A key outside it is 400 with the reason, and changes nothing:
/// not the store, not the account's identity.
@Suite("One key rule at every route", .serialized)
struct RequestKeyTests {
    /// Keys outside the rule, as a query sends them, and the reason each is refused with.
    private static let badQueryKeys: [(sent: String, reason: String)] = [
        ("", "the key is empty"),
        (String(repeating: "k", count: 1025), "the key is 1025 bytes, over the limit of 1024"),
        ("%ff%fe", "the key is not percent-encoded UTF-8"),
        ("a%c3", "the key is not percent-encoded UTF-8"),
    ]

    private static let rule = "must be a key name of 1 to 1024 bytes of percent-encoded UTF-8: "

    @Test("a bad key in key=, mark-key= or a push's body is 400 with the rule and the reason; nothing in the store or account changes",
          arguments: ServerBackend.allCases)
    func everyRoute(backend: ServerBackend) throws {
        try withTestServer(backend, label: "kvsfs-keys") { fixture in
            let (server, token, dir) = (fixture.server, fixture.token, fixture.directory)
            let auth = "-H 'Authorization: Bearer \(token)'"
            /// The answer's body, a space, and its status.
            func curl(_ arguments: String, _ path: String) throws -> String {
                try shell("curl -s -m 10 -w ' %{http_code}' \(auth) \(arguments) '\(server.url)/v1/alice/default\(path)'").standardOutput
            }
            func body(_ json: String) throws -> String {
                let path = dir.path + "/push.json"
                unlink(path)
                guard FileManager.default.createFile(atPath: path, contents: Data(json.utf8), attributes: [.posixPermissions: 0o600]) else {
                    throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
                }
                return "-X POST -H 'Content-Type: application/json' --data-binary @\(path)"
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let value = try Data(PropertyListCodec.encodeXML(.string("v"))).base64EncodedString()
            func change(_ key: String, time: Int64) -> String {
                #"{"key":"\#(key)","value":"\#(value)","type":"string","stamp":{"time":\#(time),"counter":0,"device":"d"}}"#
            }
            let first = try curl(try body(#"{"changes":[\#(change("k", time: now))]}"#), "/changes")
            #expect(first.hasSuffix(" 200") && first.contains(#""accepted":[{"#), "\(first)")
            // What must stay as it is: the store's changes and cursor, k's history, the identity.
            func state() throws -> [String] {
                try ["/changes?after=0", "/cursor", "/history?key=k", "/identity"].map { path in
                    // The JSON with its members sorted: the server's order may differ from one answer to the next.
                    let answer = try curl("", path)
                    let object = try JSONSerialization.jsonObject(with: Data(answer.dropLast(4).utf8))
                    return String(decoding: try JSONSerialization.data(withJSONObject: object, options: .sortedKeys), as: UTF8.self)
                        + answer.suffix(4)
                }
            }
            let before = try state()
            let position = "1.\(now).0.d"
            for (sent, reason) in Self.badQueryKeys {
                let shown = "\(sent.prefix(12).debugDescription) (\(sent.utf8.count) bytes)"
                let history = try curl("", "/history?key=\(sent)")
                #expect(history == #"{"error":{"message":"key \#(Self.rule)\#(reason)"}} 400"#, "history \(shown): \(history)")
                let version = try curl("", "/history?key=\(sent)&version=1")
                #expect(version.hasSuffix(" 400") && version.contains(reason), "history version \(shown): \(version)")
                let markKey = #"{"error":{"message":"mark-key \#(Self.rule)\#(reason)"}} 400"#
                let fetch = try curl("", "/changes?after=1&mark=\(position)&mark-key=\(sent)")
                #expect(fetch == markKey, "fetch \(shown): \(fetch)")
                let events = try curl("", "/events?after=1&mark=\(position)&mark-key=\(sent)")
                #expect(events == markKey, "events \(shown): \(events)")
                let push = try curl(try body(#"{"changes":[\#(change("k", time: now + 1000))]}"#),
                                    "/changes?mark=\(position)&mark-key=\(sent)")
                #expect(push == markKey, "push with mark \(shown): \(push)")
            }
            // A push's own keys, as JSON carries them.
            for (key, reason) in [("", "the key is empty"), (String(repeating: "k", count: 1025), "the key is 1025 bytes, over the limit of 1024")] {
                let push = try curl(try body(#"{"changes":[\#(change("other", time: now + 2000)),\#(change(key, time: now + 2000))]}"#), "/changes")
                #expect(push.hasSuffix(" 400") && push.contains("change 1 (key ") && push.contains(reason), "push of \(key.utf8.count) bytes: \(push)")
            }
            let after = try state()
            #expect(after == before, "nothing changed: \(zip(before, after).filter { $0 != $1 })")
            // Within the rule: '/', '..' and 1024 bytes are keys like any other.
            for key in ["a%2Fb", "..", String(repeating: "k", count: 1024)] {
                let history = try curl("", "/history?key=\(key)")
                #expect(history == #"{"versions":[]} 200"#, "\(key.prefix(12)): \(history)")
            }
        }
    }
}
