import Foundation
import KVStore
import KVTestSupport
import Testing

/// `kvsfs set` and `get` as `defaults write` and `plutil -extract` users expect them: typed
/// members of -dict and -array, -dict-add and -array-add, and a key path into a value.
@Suite("defaults and plutil parity", .serialized)
struct DefaultsParityTests {
    /// A mount without a remote on directories of mode 0700, stopped whatever `body` does.
    private func withMount(_ body: (DaemonMount, TemporaryDirectory) throws -> Void) throws {
        let directory = TemporaryDirectory("kvsfs-parity")
        defer { directory.remove() }
        let daemon = try DaemonMount(mountpoint: try directory.privateSubdirectory("mnt"), dataDirectory: try directory.privateSubdirectory("data"),
                                     extraArguments: ["--remote", "none"])
        defer { daemon.stop() }
        try body(daemon, directory)
    }

    /// The value of the key's file, as `cat` reads it.
    private func readBack(_ path: String) throws -> PropertyListValue {
        try PropertyListCodec.decode(Array(try run("/bin/cat", [path]).standardOutput.utf8))
    }

    /// Runs kvsfs and expects it to fail with exactly `message` as its one line.
    private func expectRefusal(_ arguments: [String], _ message: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let result = try run(kvsfsBinary, arguments)
        #expect(result.status == 1, "\(result)", sourceLocation: sourceLocation)
        #expect(result.standardError == "Error: \(message)\n", "\(result)", sourceLocation: sourceLocation)
    }

    @Test("-dict and -array members typed as defaults types them; an untyped member is a string")
    func typedMembers() throws {
        try withMount { m, _ in
            let dict = try run(kvsfsBinary, ["set", m.path("server"), "-dict", "port", "-int", "8080", "name", "-string", "x",
                                             "ratio", "-float", "2.5", "on", "-boolean", "yes", "when", "-date", "2026-01-02T03:04:05Z",
                                             "blob", "-data", "AAEC", "plain", "42", "big", "-integer", "18446744073709551615"])
            #expect(dict.status == 0 && dict.standardError.isEmpty, "\(dict)")
            #expect(try readBack(m.path("server")) == .dictionary([
                "port": .integer(8080), "name": .string("x"), "ratio": .real(2.5), "on": .boolean(true),
                "when": .date(Date(timeIntervalSince1970: 1767323045)), "blob": .data(Data([0, 1, 2])), "plain": .string("42"),
                "big": .unsignedInteger(UInt64.max),
            ]))

            let array = try run(kvsfsBinary, ["set", m.path("list"), "-array", "-int", "1", "two", "-real", "2.5", "-bool", "no",
                                              "-data", "AAEC", "-string", "-int", "-5"])
            #expect(array.status == 0 && array.standardError.isEmpty, "\(array)")
            #expect(try readBack(m.path("list")) == .array([.integer(1), .string("two"), .real(2.5), .boolean(false),
                                                             .data(Data([0, 1, 2])), .string("-int"), .string("-5")]))

            // A refusal names what is wrong and writes nothing.
            try expectRefusal(["set", m.path("server"), "-dict", "port", "-int"], "-dict: -int for the key 'port' has no value")
            try expectRefusal(["set", m.path("server"), "-dict", "port", "-int", "eighty"],
                              "-int takes an integer from -9223372036854775808 to 18446744073709551615, not 'eighty'")
            try expectRefusal(["set", m.path("server"), "-dict", "port"], "-dict: the key 'port' has no value")
            try expectRefusal(["set", m.path("list"), "-array", "-interger", "3"],
                              "-array: '-interger' is no type (use -string, -int, -float, -bool, -date or -data; -string -interger for a string)")
            try expectRefusal(["set", m.path("list"), "-array", "-dict", "a", "b"], "-array holds scalars only: give a nested dict with -plist")
            #expect(try readBack(m.path("server")).type == .dictionary)
            #expect(try readBack(m.path("list")) == .array([.integer(1), .string("two"), .real(2.5), .boolean(false),
                                                             .data(Data([0, 1, 2])), .string("-int"), .string("-5")]))
        }
    }

    @Test("-dict-add and -array-add add to the key's container in one write, or create it; another type is refused")
    func additions() throws {
        try withMount { m, directory in
            let created = try run(kvsfsBinary, ["set", m.path("prefs"), "-dict-add", "port", "-int", "8080"])
            #expect(created.status == 0, "\(created)")
            #expect(try readBack(m.path("prefs")) == .dictionary(["port": .integer(8080)]))

            // One write of the whole value: the file is opened for writing and closed once.
            let events = directory.path + "/events"
            let added = try shell("""
                \(shellWatch(m.mountpoint, events: "close_write,create,delete,moved_to", into: events, seconds: 10))
                \(kvsfsBinary) set \(m.path("prefs")) -dict-add name x port -int 9090
                status=$?
                sleep 0.5; kill $watcher
                exit $status
                """)
            #expect(added.status == 0 && added.standardError.isEmpty, "\(added)")
            #expect(try String(contentsOfFile: events, encoding: .utf8) == "CLOSE_WRITE,CLOSE prefs\n")
            #expect(try readBack(m.path("prefs")) == .dictionary(["port": .integer(9090), "name": .string("x")]))

            #expect(try run(kvsfsBinary, ["set", m.path("list"), "-array", "a"]).status == 0)
            let appended = try run(kvsfsBinary, ["set", m.path("list"), "-array-add", "-int", "2", "b"])
            #expect(appended.status == 0, "\(appended)")
            #expect(try readBack(m.path("list")) == .array([.string("a"), .integer(2), .string("b")]))
            #expect(try run(kvsfsBinary, ["set", m.path("fresh"), "-array-add", "x"]).status == 0)
            #expect(try readBack(m.path("fresh")) == .array([.string("x")]))

            #expect(try run(kvsfsBinary, ["set", m.path("greeting"), "-string", "hi"]).status == 0)
            try expectRefusal(["set", m.path("greeting"), "-dict-add", "a", "b"],
                              "\(m.path("greeting")) holds a string, not a dictionary: -dict-add adds to a dictionary; nothing was written")
            try expectRefusal(["set", m.path("list"), "-dict-add", "a", "b"],
                              "\(m.path("list")) holds an array, not a dictionary: -dict-add adds to a dictionary; nothing was written")
            try expectRefusal(["set", m.path("prefs"), "-array-add", "x"],
                              "\(m.path("prefs")) holds a dictionary, not an array: -array-add adds to an array; nothing was written")
            #expect(try readBack(m.path("greeting")) == .string("hi"))
            #expect(try readBack(m.path("list")) == .array([.string("a"), .integer(2), .string("b")]))
            #expect(try readBack(m.path("prefs")) == .dictionary(["port": .integer(9090), "name": .string("x")]))

            // The path rule holds for additions: a file outside a mount is neither read nor written.
            let outside = directory.path + "/plain.plist"
            try "<dict/>".write(toFile: outside, atomically: false, encoding: .utf8)
            let refused = try run(kvsfsBinary, ["set", outside, "-dict-add", "a", "b"])
            #expect(refused.status == 1 && refused.standardError.contains("is not in a kvsfs mount"), "\(refused)")
            #expect(try String(contentsOfFile: outside, encoding: .utf8) == "<dict/>")
        }
    }

    @Test("get PATH KEYPATH prints a member, as plutil -extract; a missing member says what is there")
    func keyPaths() throws {
        try withMount { m, directory in
            let conf = m.path("conf")
            #expect(try shell(#"echo '{"servers": [{"host": "a", "port": 80}, {"host": "b", "port": 8080}]}' > "# + conf).status == 0)
            let port = try run(kvsfsBinary, ["get", conf, "servers.1.port"])
            #expect(port.status == 0 && port.standardOutput == "8080\n", "\(port)")
            #expect(try run(kvsfsBinary, ["get", conf, "servers.0.host"]).standardOutput == "a\n")
            let json = try run(kvsfsBinary, ["get", "--json", conf, "servers.1"])
            #expect(json.status == 0, "\(json)")
            #expect(try PropertyListCodec.decode(Array(json.standardOutput.utf8)) == .dictionary(["host": .string("b"), "port": .integer(8080)]))
            let servers = try run(kvsfsBinary, ["get", conf, "servers"])
            #expect(try PropertyListCodec.decode(Array(servers.standardOutput.utf8)).type == .array, "\(servers)")

            for (path, message) in [("servers.3", "no member at servers.3: servers is an array of 2 members"),
                                    ("servers.1.user", "no member at servers.1.user: servers.1 is a dictionary without the key \"user\""),
                                    ("servers.0.port.x", "no member at servers.0.port.x: servers.0.port is an integer, which has no members")] {
                let missing = try run(kvsfsBinary, ["get", conf, path])
                #expect(missing.status == 1 && missing.standardOutput.isEmpty, "\(missing)")
                #expect(missing.standardError == "Error: \(conf): \(message)\n", "\(missing)")
            }

            let outside = directory.path + "/plain.plist"
            try "<dict><key>a</key><string>b</string></dict>".write(toFile: outside, atomically: false, encoding: .utf8)
            let refused = try run(kvsfsBinary, ["get", outside, "a"])
            #expect(refused.status == 1 && refused.standardOutput.isEmpty && refused.standardError.contains("is not in a kvsfs mount"), "\(refused)")
        }
    }
}
