import Foundation
import KVTestSupport
import Testing

@Suite("Property lists through the kvsfs command and a mount", .serialized)
struct PropertyListCommandTests {
    @Test("set -int takes the whole property-list range, up to UInt64.max")
    func unsignedIntegers() throws {
        try withDaemon { (m, _) throws in
            for text in ["18446744073709551615", "9223372036854775808", "-9223372036854775808"] {
                // A negative number goes after '=', or the argument parser takes it for an option.
                let set = try run(kvsfsBinary, ["set", m.path("k"), "-int=\(text)"])
                #expect(set.status == 0, "\(set)")
                #expect(try run(kvsfsBinary, ["get", m.path("k")]).standardOutput == text + "\n")
                let attribute = try run("/usr/bin/getfattr", ["--only-values", "-n", "user.kvsfs.type", m.path("k")])
                #expect(attribute.standardOutput == "integer")
            }
            #expect(try String(contentsOfFile: m.path("k"), encoding: .utf8).contains("<integer>-9223372036854775808</integer>"))
            for text in ["18446744073709551616", "-9223372036854775809"] {
                #expect(try run(kvsfsBinary, ["set", m.path("k"), "-int=\(text)"]).status != 0, "\(text)")
            }
        }
    }

    @Test("hostile property lists copied into a mount are refused with EINVAL or EFBIG, and the mount lives on")
    func hostileFilesInAMount() throws {
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Corpus/plist").path
        try withDaemon { (m, _) throws in
            for (name, message) in [("hostile-date-nan.binary.plist", "Invalid argument"), ("hostile-date-infinity.binary.plist", "Invalid argument"),
                                    ("hostile-reference-bomb.binary.plist", "File too large"), ("hostile-int128-2p100.binary.plist", "Invalid argument")] {
                let start = Date()
                let copy = try run("/bin/cp", ["\(corpus)/\(name)", m.path("k")])
                #expect(copy.status != 0 && copy.standardError.contains(message), "\(name): \(copy)")
                #expect(Date().timeIntervalSince(start) < 5, "\(name)")
            }
            let copy = try run("/bin/cp", ["\(corpus)/uint64-max.binary.plist", m.path("big")])
            #expect(copy.status == 0, "\(copy)")
            #expect(try run(kvsfsBinary, ["get", m.path("big")]).standardOutput == "18446744073709551615\n")
        }
    }
}
