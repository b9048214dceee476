import Foundation
import KVStore
import KVTestSupport
import Testing

/// Files, names and pushes made to break kvsfs: each is refused with a clear errno or status,
/// changes nothing, and leaves the daemon and the server running.
@Suite("Hostile input", .serialized)
struct HostileInputTests {
    /// A binary property list (`bplist00`) of `objects` (each already encoded), the last one on
    /// top, with one-byte offsets and references.
    static func binaryPlist(_ objects: [[UInt8]]) -> [UInt8] {
        var bytes = Array("bplist00".utf8)
        var offsets = [UInt8]()
        for object in objects {
            offsets.append(UInt8(bytes.count))
            bytes += object
        }
        let table = bytes.count
        bytes += offsets
        bytes += [0, 0, 0, 0, 0, 0, 1, 1]
        bytes += bigEndian(UInt64(objects.count)) + bigEndian(UInt64(objects.count - 1)) + bigEndian(UInt64(table))
        return bytes
    }

    static func bigEndian(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }

    /// A date of `seconds` since 2001 in the 57-byte form that killed the mount.
    static func binaryDate(_ seconds: Double) -> [UInt8] {
        Array("bplist00".utf8) + [0x33] + bigEndian(seconds.bitPattern) + bigEndian(8) + [0, 0, 0, 0, 0, 0, 8, 4]
            + bigEndian(1) + bigEndian(0) + bigEndian(17)
    }

    /// `levels` arrays, each referencing the one below twice: 2^levels strings once expanded.
    static func referenceBomb(levels: Int) -> [UInt8] {
        binaryPlist([[0x51, UInt8(ascii: "x")]] + (0..<levels).map { [0xA2, UInt8($0), UInt8($0)] })
    }

    static let xmlHeader = #"<?xml version="1.0" encoding="UTF-8"?><plist version="1.0">"#

    @Test("hostile values are refused with EINVAL or EFBIG, change nothing, and the daemon lives")
    func hostileValues() throws {
        let refused: [(String, [UInt8], String)] = [
            ("a binary date of NaN", Self.binaryDate(.nan), "Invalid argument"),
            ("a binary date of +inf", Self.binaryDate(.infinity), "Invalid argument"),
            ("a binary date of 1e300", Self.binaryDate(1e300), "Invalid argument"),
            ("a binary date of 1e18", Self.binaryDate(1e18), "Invalid argument"),
            ("a 128-bit integer of 2^100", Self.binaryPlist([[0x14] + Self.bigEndian(1 << 36) + Self.bigEndian(0)]), "Invalid argument"),
            ("data that is not base64", Array((Self.xmlHeader + "<data>!!!***</data></plist>").utf8), "Invalid argument"),
            ("a date that is no date", Array((Self.xmlHeader + "<date>2020-13-45T99:99:99Z</date></plist>").utf8), "Invalid argument"),
            ("an integer past 2^64-1", Array((Self.xmlHeader + "<integer>18446744073709551616</integer></plist>").utf8), "Invalid argument"),
            ("20 levels of shared references", Self.referenceBomb(levels: 20), "File too large"),
        ]
        try withDaemon { (m, dir) throws in
            _ = try shell("echo before > \(m.path("k"))")
            let usedBefore = try shell("df -B1 --output=used \(m.mountpoint) | tail -1").standardOutput
            for (name, bytes, message) in refused {
                try Data(bytes).write(to: URL(fileURLWithPath: dir.path + "/value"))
                let started = Date()
                let result = try shell("cp \(dir.path)/value \(m.path("k")); echo \"cp=$?\"; \(kvsfsBinary) get \(m.path("k"))", timeout: 30)
                #expect(result.standardOutput.contains("cp=1"), "\(name): \(result)")
                #expect(result.standardError.contains(message), "\(name): \(result)")
                #expect(result.standardOutput.hasSuffix("before\n"), "\(name): the value is unchanged: \(result)")
                // A decoding that grew with what the value expands to would take minutes; the
                // bound leaves room for cp and kvsfs get starting on a machine the whole suite
                // loads (a value of a few bytes once took 7 s there).
                #expect(Date().timeIntervalSince(started) < 20, "\(name): refused at once")
                #expect(m.process.isRunning, "\(name): the daemon is alive")
            }
            #expect(try shell("df -B1 --output=used \(m.mountpoint) | tail -1").standardOutput == usedBefore)
        }
    }

    @Test("while a hostile value is refused, other readers are not held up")
    func refusalHoldsNoLock() throws {
        try withDaemon { (m, dir) throws in
            try Data(Self.referenceBomb(levels: 30)).write(to: URL(fileURLWithPath: dir.path + "/bomb"))
            let result = try shell("""
                echo other > \(m.path("other"))
                ( for i in 1 2 3 4 5; do cp \(dir.path)/bomb \(m.path("k")) 2>/dev/null; done ) &
                start=$(date +%s%N)
                for i in $(seq 50); do cat \(m.path("other")) > /dev/null || exit 9; done
                echo "reads_ms=$(( ($(date +%s%N) - start) / 1000000 ))"
                wait
                """, timeout: 60)
            let ms = Int(result.standardOutput.split(separator: "=").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? .max
            #expect(ms < 3000, "\(result)")
            #expect(m.process.isRunning)
        }
    }

    @Test("valid property lists that other tools write are accepted: integers up to 2^64-1, empty and comment-only keys")
    func validEdgeValues() throws {
        try withDaemon { (m, dir) throws in
            let files: [(String, [UInt8])] = [
                ("xml", Array((Self.xmlHeader + "<integer>18446744073709551615</integer></plist>").utf8)),
                ("binary", Self.binaryPlist([[0x14] + Self.bigEndian(0) + Self.bigEndian(.max)])),
                ("empty", Array((Self.xmlHeader + "<dict><key></key><string>e</string></dict></plist>").utf8)),
                ("comment", Array((Self.xmlHeader + "<dict><key><!-- c --></key><string>c</string><key>k</key><true/></dict></plist>").utf8)),
            ]
            for (name, bytes) in files { try Data(bytes).write(to: URL(fileURLWithPath: dir.path + "/" + name)) }
            let result = try shell("""
                cd \(m.mountpoint)
                for f in xml binary empty comment; do cp \(dir.path)/$f $f; echo "$f=$?"; done
                \(kvsfsBinary) get xml; \(kvsfsBinary) get binary
                grep -c '<key></key>' empty comment
                """)
            #expect(result.standardOutput.contains("xml=0\nbinary=0\nempty=0\ncomment=0\n"), "\(result)")
            #expect(result.standardOutput.contains("18446744073709551615\n18446744073709551615\n"), "\(result)")
            #expect(result.standardOutput.hasSuffix("empty:1\ncomment:1\n"), "\(result)")
        }
    }

    @Test("one rule for names: bytes that are not UTF-8 are EINVAL, and the two spellings of café are one key")
    func names() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo ff > $'\\xff'; echo "ff=$?"
                echo fe > $'\\xfe'; echo "fe=$?"
                echo nfc > $'caf\\xc3\\xa9'
                echo nfd > $'cafe\\xcc\\x81'
                ls | od -An -c | tr -s ' '
                echo "files=$(ls | wc -l)"
                cat $'caf\\xc3\\xa9' | grep -o nfd
                df --output=iused . | tail -1 | tr -d ' '
                """)
            #expect(result.standardOutput.contains("ff=1\nfe=1\n"), "\(result)")
            #expect(result.standardError.contains("Invalid argument"), "\(result)")
            #expect(result.standardOutput.contains("files=1\n"), "\(result)")
            #expect(result.standardOutput.contains(" c a f 303 251 \\n"), "listed in NFC: \(result)")
            #expect(result.standardOutput.hasSuffix("nfd\n1\n"), "\(result)")
        }
    }

    // MARK: - The server

    /// A server with account alice and one mount of alice's store `default`.
    private func withServer(_ backend: ServerBackend,
                            _ body: (ServerProcess, String, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        try withTestServer(backend, label: "kvsfs-hostile") { fixture in
            let mount = try fixture.mount("a")
            defer { mount.stop() }
            try body(fixture.server, fixture.token, mount, fixture.directory)
        }
    }

    /// POSTs `changes` (JSON objects) to alice's `default` store; returns the body and the status.
    private func push(_ changes: [String], to server: ServerProcess, token: String, dir: TemporaryDirectory) throws -> (body: String, status: String) {
        try #"{"changes":[\#(changes.joined(separator: ","))]}"#.write(toFile: dir.path + "/push.json", atomically: true, encoding: .utf8)
        let output = try shell("""
            curl -s -w '\\n%{http_code}' -X POST -H 'Authorization: Bearer \(token)' -H 'Content-Type: application/json' \
                --data-binary @\(dir.path)/push.json \(server.url)/v1/alice/default/changes
            """).standardOutput
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        return (lines.dropLast().joined(separator: "\n"), String(lines.last ?? ""))
    }

    private static func change(_ key: String, _ text: String, time: Int64, counter: Int64 = 0) -> String {
        let xml = try! PropertyListCodec.encodeXML(.string(text))
        return #"{"key":"\#(key)","value":"\#(Data(xml).base64EncodedString())","type":"string","stamp":{"time":\#(time),"counter":\#(counter),"device":"curl"}}"#
    }

    private func cursor(_ server: ServerProcess, _ token: String) throws -> String {
        try shell("curl -s -H 'Authorization: Bearer \(token)' \(server.url)/v1/alice/default/cursor").standardOutput
    }

    @Test("stamps from a push are never trusted: out of range or too far ahead is refused with its reason, and mounts keep working",
          arguments: ServerBackend.allCases)
    func hostileStamps(backend: ServerBackend) throws {
        try withServer(backend) { (server, token, mount, dir) throws in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let tenYears: Int64 = 10 * 365 * 86_400_000
            let before = try cursor(server, token)
            let hostile = try push([
                Self.change("pinned", "2^62", time: 1 << 62, counter: Int64(Int32.max)),
                Self.change("future", "2036", time: now + tenYears),
                Self.change("min", "Int64.min", time: .min),
            ], to: server, token: token, dir: dir)
            #expect(hostile.status == "200", "\(hostile)")
            #expect(hostile.body.contains("invalid change stamp") && hostile.body.contains("ahead"), "\(hostile.body)")
            #expect(try cursor(server, token) == before, "nothing was stored")
            #expect(try shell("curl -s -o /dev/null -w '%{http_code}' \(server.url)/health").standardOutput == "200", "the server lives")
            let result = try shell("""
                echo mine > \(mount.path("k")); \(kvsfsBinary) sync \(mount.mountpoint); echo "sync=$?"
                echo again > \(mount.path("k")); echo "write=$?"
                date -u -r \(mount.path("k")) +%Y
                """)
            #expect(result.standardOutput.contains("sync=0\nwrite=0\n"), "\(result)")
            #expect(result.standardOutput.hasSuffix("\(Calendar(identifier: .gregorian).component(.year, from: Date()))\n"), "\(result)")
            #expect(mount.process.isRunning)
        }
    }

    @Test("the server counts what it stores: NFC and NFD pushes are one key each, tombstones count as no key",
          arguments: ServerBackend.allCases)
    func keysAndTombstones(backend: ServerBackend) throws {
        try withServer(backend) { (server, token, mount, dir) throws in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            var pairs = [String]()
            for index in 0..<300 {
                pairs.append(Self.change("caf\u{E9}\(index)", "nfc", time: now))
                pairs.append(Self.change("cafe\u{301}\(index)", "nfd", time: now + 1))
            }
            #expect(try push(pairs, to: server, token: token, dir: dir).status == "200")
            let afterPairs = try cursor(server, token)
            let tombstones = (0..<500).map { #"{"key":"never-\#($0)","stamp":{"time":\#(now),"counter":0,"device":"curl"}}"# }
            #expect(try push(tombstones, to: server, token: token, dir: dir).status == "200")
            let afterTombstones = try cursor(server, token)
            #expect(Int(afterTombstones.filter(\.isNumber)) == Int(afterPairs.filter(\.isNumber)).map { $0 + 500 },
                    "a deletion is stored, even of a key the server does not hold: \(afterPairs) then \(afterTombstones)")
            let result = try shell("""
                \(kvsfsBinary) sync \(mount.mountpoint) || exit 9
                echo "files=$(ls \(mount.mountpoint) | wc -l)"
                df --output=iused \(mount.mountpoint) | tail -1 | tr -d ' '
                """)
            #expect(result.standardOutput.hasSuffix("files=300\n300\n"), "\(result)")
        }
    }

    @Test("a value pushed out of the value rule is refused with 400 and a reason; one over the value quota is refused alone",
          arguments: ServerBackend.allCases)
    func hostileValuesPushed(backend: ServerBackend) throws {
        try withServer(backend) { (server, token, _, dir) throws in
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let before = try cursor(server, token)
            for (name, bytes) in [("bomb", Self.referenceBomb(levels: 18)), ("nan date", Self.binaryDate(.nan))] {
                let value = Data(bytes).base64EncodedString()
                let type = name == "bomb" ? "array" : "date"
                let result = try push([#"{"key":"k","value":"\#(value)","type":"\#(type)","stamp":{"time":\#(now),"counter":0,"device":"curl"}}"#],
                                      to: server, token: token, dir: dir)
                if name == "bomb" {
                    // It would decode past the per-value quota: that change alone is refused, as
                    // any value over the quota is.
                    #expect(result.status == "200" && result.body.contains(#""refused":[{"#), "\(name): \(result)")
                    #expect(result.body.contains("exceeds the per-value limit") || result.body.contains("more than their allowance"),
                            "\(name): \(result)")
                } else {
                    #expect(result.status == "400", "\(name): \(result)")
                    #expect(result.body.contains("not a property list"), "\(name): \(result)")
                }
            }
            #expect(try cursor(server, token) == before)
        }
    }
}
