import Foundation
import KVCloud
import KVStore
import KVTestSupport
import KVWire
import Testing

/// The server's reading of requests, as pure functions: what it accepts, what it refuses and
/// why, and that no bytes make it trap.
@Suite("The wire")
struct WireTests {
    private static let xml = Data(try! PropertyListCodec.encodeXML(.string("hello")))

    private func change(_ key: String = "k", device: String = "d", value: Data? = WireTests.xml,
                        type: ValueType? = .string) -> StampedChange {
        StampedChange(key: key, value: value, type: type, stamp: ChangeStamp(time: 1, counter: 0, device: device))
    }

    private func body(_ changes: [StampedChange]) -> [UInt8] {
        Array(try! JSONEncoder().encode(PushRequest(changes: changes)))
    }

    private func refusal(_ bytes: [UInt8]) -> WireError? {
        do {
            _ = try decodePush(bytes)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Pushes

    @Test("a push of a value and a deletion reads back as sent")
    func wellFormedPush() throws {
        let changes = [change("k"), change("gone", value: nil, type: nil)]
        #expect(try decodePush(body(changes)) == PushRequest(changes: changes))
    }

    @Test("a push over 10,000 changes is refused with the count; 10,000 are read")
    func tooManyChanges() throws {
        let many = (0..<10_001).map { change("k\($0)", value: nil, type: nil) }
        #expect(refusal(body(many)) == .tooManyChanges(count: 10_001, limit: 10_000))
        #expect(refusal(body(many))?.description == "the push holds 10001 changes, over the limit of 10000 a push")
        #expect(try decodePush(body(Array(many.prefix(10_000)))).changes.count == 10_000)
    }

    @Test("device ids of 1 to 64 bytes (the stamp rule's) are read; an empty or longer one is refused, naming the change")
    func deviceLength() throws {
        #expect(try decodePush(body([change(device: String(repeating: "d", count: 64))])).changes.count == 1)
        let long = refusal(body([change("first"), change("second", device: String(repeating: "d", count: 65))]))
        #expect(long == .invalidChange(index: 1, key: "second", reason: "the device id is 65 bytes, over the limit of 64"))
        #expect(long?.description == "change 1 (key second): the device id is 65 bytes, over the limit of 64")
        #expect(refusal(body([change(device: "")])) == .invalidChange(index: 0, key: "k", reason: "the stamp has no device id"))
    }

    @Test("keys of 1 to 1024 bytes are read; an empty or longer one is refused, quoted short")
    func keyLength() throws {
        #expect(try decodePush(body([change(String(repeating: "é", count: 512))])).changes.count == 1)
        let long = refusal(body([change(String(repeating: "k", count: 1025))]))
        #expect(long == .invalidChange(index: 0, key: String(repeating: "k", count: 64) + "…",
                                       reason: "the key is 1025 bytes, over the limit of 1024"))
        #expect(refusal(body([change("")])) == .invalidChange(index: 0, key: "", reason: "the key is empty"))
    }

    @Test("a value must be a property list of its type; a deletion has no type")
    func valuesAndTypes() {
        #expect(refusal(body([change(type: .integer)]))?.description == "change 0 (key k): the value is not a property list of type integer")
        #expect(refusal(body([change(value: Data("not ( a plist".utf8))]))?.description
                == "change 0 (key k): the value is not a property list of type string")
        #expect(refusal(body([change(type: nil)])) == .invalidChange(index: 0, key: "k", reason: "a value needs its type"))
        #expect(refusal(body([change(value: nil, type: .string)])) == .invalidChange(index: 0, key: "k", reason: "a deletion has no type"))
    }

    @Test("a value over the per-value quota is read: the storage refuses that change alone, with its quota")
    func largeValue() throws {
        let large = Data(try PropertyListCodec.encodeXML(.string(String(repeating: "x", count: 1_500_000))))
        #expect(try decodePush(body([change(value: large)])).changes.first?.value == large)
    }

    @Test("a body over 4 MiB is refused before it is parsed")
    func bodySize() {
        let big = [UInt8](repeating: UInt8(ascii: " "), count: (4 << 20) + 1)
        #expect(refusal(big) == .bodyTooLarge(bytes: (4 << 20) + 1, limit: 4 << 20))
    }

    @Test("nesting deeper than 16 is refused before it is parsed; brackets inside strings do not count")
    func nesting() throws {
        let deep = Array(#"{"changes":"#.utf8) + [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
        #expect(refusal(deep) == .nestedTooDeep(limit: 16))
        #expect(refusal(deep)?.description == "the body nests arrays and objects more than 16 deep")
        let bracketed = change(String(repeating: "[{", count: 200) + #"\"#)
        #expect(try decodePush(body([bracketed])) == PushRequest(changes: [bracketed]))
    }

    @Test("a change's condition travels as condition: a version of 1 or more, absent, or a cursor of 0 or more; anything else is refused")
    func conditions() throws {
        var changes = [change("v"), change("a"), change("s", value: nil, type: nil)]
        for (index, condition) in [ChangeCondition.version(7), .absent, .unchangedSince(0)].enumerated() { changes[index].condition = condition }
        #expect(try decodePush(body(changes)) == PushRequest(changes: changes))
        let text = String(decoding: body(changes), as: UTF8.self)
        for field in [#""condition":{"version":7}"#, #""condition":{"absent":true}"#, #""condition":{"unchangedSince":0}"#] {
            #expect(text.contains(field), "\(text)")
        }
        #expect(!String(decoding: body([change()]), as: UTF8.self).contains("condition"), "a change without one carries none")
        var zero = change("z")
        zero.condition = .version(0)
        #expect(refusal(body([zero])) == .invalidChange(index: 0, key: "z", reason: "invalid condition: a condition's version is 1 or more, not 0"))
        var negative = change("n")
        negative.condition = .unchangedSince(-1)
        #expect(refusal(body([negative])) == .invalidChange(index: 0, key: "n", reason: "invalid condition: a condition's cursor is 0 or more, not -1"))
        let both = #"{"changes":[{"key":"k","stamp":{"time":1,"counter":0,"device":"d"},"condition":{"version":3,"absent":true}}]}"#
        #expect(refusal(Array(both.utf8))?.description.contains("a condition is one of version, absent (true) or unchangedSince") == true)
    }

    @Test("what is not a push says what is wrong and where")
    func notAPush() {
        #expect(refusal(Array("{not json".utf8))?.description.hasPrefix("the body is not a push: ") == true)
        #expect(refusal(Array(#"{"changes":[{"key":"k"}]}"#.utf8)) == .notAPush("changes.0 has no stamp"))
        #expect(refusal([]) != nil)
    }

    @Test("no bytes make decodePush trap: random bodies, and a push with bytes flipped or cut")
    func neverTraps() {
        var generator = SeededGenerator(seed: 7)
        let valid = body([change("k"), change("gone", value: nil, type: nil)])
        for round in 0..<3000 {
            var bytes: [UInt8]
            switch round % 3 {
            case 0: bytes = (0..<Int.random(in: 0..<300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            case 1:
                bytes = valid
                for _ in 0..<Int.random(in: 1...4, using: &generator) {
                    bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
                }
            default: bytes = Array(valid.prefix(Int.random(in: 0...valid.count, using: &generator)))
            }
            _ = refusal(bytes)
        }
        // Numbers past their types, in the stamp.
        for stamp in [#"{"time":99999999999999999999,"counter":0,"device":"d"}"#, #"{"time":-9223372036854775808,"counter":2147483648,"device":"d"}"#,
                      #"{"time":1e400,"counter":0,"device":"d"}"#] {
            _ = refusal(Array(#"{"changes":[{"key":"k","value":null,"type":null,"stamp":\#(stamp)}]}"#.utf8))
        }
    }

    // MARK: - Pushing many changes

    @Test("a client's pushes keep within the server's limits: 25,000 changes go in three pushes, each read whole")
    func splitByCount() throws {
        let changes = (0..<25_000).map { change("k\($0)", value: nil, type: nil) }
        let bodies = try encodePushes(changes)
        #expect(bodies.count == 3)
        #expect(try bodies.flatMap { try decodePush($0).changes } == changes)
    }

    @Test("large values are split by bytes; one change over the limit travels alone")
    func splitBySize() throws {
        let megabyte = Data(try PropertyListCodec.encodeXML(.data(Data(repeating: 0xFF, count: 400_000))))
        let changes = (0..<6).map { change("k\($0)", value: megabyte, type: .data) }
        let bodies = try encodePushes(changes)
        #expect(bodies.count > 1)
        #expect(bodies.allSatisfy { $0.count <= WireLimits.maximumPushBytes })
        #expect(try bodies.flatMap { try decodePush($0).changes } == changes)
        let huge = change("huge", value: Data(repeating: 0x20, count: 5 << 20), type: .string)
        #expect(try encodePushes([change("a"), huge, change("b")]).count == 3)
        #expect(try encodePushes([]).map { try decodePush($0) } == [PushRequest(changes: [])])
    }

    @Test("the answers to several pushes join: cursors span them only when each began where the last ended")
    func joiningAnswers() {
        let a = change("a"), b = change("b")
        let contiguous = PushOutcome.joining([PushOutcome(accepted: [a], cursorBefore: 3, cursorAfter: 4),
                                              PushOutcome(accepted: [b], cursorBefore: 4, cursorAfter: 5)])
        #expect(contiguous == PushOutcome(accepted: [a, b], cursorBefore: 3, cursorAfter: 5))
        let interleaved = PushOutcome.joining([PushOutcome(accepted: [a], cursorBefore: 3, cursorAfter: 4),
                                               PushOutcome(accepted: [b], cursorBefore: 6, cursorAfter: 7)])
        #expect(interleaved == PushOutcome(accepted: [a, b]))
    }

    // MARK: - Queries

    /// The reason a query's parameter is refused; nil when it is read.
    private func queryRefusal(_ read: () throws -> Any) -> String? {
        do {
            _ = try read()
            return nil
        } catch {
            return (error as? WireError)?.description ?? "not a WireError: \(error)"
        }
    }

    @Test("after, limit and wait: defaults, ranges, and the reason for each refusal")
    func queries() throws {
        let none = WireQuery(nil)
        #expect(try none.after() == 0 && none.limit() == 1000 && none.wait() == 0)
        let given = WireQuery("after=5&limit=10000&wait=60&other=x")
        #expect(try given.after() == 5 && given.limit() == 10_000 && given.wait() == 60)
        #expect(try WireQuery("limit=1").limit() == 1)
        #expect(queryRefusal { try WireQuery("after=-1").after() } == "after must be a whole number")
        #expect(queryRefusal { try WireQuery("after=x").after() } == "after must be a whole number")
        #expect(queryRefusal { try WireQuery("after=").after() } == "after must be a whole number")
        #expect(queryRefusal { try WireQuery("after=99999999999999999999").after() } == "after must be a whole number")
        #expect(try WireQuery("after=9223372036854775807").after() == .max)
        #expect(queryRefusal { try WireQuery("limit=0").limit() } == "limit must be 1 to 10000")
        #expect(queryRefusal { try WireQuery("limit=10001").limit() } == "limit must be 1 to 10000")
        #expect(queryRefusal { try WireQuery("limit=9223372036854775807").limit() } == "limit must be 1 to 10000")
        #expect(queryRefusal { try WireQuery("wait=61").wait() } == "wait must be 0 to 60 seconds")
    }

    @Test("a query reads as the router reads it: values percent-decoded, the first of a name winning")
    func queryForm() throws {
        #expect(try WireQuery("after=%37").after() == 7)
        #expect(try WireQuery("after=3&after=9").after() == 3)
        #expect(WireQuery("after&limit=2").value("after") == "")
        #expect(queryRefusal { try WireQuery("after&limit=2").after() } == "after must be a whole number")
        #expect(WireQuery("a=b=c").value("a") == "b=c")
        #expect(WireQuery("after=%zz").value("after") == "%zz")
        #expect(WireQuery(WireQuery.encode(after: 4, limit: 4096, wait: 9).dropFirst().description).value("limit") == "4096")
        for text in ["", "&&&", "=", "==", "%", "after=%", "after=\u{0}", String(repeating: "a=1&", count: 10_000)] {
            let query = WireQuery(text)
            _ = queryRefusal { try query.after() }
            _ = queryRefusal { try query.limit() }
            _ = queryRefusal { try query.wait() }
        }
    }

    @Test("a history mark travels as mark and mark-key, any key of the key rule byte for byte; a malformed one is refused with the form")
    func marks() throws {
        let stamp = ChangeStamp(time: 1_795_341_600_123, counter: 7, device: "dev-1:a.b_c")
        for key in ["k", "café au lait", "a&b=c%d+e f", "mid\u{0}dle", "/slash?", String(repeating: "ü", count: WireLimits.maximumKeyBytes / 2)] {
            let mark = HistoryMark(key: key, cursor: 42, stamp: stamp)
            let sent = WireQuery(String(WireQuery.encode(after: 41, mark: mark, limit: 10).dropFirst()))
            #expect(try sent.mark() == mark, "\(key.debugDescription)")
            #expect(try sent.after() == 41 && sent.limit() == 10)
            #expect(try WireQuery(String(WireQuery.encode(mark: mark).dropFirst())).mark() == mark)
        }
        #expect(try WireQuery("after=3").mark() == nil)
        let expected = "mark must be mark=CURSOR.TIME.COUNTER.DEVICE and mark-key=KEY, as a change stamp and a key name allow"
        for query in ["mark=1.2.3.d", "mark-key=k", "mark=0.2.3.d&mark-key=k", "mark=1.2.-3.d&mark-key=k", "mark=1.2.3.&mark-key=k",
                      "mark=1.2.3.d%20e&mark-key=k", "mark=1.2.3&mark-key=k", "mark=x.2.3.d&mark-key=k", "mark=1.2.99999999999.d&mark-key=k",
                      "mark=1.2.3.\(String(repeating: "d", count: 65))&mark-key=k"] {
            #expect(queryRefusal { try WireQuery(query).mark() } == expected, "\(query.prefix(60))")
        }
        // Its key by the one key rule (`RequestKey`), as a history request's: before, one no
        // store could hold was checked against the store's rows (409, a renewed generation).
        let rule = "mark-key must be a key name of 1 to \(WireLimits.maximumKeyBytes) bytes of percent-encoded UTF-8: "
        for (key, reason) in [("", "the key is empty"), ("%ff%fe", "the key is not percent-encoded UTF-8"),
                              (String(repeating: "k", count: 1025), "the key is 1025 bytes, over the limit of 1024")] {
            #expect(queryRefusal { try WireQuery("mark=1.2.3.d&mark-key=" + key).mark() } == rule + reason, "\(key.prefix(20))")
            #expect(queryRefusal { try WireQuery("mark-key=" + key).mark() } == rule + reason, "\(key.prefix(20))")
        }
    }

    @Test("a history request names its key as any key byte for byte and a version of 1 or more; anything else is a 400 with the rule")
    func historyQueries() throws {
        for key in ["k", "café au lait", "a&b=c%d+e f", "mid\u{0}dle", "/slash?", String(repeating: "k", count: WireLimits.maximumKeyBytes)] {
            for version in [nil, 1, Int64.max] as [Int64?] {
                let sent = WireQuery(String(WireQuery.encode(key: key, version: version).dropFirst()))
                #expect(try sent.key() == key && sent.version() == version, "\(key.prefix(20).debugDescription) \(String(describing: version))")
            }
        }
        let key = "key must be a key name of 1 to \(WireLimits.maximumKeyBytes) bytes of percent-encoded UTF-8: "
        // %ff%fe decodes to no UTF-8: before, it was read as the key "%ff%fe" and answered 200.
        for (query, reason) in [("", "no key is named"), ("version=1", "no key is named"), ("key=", "the key is empty"),
                                ("key&version=2", "the key is empty"),
                                ("key=" + String(repeating: "k", count: WireLimits.maximumKeyBytes + 1), "the key is 1025 bytes, over the limit of 1024"),
                                ("key=%ff%fe", "the key is not percent-encoded UTF-8"), ("key=a%c3", "the key is not percent-encoded UTF-8"),
                                ("key=%zz", "the key is not percent-encoded UTF-8")] {
            #expect(queryRefusal { try WireQuery(query).key() } == key + reason, "\(query.prefix(60))")
        }
        for query in ["key=k&version=0", "key=k&version=-1", "key=k&version=x", "key=k&version=99999999999999999999", "key=k&version="] {
            #expect(queryRefusal { try WireQuery(query).version() } != nil, "\(query)")
        }
        #expect(queryRefusal { try WireQuery("key=k&version=0").version() } == "version must be a version number, 1 or more")
        #expect(try WireQuery("key=k&version=3&version=4").version() == 3, "the first of a repeated name")
    }

    @Test("a version answer without a version says null, as the protocol has it")
    func versionNull() throws {
        #expect(String(decoding: try JSONEncoder().encode(VersionResponse(version: nil)), as: UTF8.self) == #"{"version":null}"#)
        #expect(try JSONDecoder().decode(VersionResponse.self, from: Data(#"{"version":null}"#.utf8)).version == nil)
    }

    @Test("changes that lost travel as lost, the newest (as a kvsfs that kept one reads it), and alsoLost, the others")
    func lostOnTheWire() throws {
        func kept(_ time: Int64, _ device: String) -> KeptChange {
            KeptChange(value: nil, type: nil, stamp: ChangeStamp(time: time, counter: 0, device: device))
        }
        var change = StampedChange(key: "k", value: nil, type: nil, stamp: ChangeStamp(time: 9, counter: 0, device: "w"))
        #expect(!String(decoding: try JSONEncoder().encode(change), as: UTF8.self).contains("lost"), "none: neither field")
        change.lost = [kept(5, "a")]
        let one = String(decoding: try JSONEncoder().encode(change), as: UTF8.self)
        #expect(one.contains(#""lost":{"#) && !one.contains("alsoLost"), "\(one)")
        change.lost = [kept(5, "a"), kept(4, "b"), kept(3, "c")]
        let three = try JSONEncoder().encode(change)
        let fields = try #require(try JSONSerialization.jsonObject(with: three) as? [String: Any])
        #expect(fields["lost"] is [String: Any] && (fields["alsoLost"] as? [Any])?.count == 2)
        #expect(try JSONDecoder().decode(StampedChange.self, from: three) == change)
        let older = #"{"key":"k","stamp":{"time":9,"counter":0,"device":"w"},"lost":{"stamp":{"time":5,"counter":0,"device":"a"}}}"#
        #expect(try JSONDecoder().decode(StampedChange.self, from: Data(older.utf8)).lost == [kept(5, "a")])
    }

    @Test("a refusal says rowUnreadable when the remote could not read its row for the key; a server older than the field is read as false")
    func rowUnreadableOnTheWire() throws {
        let deferred = PushResponse(refused: [Refusal(change: change(), current: nil, reason: "the remote's row for this key cannot be read",
                                                      rowUnreadable: true)])
        let sent = try JSONEncoder().encode(deferred)
        #expect(String(decoding: sent, as: UTF8.self).contains(#""rowUnreadable":true"#))
        #expect(try JSONDecoder().decode(PushResponse.self, from: sent) == deferred)
        let older = #"{"accepted":[],"refused":[{"change":{"key":"k","stamp":{"time":1,"counter":0,"device":"d"}},"reason":"quota"}]}"#
        let read = try JSONDecoder().decode(PushResponse.self, from: Data(older.utf8))
        #expect(read.refused.map(\.rowUnreadable) == [false])
    }

    // MARK: - Bearer tokens

    @Test("the Bearer scheme in any case, then one or more spaces, then a token68", arguments: [
        ("Bearer kvs_a1_b-2", "kvs_a1_b-2"), ("bearer kvs_x", "kvs_x"), ("BEARER kvs_x", "kvs_x"), ("BeArEr    kvs_x", "kvs_x"),
        ("  Bearer kvs_x \t", "kvs_x"), ("Bearer a.b~c+d/e==", "a.b~c+d/e=="),
    ])
    func bearerAccepted(header: String, token: String) {
        #expect(bearerToken(fromAuthorization: header) == token)
    }

    @Test("anything else is no bearer token", arguments: [
        "", "Bearer", "Bearer ", "Bearer    ", "Basic dXNlcjpwYXNz", "Bearerkvs_x", "Bearer\tkvs_x", "Bearer kvs x",
        "Bearer kvs_x, Bearer kvs_y", "Bearer =kvs", "Bearer kv=s", "Bearer ===", "Bearer kvs_é", "Bearer kvs\u{0}x", "Bearer kvs\r\nX: y",
        "Bearer " + String(repeating: "a", count: 513), "Bearer " + String(repeating: " ", count: 600) + "a", "Beärer kvs",
    ])
    func bearerRefused(header: String) {
        #expect(bearerToken(fromAuthorization: header) == nil)
    }

    @Test("no header is no token; a token of 512 bytes is the longest")
    func bearerBounds() {
        #expect(bearerToken(fromAuthorization: nil) == nil)
        let longest = String(repeating: "a", count: 512)
        #expect(bearerToken(fromAuthorization: "Bearer " + longest) == longest)
    }

    @Test("paths: what a client asks for matches the pattern the server routes")
    func paths() {
        for resource in WirePath.StoreResource.allCases {
            let path = WirePath.store(account: "alice", store: "default", resource)
            let pattern = WirePath.pattern(resource)
            #expect(path == pattern.replacingOccurrences(of: "{account}", with: "alice").replacingOccurrences(of: "{store}", with: "default"))
        }
        #expect(WirePath.store(account: "alice", store: "config", .events) == "/v1/alice/config/events")
    }
}
