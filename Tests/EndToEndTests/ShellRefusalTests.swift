import Foundation
import KVTestSupport
import Testing

/// What a person at a shell sees when a value is refused, and when JSON goes in: the exit code
/// and message of the real tool, the value and the directory after, `df` after, the daemon's
/// log line and the event.
@Suite("Refusals at the shell", .serialized, .hangGuard)
struct ShellRefusalTests {
    /// One row of the table: a tool writing one input to key `k`.
    struct Row: CustomTestStringConvertible, Sendable {
        let tool: String
        let input: String
        /// The shell (`/bin/bash` or `/bin/dash`) and its script; `$K` is the key's path.
        let shell: String
        let script: String
        /// The tool's exit code.
        let status: Int32
        /// What it prints on standard error (empty: nothing).
        let says: String
        /// What `kvsfs get --json k` prints after, or nil when `k` must not exist.
        let json: String?
        var testDescription: String { "\(tool) ← \(input)" }
    }

    static let rows: [Row] = [
        Row(tool: "bash echo", input: "a JSON object", shell: "/bin/bash", script: #"echo '{"port": 8080}' > "$K""#,
            status: 0, says: "", json: "{\n  \"port\" : 8080\n}\n"),
        Row(tool: "dash echo", input: "a JSON array", shell: "/bin/dash", script: #"echo '[1, 2.5, true]' > "$K""#,
            status: 0, says: "", json: "[\n  1,\n  2.5,\n  true\n]\n"),
        Row(tool: "printf", input: "a shell script", shell: "/bin/bash", script: #"printf '#!/bin/sh\necho hi\n' > "$K""#,
            status: 1, says: "Invalid argument", json: nil),
        Row(tool: "dash echo", input: "two words", shell: "/bin/dash", script: #"echo two words > "$K""#,
            status: 1, says: "echo: I/O error", json: nil),
        Row(tool: "bash echo", input: "two words", shell: "/bin/bash", script: #"echo two words > "$K""#,
            status: 1, says: "write error: Invalid argument", json: nil),
        Row(tool: "bash echo", input: "an append", shell: "/bin/bash", script: #"echo first > "$K" && echo more >> "$K""#,
            status: 1, says: "write error: Invalid argument", json: "\"first\"\n"),
        Row(tool: "printf", input: "a control character in a bare word", shell: "/bin/bash", script: #"printf 'hello\001' > "$K""#,
            status: 1, says: "Invalid argument", json: nil),
        Row(tool: "printf", input: "a control character in a quoted string", shell: "/bin/bash", script: #"printf '"bell\\a"' > "$K""#,
            status: 0, says: "", json: "\"bell\\u0007\"\n"),
        Row(tool: "bash echo", input: "a JSON null", shell: "/bin/bash", script: #"echo '{"a": null}' > "$K""#,
            status: 1, says: "write error: Invalid argument", json: nil),
        Row(tool: "bash echo", input: "a value over the quota", shell: "/bin/bash",
            script: #"echo "\"$(head -c 5000 /dev/zero | tr '\0' x)\"" > "$K""#, status: 1, says: "File too large", json: nil),
        Row(tool: "tee", input: "two words", shell: "/bin/bash", script: #"echo two words | tee "$K" > /dev/null"#,
            status: 1, says: "Invalid argument", json: nil),
        Row(tool: "cp", input: "a JSON file", shell: "/bin/bash",
            script: #"echo '{"a": [1]}' > "$TMPFILE" && cp "$TMPFILE" "$K""#, status: 0, says: "", json: "{\n  \"a\" : [\n    1\n  ]\n}\n"),
        Row(tool: "cp", input: "a shell script", shell: "/bin/bash",
            script: #"printf '#!/bin/sh\necho hi\n' > "$TMPFILE" && cp "$TMPFILE" "$K""#, status: 1, says: "Invalid argument", json: nil),
        Row(tool: "python3", input: "two words", shell: "/bin/bash",
            script: #"/usr/bin/python3 -c 'import sys; f = open(sys.argv[1], "w"); f.write("two words"); f.close()' "$K""#,
            status: 1, says: "OSError: [Errno 22] Invalid argument", json: nil),
        Row(tool: "vim", input: "two words", shell: "/bin/bash",
            script: #"echo '"old"' > "$K" && vim -es -u NONE -c '%d' -c 'put =\"two words\"' -c 'wq' "$K""#,
            status: 1, says: "", json: "\"old\"\n"),
    ]

    @Test("tool × input: the exit code, the message, the value and the directory after", arguments: rows)
    func table(_ row: Row) throws {
        try withDaemon(extraArguments: ["--quota-value", "4096"]) { (m, dir) throws in
            let key = m.path("k")
            let before = try df(m.mountpoint)
            let result = try run(row.shell, ["-c", row.script],
                                 environment: ["K": key, "TMPFILE": dir.path + "/source", "LC_ALL": "C"])
            #expect(result.status == row.status, "\(result)")
            if row.says.isEmpty {
                #expect(result.standardError.isEmpty || row.tool == "vim", "\(result)")
            } else {
                #expect(result.standardError.contains(row.says), "\(result)")
            }
            let listing = try shell("ls -A \(m.mountpoint)")
            let value = try run(kvsfsBinary, ["get", "--json", key])
            if let json = row.json {
                #expect(listing.standardOutput == "k\n", "\(listing)")
                #expect(value.standardOutput == json, "\(value)")
                #expect(try df(m.mountpoint) > before || row.status != 0)
            } else {
                #expect(listing.standardOutput == "", "no phantom name: \(listing)")
                #expect(try df(m.mountpoint) == before, "a refused value takes no room")
            }
        }
    }

    @Test("each refusal is told: a line in the daemon's log and a refused-local-write event, with the key and the reason")
    func refusalTold() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                echo two words > k; echo "status=$?"
                timeout 2 \(kvsfsBinary) events --all \(m.mountpoint)
                """)
            #expect(result.standardOutput.contains("status=1"), "\(result)")
            #expect(result.standardOutput.contains(#""reason":"refused-local-write""#), "\(result)")
            #expect(result.standardOutput.contains(#""keys":["k"]"#), "\(result)")
            #expect(result.standardOutput.contains("EINVAL (Invalid argument): not a property list"), "\(result)")
            let log = m.logText()
            #expect(log.contains(#"refused a write to "k": EINVAL (Invalid argument): not a property list: "#), "\(log)")
        }
    }

    @Test("an import refused naming a key is told as a write would be: the daemon's log and a refused-local-write event")
    func importRefusalTold() throws {
        try withDaemon(extraArguments: ["--quota-value", "200"]) { (m, dir) throws in
            let result = try shell("""
                printf '{"small": 1, "big": "%s"}' "$(head -c 400 /dev/zero | tr '\\0' x)" > \(dir.path)/import.json
                \(kvsfsBinary) import \(m.mountpoint) \(dir.path)/import.json; echo "status=$?"
                timeout 2 \(kvsfsBinary) events --all \(m.mountpoint)
                """)
            #expect(result.standardOutput.contains("status=1"), "\(result)")
            #expect(result.standardOutput.contains(#""reason":"refused-local-write""#), "\(result)")
            #expect(result.standardOutput.contains(#""keys":["big"]"#), "\(result)")
            #expect(m.logText().contains(#"refused a write to "big": EFBIG"#), "\(m.logText())")
        }
    }

    @Test("a value holding a control character reads back equal through Python's plistlib")
    func controlCharacterThroughPlistlib() throws {
        try withDaemon { (m, _) throws in
            let result = try shell("""
                cd \(m.mountpoint)
                printf '{ s = "nul\\\\000 bell\\\\a cr\\\\r"; }' > k; echo "status=$?"
                /usr/bin/python3 -c 'import plistlib, sys; print(plistlib.load(open(sys.argv[1], "rb")) == {"s": "nul\\x00 bell\\x07 cr\\r"})' k
                """)
            #expect(result.standardOutput == "status=0\nTrue\n", "\(result)")
        }
    }

    /// The bytes `df` says are used on the mount.
    private func df(_ mountpoint: String) throws -> Int {
        let result = try run("/bin/df", ["-B1", "--output=used", mountpoint])
        return try #require(Int(result.standardOutput.split(separator: "\n").last?.trimmingCharacters(in: .whitespaces) ?? ""), "\(result)")
    }
}
