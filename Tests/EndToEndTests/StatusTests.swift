import Foundation
import KVTestSupport
import Testing

/// `kvsfs status` and the root's attributes that hold the same facts, on real mounts: with a
/// file remote, with none, and with a server nothing answers for.
@Suite("kvsfs status and the root's attributes", .serialized)
struct StatusTests {
    /// `kvsfs status --json` of `mountpoint`, parsed.
    private func statusJSON(_ mountpoint: String) throws -> [String: Any] {
        let result = try run(kvsfsBinary, ["status", "--json", mountpoint])
        #expect(result.status == 0, "\(result)")
        #expect(result.standardOutput.split(separator: "\n").count == 1, "one line: \(result)")
        return try #require(try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any], "\(result)")
    }

    /// What `getfattr -d` prints of the root, as name to value (quotes taken off).
    private func dumpedAttributes(_ mountpoint: String) throws -> [String: String] {
        let result = try run("/usr/bin/getfattr", ["-d", "--absolute-names", mountpoint])
        #expect(result.status == 0, "\(result)")
        var attributes = [String: String]()
        for line in result.standardOutput.split(separator: "\n") where line.hasPrefix("user.") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            attributes[String(line[..<equals])] = String(line[line.index(after: equals)...].dropFirst().dropLast())
        }
        return attributes
    }

    @Test("with a file remote: status prints every fact, --json gives them as fields, getfattr -d shows them on the root")
    func fileRemote() throws {
        try withDaemon { (daemon, _) throws in
            let data = daemon.dataDirectory
            let written = try shell("""
                echo hello > \(daemon.path("greeting")) && \(kvsfsBinary) sync \(daemon.mountpoint) || exit 1
                wc -c < \(daemon.path("greeting"))
                """)
            #expect(written.status == 0, "\(written)")
            let valueBytes = try #require(Int(written.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)))

            let text = try run(kvsfsBinary, ["status", daemon.mountpoint])
            #expect(text.status == 0, "\(text)")
            let lines = text.standardOutput.split(separator: "\n").map { $0.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) } }
            let shown = Dictionary(lines.map { ($0[0], $0.count > 1 ? $0[1] : "") }, uniquingKeysWith: { $1 })
            #expect(shown["store"] == "default", "\(text)")
            #expect(shown["data directory"] == data)
            #expect(shown["database"] == "\(data)/default.sqlite")
            #expect(shown["remote"] == "file://\(data)/cloud.sqlite")
            #expect(shown["reachable"] == "reachable")
            #expect(shown["last sync"]?.hasPrefix("20") == true && shown["last sync"]?.hasSuffix("Z") == true, "\(text)")
            #expect(shown["pending"] == "0 changes")
            #expect(shown["bytes"] == "\(valueBytes) of 1048576 used")
            #expect(shown["keys"] == "1 of 1024 used")
            #expect(shown["value limit"] == "1048576 bytes")
            #expect(shown["key-name limit"] == "64 bytes")
            #expect(shown["event log"]?.hasPrefix("\(data)/default.events.jsonl (last cursor ") == true, "\(text)")
            #expect(shown["conflicts"] == "0 open")

            let json = try statusJSON(daemon.mountpoint)
            #expect(json["store"] as? String == "default")
            #expect(json["dataDirectory"] as? String == data)
            #expect(json["database"] as? String == "\(data)/default.sqlite")
            #expect(json["remote"] as? String == "file://\(data)/cloud.sqlite")
            #expect(json["reachable"] as? String == "reachable")
            #expect(json["offlineReason"] is NSNull)
            let lastSync = try #require(json["lastSync"] as? String)
            let synced = try #require(ISO8601DateFormatter().date(from: lastSync), "ISO 8601 in UTC: \(lastSync)")
            #expect(abs(synced.timeIntervalSinceNow) < 60)
            #expect(json["pending"] as? Int == 0)
            #expect(json["conflicts"] as? Int == 0)
            #expect((json["bytes"] as? [String: Int]) == ["used": valueBytes, "quota": 1_048_576])
            #expect((json["keys"] as? [String: Int]) == ["used": 1, "quota": 1024])
            #expect(json["valueLimit"] as? Int == 1_048_576)
            #expect(json["keyNameLimit"] as? Int == 64)
            #expect(json["eventLog"] as? String == "\(data)/default.events.jsonl")
            #expect(json["eventCursor"] is Int)
            #expect(json["remoteCursor"] is Int, "where the mount stands in the remote's history")
            #expect(json["conflictBytes"] as? Int == 0)
            #expect(json.keys.sorted() == ["bytes", "conflictBytes", "conflicts", "dataDirectory", "database", "eventCursor", "eventLog", "keyNameLimit", "keys",
                                           "lastSync", "nonConforming", "offlineReason", "pending", "reachable", "remote", "remoteCursor", "schemaVersion", "store",
                                           "valueLimit"],
                    "every documented field, and only those")

            let attributes = try dumpedAttributes(daemon.mountpoint)
            #expect(attributes["user.kvsfs.store"] == "default", "\(attributes)")
            #expect(attributes["user.kvsfs.data-directory"] == data)
            #expect(attributes["user.kvsfs.database"] == "\(data)/default.sqlite")
            #expect(attributes["user.kvsfs.remote"] == "file://\(data)/cloud.sqlite")
            #expect(attributes["user.kvsfs.reachable"] == "reachable")
            #expect(attributes["user.kvsfs.last-sync"] == lastSync)
            #expect(attributes["user.kvsfs.pending"] == "0")
            #expect(attributes["user.kvsfs.bytes"] == "\(valueBytes)/1048576")
            #expect(attributes["user.kvsfs.keys"] == "1/1024")
            #expect(attributes["user.kvsfs.value-limit"] == "1048576")
            #expect(attributes["user.kvsfs.key-name-limit"] == "64")
            #expect(attributes["user.kvsfs.schema-version"] == "0")
            #expect(attributes["user.kvsfs.nonconforming"] == "0")
            #expect(attributes["user.kvsfs.sync"] == "synced")
            #expect(attributes["user.kvsfs.events"] == "\(data)/default.events.jsonl")
            #expect(attributes["user.kvsfs.event-cursor"].flatMap { Int($0) } != nil)
            #expect(attributes["user.kvsfs.status"]?.hasPrefix("{") == true)
            #expect(attributes["user.kvsfs.synchronize"] == nil, "listing the root does not sync")
        }
    }

    @Test("with --remote none: the root still shows the store, its quotas and pending changes; sync facts say none")
    func noRemote() throws {
        try withDaemon(extraArguments: ["--remote", "none", "--quota-total", "5000", "--quota-value", "3000",
                                        "--quota-keys", "7", "--quota-key-length", "20"]) { (daemon, _) throws in
            let written = try shell("echo one > \(daemon.path("a")) && echo two > \(daemon.path("b")) && cat \(daemon.path("a")) \(daemon.path("b")) | wc -c")
            #expect(written.status == 0, "\(written)")
            let valueBytes = try #require(Int(written.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)))

            let text = try run(kvsfsBinary, ["status", daemon.mountpoint])
            #expect(text.status == 0, "\(text)")
            for line in ["remote:         none", "reachable:      none", "last sync:      never", "pending:        2 changes",
                         "bytes:          \(valueBytes) of 5000 used", "keys:           2 of 7 used",
                         "value limit:    3000 bytes", "key-name limit: 20 bytes", "schema:         none", "event log:      none"] {
                #expect(text.standardOutput.contains(line + "\n"), "\(line) in \(text)")
            }

            let json = try statusJSON(daemon.mountpoint)
            #expect(json["remote"] is NSNull)
            #expect(json["reachable"] as? String == "none")
            #expect(json["lastSync"] is NSNull)
            #expect(json["eventLog"] is NSNull && json["eventCursor"] is NSNull)
            #expect(json["pending"] as? Int == 2)
            #expect((json["keys"] as? [String: Int]) == ["used": 2, "quota": 7])

            let attributes = try dumpedAttributes(daemon.mountpoint)
            #expect(attributes["user.kvsfs.store"] == "default", "\(attributes)")
            #expect(attributes["user.kvsfs.reachable"] == "none")
            #expect(attributes["user.kvsfs.last-sync"] == "never")
            #expect(attributes["user.kvsfs.bytes"] == "\(valueBytes)/5000")
            #expect(attributes["user.kvsfs.keys"] == "2/7")
            #expect(attributes["user.kvsfs.pending"] == "2")
            for name in ["user.kvsfs.remote", "user.kvsfs.sync", "user.kvsfs.events", "user.kvsfs.event-cursor"] {
                #expect(attributes[name] == nil, "\(name) is sync's: a mount without a remote has none")
            }
            let sync = try run(kvsfsBinary, ["sync", daemon.mountpoint])
            #expect(sync.status == 1 && sync.standardError.contains("is not a kvsfs mount that syncs"), "\(sync)")
        }
    }

    @Test("a server nothing listens for: offline with the reason, and the pending count grows with each write")
    func unreachableServer() throws {
        let directory = TemporaryDirectory("kvsfs-status")
        defer { directory.remove() }
        try writeTokenFile("a-token\n", to: directory.path + "/token")
        let url = "http://127.0.0.1:\(ServerProcess.freePort())"
        let daemon = try DaemonMount(mountpoint: directory.subdirectory("mnt"), dataDirectory: directory.subdirectory("data"),
                                     extraArguments: ["--remote", url, "--token-file", directory.path + "/token"])
        defer { daemon.stop() }
        let result = try shell("""
            \(shellWait(until: "getfattr --only-values -n user.kvsfs.reachable \(daemon.mountpoint) | grep -q ^offline"))
            echo "pending0=$(getfattr --only-values -n user.kvsfs.pending \(daemon.mountpoint))"
            echo one > \(daemon.path("a"))
            echo "pending1=$(getfattr --only-values -n user.kvsfs.pending \(daemon.mountpoint))"
            echo two > \(daemon.path("b"))
            \(kvsfsBinary) status \(daemon.mountpoint)
            """)
        #expect(result.status == 0, "\(result)")
        #expect(result.standardOutput.contains("pending0=0\n"), "\(result)")
        #expect(result.standardOutput.contains("pending1=1\n"))
        #expect(result.standardOutput.contains("pending:        2 changes\n"))
        #expect(result.standardOutput.contains("remote:         \(url)\n"))
        #expect(result.standardOutput.contains("last sync:      never\n"))
        let reachable = result.standardOutput.split(separator: "\n").first { $0.hasPrefix("reachable:") }
        #expect(reachable?.hasPrefix("reachable:      offline: ") == true, "\(result)")
        #expect(reachable?.contains("cannot be reached: connection refused by \(url.dropFirst("http://".count))") == true,
                "the reason is given, in words: \(result)")

        let json = try statusJSON(daemon.mountpoint)
        #expect(json["reachable"] as? String == "offline")
        #expect((json["offlineReason"] as? String)?.contains("connection refused by") == true, "\(json)")
        #expect(json["pending"] as? Int == 2)
        #expect(json["lastSync"] is NSNull)
    }

    @Test("a directory that is not a kvsfs mount, or a path that does not exist: one line and exit status 1")
    func notAMount() throws {
        try withTemporaryDirectory { directory in
            let plain = try run(kvsfsBinary, ["status", directory.path])
            #expect(plain.status == 1)
            #expect(plain.standardOutput.isEmpty)
            #expect(plain.standardError == "Error: \(directory.path) is not a kvsfs mount\n", "\(plain)")
            let missing = try run(kvsfsBinary, ["status", "--json", directory.path + "/missing"])
            #expect(missing.status == 1)
            #expect(missing.standardError == "Error: cannot read the status of \(directory.path)/missing: No such file or directory\n", "\(missing)")
        }
    }

    @Test("the shell completions offer status and --json")
    func completions() throws {
        for shell in ["bash", "zsh", "fish"] {
            let script = try run(kvsfsBinary, ["--generate-completion-script", shell])
            #expect(script.status == 0)
            #expect(script.standardOutput.contains("status"), "\(shell)")
            #expect(script.standardOutput.contains("json"), "\(shell)")
        }
    }
}
