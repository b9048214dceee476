import Foundation
import KVTestSupport
import Testing

/// Mounts syncing through a real `kvsfs serve` on loopback (SQLite database).
@Suite("The sync server", .serialized)
struct ServerTests {
    /// A server with account alice, and mounts A and B of alice's store `default` through it.
    private func withServerAndMounts(_ body: (ServerProcess, String, DaemonMount, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        let dir = TemporaryDirectory("kvsfs-server")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite")
        defer { server.stop() }
        let token = try server.admin(["account", "create", "alice"])
        try token.write(toFile: dir.path + "/token", atomically: true, encoding: .utf8)
        let remote = ["--remote", server.url, "--token-file", dir.path + "/token"]
        let a = try DaemonMount(mountpoint: dir.subdirectory("a"), dataDirectory: dir.subdirectory("data-a"), extraArguments: remote)
        defer { a.stop() }
        let b = try DaemonMount(mountpoint: dir.subdirectory("b"), dataDirectory: dir.subdirectory("data-b"), extraArguments: remote)
        defer { b.stop() }
        try body(server, token, a, b, dir)
    }

    @Test("a change on one mount reaches the other through the server, with its inotify events and reason")
    func propagate() throws {
        try withServerAndMounts { (server, _, a, b, dir) throws in
            let result = try shell("""
                \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
                timeout 20 inotifywait -m -q --format '%e %f' -e create,close_write,delete \(b.mountpoint) > \(dir.path)/inotify 2>/dev/null &
                watcher=$!
                sleep 0.3
                echo hello > \(a.path("k"))
                \(shellWait(until: "grep -q hello \(b.path("k")) 2>/dev/null"))
                rm \(a.path("k"))
                \(shellWait(until: "! test -e \(b.path("k"))"))
                sleep 0.2
                kill $watcher; wait
                cat \(dir.path)/inotify
                timeout 1 \(kvsfsBinary) events --all \(b.mountpoint)
                """, timeout: 60)
            #expect(result.standardOutput.contains("CREATE k\nCLOSE_WRITE,CLOSE k\nDELETE k\n"), "\(result)")
            #expect(result.standardOutput.contains(#""keys":["k"],"reason":"server-change""#))
        }
    }

    @Test("the server restarts with mounts connected, and nothing written meanwhile is lost")
    func restart() throws {
        try withServerAndMounts { (server, _, a, b, _) throws in
            _ = try shell("\(kvsfsBinary) sync \(a.mountpoint); \(kvsfsBinary) sync \(b.mountpoint)")
            #expect(server.stop() == 0, "SIGTERM ends the server cleanly")
            let result = try shell("""
                echo written-while-down > \(a.path("k"))
                echo "state=$(getfattr --only-values -n user.kvsfs.sync \(a.path("k")))"
                \(kvsfsBinary) sync \(a.mountpoint); echo "down-sync=$?"
                """)
            #expect(result.standardOutput.contains("state=pending"), "\(result)")
            #expect(result.standardOutput.contains("down-sync=1"))
            try server.start()
            let after = try shell("""
                \(kvsfsBinary) sync \(a.mountpoint); echo "up-sync=$?"
                \(shellWait(until: "test -e \(b.path("k"))"))
                \(kvsfsBinary) get \(b.path("k"))
                """, timeout: 60)
            #expect(after.standardOutput.contains("up-sync=0"), "\(after)")
            #expect(after.standardOutput.hasSuffix("written-while-down\n"))
        }
    }

    @Test("tokens: another account's store, a read-only token's write, a revoked token, and bad requests are refused with a clear 4xx")
    func access() throws {
        try withServerAndMounts { (server, alice, a, _, _) throws in
            let bob = try server.admin(["account", "create", "bob"])
            let reader = try server.admin(["token", "create", "alice", "--store", "config", "--read-only"])
            let spare = try server.admin(["token", "create", "alice"])
            let body = #"{"changes":[{"key":"k","value":"PHN0cmluZz54PC9zdHJpbmc+","type":"string","stamp":{"time":1,"counter":0,"device":"d"}}]}"#
            func status(_ method: String, _ path: String, token: String?, body: String? = nil) throws -> String {
                let auth = token.map { "-H 'Authorization: Bearer \($0)'" } ?? ""
                let data = body.map { "-H 'Content-Type: application/json' --data '\($0)'" } ?? ""
                return try shell("curl -s -o /dev/stderr -w '%{http_code}' -X \(method) \(auth) \(data) \(server.url)\(path)").standardOutput
            }
            #expect(try status("GET", "/v1/alice/default/changes", token: nil) == "401")
            #expect(try status("GET", "/v1/alice/default/changes", token: "kvs_nope_nope") == "401")
            #expect(try status("GET", "/v1/alice/default/changes", token: bob) == "403", "bob's token does not reach alice's store")
            #expect(try status("GET", "/v1/alice/config/changes", token: reader) == "200")
            #expect(try status("POST", "/v1/alice/config/changes", token: reader, body: body) == "403", "a read-only token cannot write")
            #expect(try status("GET", "/v1/alice/default/changes", token: reader) == "403", "nor reach another store")
            #expect(try status("POST", "/v1/alice/default/changes", token: alice, body: "{not json") == "400")
            #expect(try status("POST", "/v1/alice/default/changes", token: alice,
                               body: body.replacingOccurrences(of: "PHN0cmluZz54PC9zdHJpbmc+", with: "bm90IGEgKCBwbGlzdA==")) == "400")
            #expect(try status("GET", "/v1/alice/default/changes?after=x", token: alice) == "400")
            #expect(try status("GET", "/v1/alice/default/changes", token: spare) == "200")
            _ = try server.admin(["token", "revoke", spare])
            #expect(try status("GET", "/v1/alice/default/changes", token: spare) == "401", "a revoked token stops working at once")
            let message = try shell("curl -s -X POST -H 'Authorization: Bearer \(reader)' --data '\(body)' \(server.url)/v1/alice/config/changes").standardOutput
            #expect(message.contains("may only read"), "\(message)")
            #expect(try shell("ls \(a.mountpoint)").standardOutput.isEmpty, "nothing reached the store")
        }
    }

    @Test("a token over its rate limit gets 429 with Retry-After; /metrics reports requests, pushes and watchers")
    func rateLimitAndMetrics() throws {
        let dir = TemporaryDirectory("kvsfs-server")
        defer { dir.remove() }
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite", extraArguments: ["--rate-limit", "5"])
        defer { server.stop() }
        let token = try server.admin(["account", "create", "carol"])
        let result = try shell("""
            for i in $(seq 15); do
              curl -s -o /dev/null -D - -H 'Authorization: Bearer \(token)' '\(server.url)/v1/carol/default/changes' | tr -d '\\r' | grep -i -E '^HTTP|^retry-after'
            done
            curl -s \(server.url)/metrics
            """)
        #expect(result.standardOutput.contains("HTTP/1.1 200"), "\(result)")
        #expect(result.standardOutput.contains("HTTP/1.1 429"), "a burst over twice the rate is limited")
        #expect(result.standardOutput.lowercased().contains("retry-after: 1"))
        #expect(result.standardOutput.contains(#"kvsfs_requests_total{status="429"}"#))
        #expect(result.standardOutput.contains("kvsfs_watchers 0"))
        #expect(result.standardOutput.contains("kvsfs_pushes_total 0"))
    }

    @Test("a mount with a read-only token gets the administrator's values and refuses local writes with EROFS")
    func readOnlyMount() throws {
        try withServerAndMounts { (server, _, a, _, dir) throws in
            let reader = try server.admin(["token", "create", "alice", "--store", "default", "--read-only"])
            try reader.write(toFile: dir.path + "/reader", atomically: true, encoding: .utf8)
            let c = try DaemonMount(mountpoint: dir.subdirectory("c"), dataDirectory: dir.subdirectory("data-c"),
                                    extraArguments: ["--remote", server.url, "--token-file", dir.path + "/reader"])
            defer { c.stop() }
            let result = try shell("""
                \(kvsfsBinary) sync \(c.mountpoint); echo "sync=$?"
                \(kvsfsBinary) set \(a.path("service-url")) -string https://example.net/v2
                \(shellWait(until: "test -e \(c.path("service-url"))"))
                \(kvsfsBinary) get \(c.path("service-url"))
                echo local > \(c.path("mine")); echo "create=$?"
                /bin/echo changed > \(c.path("service-url")); echo "overwrite=$?"
                rm \(c.path("service-url")); echo "rm=$?"
                \(kvsfsBinary) get \(c.path("service-url"))
                """, timeout: 60)
            #expect(result.standardOutput.contains("sync=0"), "\(result)")
            #expect(result.standardOutput.contains("https://example.net/v2\ncreate=1\noverwrite=1\nrm=1\nhttps://example.net/v2\n"), "\(result)")
            #expect(result.standardError.contains("Read-only file system"))
        }
    }
}
