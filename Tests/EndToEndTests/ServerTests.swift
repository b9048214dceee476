import Foundation
import KVStore
import KVTestSupport
import Testing

/// Mounts syncing through a real `kvsfs serve` on loopback, on SQLite and on PostgreSQL.
@Suite("The sync server", .serialized)
struct ServerTests {
    /// A server with account alice, and mounts A and B of alice's store `default` through it.
    private func withServerAndMounts(_ backend: ServerBackend = .sqlite,
                                     _ body: (ServerProcess, String, DaemonMount, DaemonMount, TemporaryDirectory) throws -> Void) throws {
        try withTestServer(backend) { fixture in
            let a = try fixture.mount("a")
            defer { a.stop() }
            let b = try fixture.mount("b")
            defer { b.stop() }
            try body(fixture.server, fixture.token, a, b, fixture.directory)
        }
    }

    private func mount(_ name: String, of server: ServerProcess, tokenFile: String, in dir: TemporaryDirectory, extraArguments: [String] = []) throws -> DaemonMount {
        try DaemonMount(name, in: dir, remote: server.url, tokenFile: tokenFile, extraArguments: extraArguments)
    }

    @Test("a change on one mount reaches the other through the server, with its inotify events and reason", arguments: ServerBackend.allCases)
    func propagate(backend: ServerBackend) throws {
        try withServerAndMounts(backend) { (server, _, a, b, dir) throws in
            let result = try shell("""
                \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
                \(shellWatch(b.mountpoint, events: "create,close_write,delete", into: "\(dir.path)/inotify", seconds: 20))
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

    @Test("the server restarts with mounts connected, and nothing written meanwhile is lost", arguments: ServerBackend.allCases)
    func restart(backend: ServerBackend) throws {
        try withServerAndMounts(backend) { (server, _, a, b, _) throws in
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

    @Test("tokens: another account's store, a read-only token's write, a revoked token, and bad requests are refused with a clear 4xx",
          arguments: ServerBackend.allCases)
    func access(backend: ServerBackend) throws {
        try withServerAndMounts(backend) { (server, alice, a, _, _) throws in
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

    @Test("the server keeps the newer of two changes to a key and refuses a value over the quota, whatever the client sends",
          arguments: ServerBackend.allCases)
    func mergeAndQuotaOnServer(backend: ServerBackend) throws {
        try withServerAndMounts(backend) { (server, alice, _, _, dir) throws in
            func push(_ key: String, _ text: String, time: Int64) throws -> String {
                let xml = try PropertyListCodec.encodeXML(.string(text))
                let body = #"{"changes":[{"key":"\#(key)","value":"\#(Data(xml).base64EncodedString())","type":"string","stamp":{"time":\#(time),"counter":0,"device":"curl"}}]}"#
                try body.write(toFile: dir.path + "/push.json", atomically: true, encoding: .utf8)
                return try shell("""
                    curl -s -w ' %{http_code}' -X POST -H 'Authorization: Bearer \(alice)' -H 'Content-Type: application/json' \
                        --data-binary @\(dir.path)/push.json \(server.url)/v1/alice/quota/changes
                    """).standardOutput
            }
            func held() throws -> [String] {
                let json = try shell("curl -s -H 'Authorization: Bearer \(alice)' \(server.url)/v1/alice/quota/changes").standardOutput
                struct Batch: Decodable { struct Change: Decodable { var key: String; var value: Data? }; var changes: [Change] }
                let batch = try JSONDecoder().decode(Batch.self, from: Data(json.utf8))
                return try batch.changes.map { change in
                    guard let value = change.value, case .string(let text) = try PropertyListCodec.decode([UInt8](value)) else { return "\(change.key)=?" }
                    return "\(change.key)=\(text)"
                }
            }
            #expect(try push("k", "newer", time: 2_000_000).hasSuffix(" 200"))
            #expect(try push("k", "older", time: 1_000_000).hasSuffix(" 200"))
            #expect(try held() == ["k=newer"], "the older change does not replace the newer")
            let refused = try push("big", String(repeating: "x", count: 1_100_000), time: 3_000_000)
            #expect(refused.hasSuffix(" 200") && refused.contains("\"refused\":[{"), "\(refused.prefix(300))")
            #expect(try held() == ["k=newer"], "the value over the per-value limit is not stored")
            // A key holding NUL: SQLite keeps every byte; PostgreSQL's text cannot, so that change is refused.
            let withNUL = try push(#"mid\u0000dle"#, "nul", time: 4_000_000)
            #expect(withNUL.hasSuffix(" 200"), "\(withNUL.prefix(300))")
            switch backend {
            case .sqlite:
                #expect(try held() == ["k=newer", "mid\u{0}dle=nul"])
            case .postgres:
                #expect(withNUL.contains("\"refused\":[{") && withNUL.contains("NUL character"), "\(withNUL.prefix(300))")
                #expect(try held() == ["k=newer"])
            }
        }
    }

    @Test("the event stream brings each change as it lands, and ends unsent at the next change once its token is revoked",
          arguments: ServerBackend.allCases)
    func eventStream(backend: ServerBackend) throws {
        try withServerAndMounts(backend) { (server, _, a, _, dir) throws in
            let token = try server.admin(["token", "create", "alice"])
            let result = try shell("""
                curl -sN -H 'Authorization: Bearer \(token)' '\(server.url)/v1/alice/default/events?after=0' > \(dir.path)/events &
                reader=$!
                sleep 0.5
                echo streamed > \(a.path("k"))
                \(shellWait(until: "grep -q '\"key\":\"k\"' \(dir.path)/events"))
                \(kvsfsBinary) token revoke \(token) --database \(server.database)
                # Past the stream's one-second trust in its token, the next change ends it unsent.
                sleep 1.5
                echo after-revoke > \(a.path("k2"))
                for i in $(seq 40); do kill -0 $reader 2>/dev/null || break; sleep 0.1; done
                kill -0 $reader 2>/dev/null && echo "still streaming" || echo "stream ended"
                cat \(dir.path)/events
                """, timeout: 60)
            #expect(result.standardOutput.contains("stream ended"), "\(result)")
            #expect(result.standardOutput.contains("id: 1\ndata: {"), "\(result)")
            #expect(!result.standardOutput.contains("\"key\":\"k2\""), "no change reaches a revoked token's stream: \(result)")
        }
    }

    @Test("a token over its rate limit gets 429 with Retry-After; /metrics reports requests, pushes, their commits and watchers")
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
        #expect(result.standardOutput.contains("kvsfs_push_commits_total 0"), "transactions that committed pushes: \(result)")
    }

    @Test("a mount with a read-only token gets the administrator's values and refuses local writes with EROFS")
    func readOnlyMount() throws {
        try withServerAndMounts { (server, _, a, _, dir) throws in
            let reader = try server.admin(["token", "create", "alice", "--store", "default", "--read-only"])
            try writeTokenFile(reader, to: dir.path + "/reader")
            let c = try mount("c", of: server, tokenFile: dir.path + "/reader", in: dir)
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

    @Test("two server instances on one PostgreSQL act as one: a change through either reaches mounts on the other at once, across a restart")
    func twoInstancesOnePostgres() throws {
        let dir = TemporaryDirectory("kvsfs-server")
        defer { dir.remove() }
        let database = try TestDatabase(.postgres, in: dir)
        defer { database.remove() }
        let one = try ServerProcess(database: database.url)
        defer { one.stop() }
        let two = try ServerProcess(database: database.url)
        defer { two.stop() }
        try writeTokenFile(one.admin(["account", "create", "alice"]), to: dir.path + "/token")
        let a = try mount("a", of: one, tokenFile: dir.path + "/token", in: dir)
        defer { a.stop() }
        let b = try mount("b", of: two, tokenFile: dir.path + "/token", in: dir)
        defer { b.stop() }
        let result = try shell("""
            \(kvsfsBinary) sync \(a.mountpoint) && \(kvsfsBinary) sync \(b.mountpoint) || exit 9
            \(shellWatch(b.mountpoint, events: "create,close_write,delete", into: "\(dir.path)/inotify", seconds: 30))
            start=$(date +%s%N)
            echo via-one > \(a.path("k"))
            \(shellWait(until: "grep -q via-one \(b.path("k")) 2>/dev/null"))
            echo "propagated-ms=$(( ($(date +%s%N) - start) / 1000000 ))"
            echo via-two > \(b.path("back"))
            \(shellWait(until: "grep -q via-two \(a.path("back")) 2>/dev/null"))
            sleep 0.2
            kill $watcher; wait
            cat \(dir.path)/inotify
            """, timeout: 60)
        #expect(result.standardOutput.contains("CREATE k\nCLOSE_WRITE,CLOSE k\n"), "\(result)")
        #expect(result.standardOutput.contains("propagated-ms="))

        // Instance two goes away and comes back; what A wrote meanwhile reaches B.
        #expect(two.stop() == 0)
        let meanwhile = try shell("""
            echo while-two-was-down > \(a.path("k")); rm \(a.path("back"))
            \(kvsfsBinary) sync \(a.mountpoint); echo "a-sync=$?"
            """)
        #expect(meanwhile.standardOutput.contains("a-sync=0"), "\(meanwhile)")
        try two.start()
        let after = try shell("""
            \(shellWait(until: "! test -e \(b.path("back"))"))
            \(kvsfsBinary) sync \(b.mountpoint); echo "b-sync=$?"
            \(kvsfsBinary) get \(b.path("k"))
            """, timeout: 60)
        #expect(after.standardOutput.contains("b-sync=0\nwhile-two-was-down\n"), "\(after)")
    }

    @Test("a server with --tls-cert/--tls-key speaks HTTPS: mounts trusting its CA sync through it, others are refused clearly")
    func tls() throws {
        let dir = TemporaryDirectory("kvsfs-server")
        defer { dir.remove() }
        try makeSelfSignedCertificate(in: dir.path)
        let server = try ServerProcess(database: "sqlite://\(dir.path)/server.sqlite",
                                       extraArguments: ["--tls-cert", dir.path + "/cert.pem", "--tls-key", dir.path + "/key.pem"])
        defer { server.stop() }
        try writeTokenFile(server.admin(["account", "create", "alice"]), to: dir.path + "/token")
        let trust = ["--tls-ca", dir.path + "/cert.pem"]
        let a = try mount("a", of: server, tokenFile: dir.path + "/token", in: dir, extraArguments: trust)
        defer { a.stop() }
        let b = try mount("b", of: server, tokenFile: dir.path + "/token", in: dir, extraArguments: trust)
        defer { b.stop() }
        let untrusting = try mount("c", of: server, tokenFile: dir.path + "/token", in: dir)
        defer { untrusting.stop() }
        let result = try shell("""
            curl -s --cacert \(dir.path)/cert.pem \(server.url)/health
            curl -s -o /dev/null -w 'plain=%{http_code}\\n' http://127.0.0.1:\(server.port)/health
            echo secret > \(a.path("k"))
            \(shellWait(until: "grep -q secret \(b.path("k")) 2>/dev/null"))
            \(kvsfsBinary) get \(b.path("k"))
            \(kvsfsBinary) sync \(untrusting.mountpoint); echo "untrusted=$?"
            """, timeout: 60)
        #expect(result.standardOutput.hasPrefix("ok\n"), "\(result)")
        #expect(!result.standardOutput.contains("plain=200"), "no plain HTTP on a TLS port")
        #expect(result.standardOutput.contains("secret\nuntrusted=1"))
        #expect(result.standardError.lowercased().contains("certificate"), "the refusal names the certificate: \(result.standardError)")
    }
}
