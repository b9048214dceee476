import Foundation
import KVTestSupport
import Testing

/// A store's schema as people meet it: set on one mount, enforced at every door of every
/// mount (a shell's write, `kvsfs set`, an import, a push to the remote), told in the log and
/// the event log, shown in attributes, status, completion and defaults; values set before it
/// stay and are listed.
@Suite("Store schemas end to end", .serialized, .hangGuard)
struct SchemaTests {
    static let schema = """
        {"keys": {
           "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 8080,
                    "description": "The port the service listens on."},
           "mode": {"type": "string", "choices": ["fast", "safe"], "default": "safe"},
           "host": {"type": "string", "pattern": "[a-z0-9.-]+", "maxLength": 20},
           "limits": {"type": "dictionary", "required": ["cpu"],
                      "members": {"cpu": {"type": "integer", "minimum": 1}}},
           "peers": {"type": "array", "maxLength": 2, "items": {"type": "string"}}},
         "patterns": {"feature.*": {"type": "boolean"}}}
        """

    /// Mounts A and B of one store on one file remote.
    private func withTwoMounts(_ body: (DaemonMount, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-schema")
        defer { dir.remove() }
        let remote = "file://\(dir.subdirectory("cloud"))/cloud.sqlite"
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: ["--remote", remote])
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: ["--remote", remote])
        defer { b.stop() }
        try body(a, b, dir)
    }

    private func writeSchema(in dir: TemporaryDirectory) throws -> String {
        let path = dir.path + "/schema.json"
        try Data(Self.schema.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("set on A: A's doors refuse what breaks it with the rule, conforming values pass, and B enforces it after one round")
    func enforcedEverywhere() throws {
        try withTwoMounts { (a, b, dir) throws in
            let schema = try writeSchema(in: dir)
            let before = try run(kvsfsBinary, ["set", a.path("port"), "-int", "70000"])
            #expect(before.status == 0, "a value set before the schema: \(before)")

            let set = try run(kvsfsBinary, ["schema", "set", a.mountpoint, schema])
            #expect(set.status == 0, "\(set)")
            #expect(set.standardOutput == "the store's schema is now version 1; 1 of 1 keys hold values that break it (kvsfs schema check lists them)\n", "\(set)")

            // Each rule kind, at a shell (bash and dash) and through kvsfs set; the value stays.
            let shells = try shell("""
                cd \(a.mountpoint)
                bash -c 'echo 8080 > port'; echo "text-as-integer=$?"
                dash -c 'echo "<integer>0</integer>" > port'; echo "below-minimum=$?"
                bash -c 'echo "<string>turbo</string>" > mode'; echo "not-a-choice=$?"
                bash -c 'echo slow > mode'; echo "bare-not-a-choice=$?"
                dash -c 'echo slow > mode'; echo "dash-bare-not-a-choice=$?"
                dash -c 'echo fast > mode'; echo "bare-choice=$?"
                bash -c 'echo "<string>DB_1</string>" > host'; echo "pattern=$?"
                dash -c "echo '{\\"memory\\": 1}' > limits"; echo "required=$?"
                dash -c "echo '{\\"cpu\\": 0}' > limits"; echo "member-minimum=$?"
                dash -c "echo '[\\"a\\", \\"b\\", \\"c\\"]' > peers"; echo "max-length=$?"
                bash -c 'echo "<true/>" > feature.dark'; echo "pattern-conforming=$?"
                bash -c 'echo "<integer>8080</integer>" > port'; echo "conforming=$?"
                \(kvsfsBinary) set port -int 99999; echo "set-maximum=$?"
                \(kvsfsBinary) set feature.x -int 1; echo "set-type=$?"
                \(kvsfsBinary) get port
                """)
            for line in ["text-as-integer=1", "below-minimum=1", "not-a-choice=1", "bare-not-a-choice=1", "dash-bare-not-a-choice=1", "bare-choice=0", "pattern=1", "required=1", "member-minimum=1",
                         "max-length=1", "pattern-conforming=0", "conforming=0", "set-maximum=1", "set-type=1", "8080"] {
                #expect(shells.standardOutput.contains(line + "\n"), "\(line) in \(shells)")
            }
            #expect(shells.standardError.contains("Invalid argument"), "\(shells)")
            #expect(shells.standardError.contains(#""port": an integer breaks the rule maximum 65535: it is 99999"#), "\(shells)")
            #expect(shells.standardError.contains(#""feature.x": an integer breaks the rule type boolean: it is an integer"#), "\(shells)")
            let log = a.logText()
            #expect(log.contains(#"refused a write to "mode": EINVAL (Invalid argument): "mode": a string breaks the rule choices: it is none of "fast", "safe""#), "\(log)")
            #expect(log.contains(#"refused a write to "limits": EINVAL (Invalid argument): "limits": a dictionary breaks the rule required: it has no member "cpu""#), "\(log)")
            let events = try run("/usr/bin/timeout", ["2", kvsfsBinary, "events", "--all", a.mountpoint])
            #expect(events.standardOutput.contains(#""reason":"schema-change""#), "\(events)")
            #expect(events.standardOutput.contains(#"\"host\": a string breaks the rule pattern"#), "\(events)")

            // An import is all or nothing, naming the key and the rule.
            let imported = try shell("""
                echo '{"mode": "fast", "peers": ["a", 1]}' > \(dir.path)/import.json
                \(kvsfsBinary) import \(a.mountpoint) \(dir.path)/import.json; echo "import=$?"
                """)
            #expect(imported.standardOutput.contains("import=1"), "\(imported)")
            #expect(imported.standardError.contains(#""peers" at member 1: an integer breaks the rule type string: it is an integer"#), "\(imported)")

            // B holds the schema after one round, and refuses as A does.
            let synced = try run(kvsfsBinary, ["sync", b.mountpoint])
            #expect(synced.status == 0, "\(synced)")
            let onB = try run(kvsfsBinary, ["set", b.path("mode"), "-string", "turbo"])
            #expect(onB.status == 1, "\(onB)")
            #expect(onB.standardError.contains(#""mode": a string breaks the rule choices"#), "\(onB)")
            let status = try run(kvsfsBinary, ["status", b.mountpoint])
            #expect(status.standardOutput.contains("schema:         version 1, 0 keys not conforming\n"), "port was set again, conforming: \(status)")
            let bEvents = try run("/usr/bin/timeout", ["2", kvsfsBinary, "events", "--all", b.mountpoint])
            #expect(bEvents.standardOutput.contains(#""message":"the store's schema is now version 1: "#), "\(bEvents)")
            #expect(bEvents.standardOutput.contains(#""reason":"schema-change""#), "\(bEvents)")
        }
    }

    @Test("values set before a schema stay, and check, show, status, attributes, describe, defaults and completion say what it says")
    func reported() throws {
        try withTwoMounts { (a, b, dir) throws in
            let schema = try writeSchema(in: dir)
            _ = try run(kvsfsBinary, ["set", a.path("port"), "-int", "0"])
            _ = try run(kvsfsBinary, ["set", a.path("host"), "-string", "UPPER"])
            _ = try run(kvsfsBinary, ["set", a.path("note"), "-string", "free"])
            let proposed = try run(kvsfsBinary, ["schema", "check", a.mountpoint, schema])
            #expect(proposed.status == 1, "\(proposed)")
            #expect(proposed.standardOutput == """
                "host": a string breaks the rule pattern "[a-z0-9.-]+"
                "port": an integer breaks the rule minimum 1: it is 0

                """, "\(proposed)")
            #expect(proposed.standardError.contains("2 of 3 keys break the schema in \(schema)"), "\(proposed)")

            #expect(try run(kvsfsBinary, ["schema", "set", a.mountpoint, schema]).status == 0)
            #expect(try run(kvsfsBinary, ["sync", b.mountpoint]).status == 0)
            let check = try run(kvsfsBinary, ["schema", "check", b.mountpoint])
            #expect(check.status == 1 && check.standardOutput.split(separator: "\n").count == 2, "\(check)")
            let show = try run(kvsfsBinary, ["schema", "show", b.mountpoint])
            #expect(show.standardOutput == Self.schema, "\(show)")
            #expect(try String(contentsOfFile: b.path("port"), encoding: .utf8).contains("<integer>0</integer>"), "the value stays")

            let describe = try run(kvsfsBinary, ["get", "--describe", b.path("port")])
            #expect(describe.standardOutput == "type integer, minimum 1, maximum 65535, default 8080\nThe port the service listens on.\n", "\(describe)")
            let attribute = try shell("getfattr --only-values -n user.kvsfs.schema \(b.path("feature.x")) 2>&1; getfattr --only-values -n user.kvsfs.schema \(b.path("host"))")
            #expect(attribute.standardOutput.hasSuffix(#"type string, maxLength 20, pattern "[a-z0-9.-]+""#), "\(attribute)")

            // The schema's default shows for a key with no value, on both mounts.
            let defaults = try shell("cat \(b.path("mode")) && getfattr --only-values -n user.kvsfs.sync \(b.path("mode"))")
            #expect(defaults.standardOutput.contains("<string>safe</string>") && defaults.standardOutput.hasSuffix("default"), "\(defaults)")

            // Completion offers the key's choices.
            let completion = try run(kvsfsBinary, ["---completion", "set", "--", "-string", "4", "0", "kvsfs", "set", b.path("mode"), "-string", ""])
            #expect(completion.standardOutput.split(separator: "\n") == ["fast", "safe"], "\(completion)")

            // A mount that first syncs now fetches the values set before the schema: it takes
            // them, as the remote keeps them, and tells of each in a schema-violation event.
            let c = try DaemonMount(mountpoint: dir.subdirectory("c"), dataDirectory: dir.subdirectory("data-c"),
                                    extraArguments: ["--remote", "file://\(dir.path)/cloud/cloud.sqlite"])
            defer { c.stop() }
            #expect(try run(kvsfsBinary, ["sync", c.mountpoint]).status == 0)
            #expect(try String(contentsOfFile: c.path("port"), encoding: .utf8).contains("<integer>0</integer>"))
            let cEvents = try run("/usr/bin/timeout", ["2", kvsfsBinary, "events", "--all", c.mountpoint])
            #expect(cEvents.standardOutput.contains(#""keys":["host","port"]"#), "\(cEvents)")
            #expect(cEvents.standardOutput.contains(#"\"host\": a string breaks the rule pattern"#), "\(cEvents)")
            #expect(cEvents.standardOutput.contains(#""reason":"schema-violation""#), "\(cEvents)")
            #expect(c.logText().contains("changes from the remote hold values that break the store's schema"), "\(c.logText())")

            // Removed: nothing is checked, and the file's defaults (none here) take over.
            let removed = try run(kvsfsBinary, ["schema", "set", "--remove", a.mountpoint])
            #expect(removed.standardOutput == "the store's schema is removed (version 2)\n", "\(removed)")
            #expect(try run(kvsfsBinary, ["set", a.path("port"), "-string", "any"]).status == 0)
            #expect(!FileManager.default.fileExists(atPath: a.path("mode")))
        }
    }

    @Test("completion offers only the choices a shell takes as they are: a choice holding $(...) runs nothing")
    func completionOffersPlainChoices() throws {
        try withTwoMounts { (a, _, dir) throws in
            let marker = dir.path + "/ran"
            let schema = dir.path + "/hostile.json"
            try Data(#"{"keys": {"mode": {"type": "string", "choices": ["ok", "$(touch \#(marker))", "a b", "line\\nbreak", ""]}}}"#.utf8)
                .write(to: URL(fileURLWithPath: schema))
            #expect(try run(kvsfsBinary, ["schema", "set", a.mountpoint, schema]).status == 0)
            // What the completion scripts run, and hand to compgen -W.
            let completion = try run(kvsfsBinary, ["---completion", "set", "--", "-string", "4", "0", "kvsfs", "set", a.path("mode"), "-string", ""])
            #expect(completion.standardOutput == "ok\n", "\(completion)")
            #expect(!FileManager.default.fileExists(atPath: marker), "the choice ran a command")
        }
    }

    @Test("a push that breaks the schema is refused by a server with the rule, and the writer rolls back", arguments: ServerBackend.allCases)
    func refusedByServer(backend: ServerBackend) throws {
        try withTestServer(backend) { fixture in
            let writer = try fixture.mount("writer")
            defer { writer.stop() }
            // Set on the server's database by its administrator: the writer has not fetched it.
            let schema = try writeSchema(in: fixture.directory)
            let set = try fixture.server.admin(["account", "schema", "alice/default", schema])
            #expect(set.contains("version 1"), "\(set)")
            let wrote = try run(kvsfsBinary, ["set", writer.path("feature.dark"), "-string", "yes"])
            // Refused here at once if the writer's round fetched the schema first; else by the server.
            if wrote.status == 0 {
                #expect(eventually { !FileManager.default.fileExists(atPath: writer.path("feature.dark")) }, "rolled back")
                let events = try run("/usr/bin/timeout", ["2", kvsfsBinary, "events", "--all", writer.mountpoint])
                #expect(events.standardOutput.contains(#""feature.dark\": a string breaks the rule type boolean"#), "\(events)")
            } else {
                #expect(wrote.standardError.contains(#""feature.dark": a string breaks the rule type boolean"#), "\(wrote)")
            }
            // Either way the writer now holds the schema, and a conforming value travels.
            #expect(try run(kvsfsBinary, ["sync", writer.mountpoint]).status == 0)
            #expect(try run(kvsfsBinary, ["set", writer.path("feature.dark"), "-bool", "true"]).status == 0)
            let reader = try fixture.mount("reader")
            defer { reader.stop() }
            #expect(eventually { (try? String(contentsOfFile: reader.path("feature.dark"), encoding: .utf8))?.contains("<true/>") == true })
            #expect(try run(kvsfsBinary, ["set", reader.path("port"), "-int", "0"]).status == 1)
        }
    }
}
