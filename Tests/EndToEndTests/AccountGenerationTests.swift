import Foundation
import KVStore
import KVTestSupport
import Testing

/// An account's generation: renewed when one of its mounts finds a restore out, so that the
/// others resynchronise too; never for anything else, and never another account's.
@Suite("An account's generation", .serialized)
struct AccountGenerationTests {
    private func curl(_ arguments: String, _ server: ServerProcess, _ path: String) throws -> String {
        try shell("curl -s -w ' %{http_code}' \(arguments) '\(server.url)\(path)'").standardOutput
    }

    /// A token that may write one account's store, asking for changes past its own store's
    /// end, could otherwise make every account's mounts resynchronise.
    @Test("another account's writer cannot renew alice's identity")
    func otherAccountCannotRenew() throws {
        try withTestServer { fixture in
            let server = fixture.server
            let mallory = try server.admin(["account", "create", "mallory"])
            let alice = { try self.curl("-H 'Authorization: Bearer \(fixture.token)'", server, "/v1/alice/default/identity") }
            let before = try alice()
            #expect(before.hasSuffix(" 200"), "\(before)")
            let refused = try curl("-H 'Authorization: Bearer \(mallory)'", server, "/v1/mallory/default/changes?after=999")
            #expect(refused.hasSuffix(" 409"), "\(refused)")
            #expect(try alice() == before, "mallory's own store's 409 changed alice's identity")
        }
    }

    /// A mount moved to another account (a remote-reset) is not a restore: nothing it asks
    /// before it has looked at the identity (its watch's event stream, with the old account's
    /// cursor and mark) may make the server renew a generation.
    @Test("a mount moved to another account renews no identity")
    func movedMountRenewsNothing() throws {
        try withTestServer { fixture in
            let server = fixture.server
            let bob = try server.admin(["account", "create", "bob"])
            try writeTokenFile(bob, to: fixture.directory.path + "/bob-token")
            let a = try fixture.mount("a")
            let written = try shell("""
                for i in 1 2 3 4 5; do echo $i > \(a.path("k$i")); done
                \(kvsfsBinary) sync \(a.mountpoint); echo "sync=$?"
                """)
            #expect(written.standardOutput.contains("sync=0"), "\(written)")
            #expect(a.stop() == 0)
            let alice = { try self.curl("-H 'Authorization: Bearer \(fixture.token)'", server, "/v1/alice/default/identity") }
            let bobs = { try self.curl("-H 'Authorization: Bearer \(bob)'", server, "/v1/bob/default/identity") }
            let before = try alice()
            let bobBefore = try bobs()

            let moved = try DaemonMount("a", in: fixture.directory, remote: server.url, tokenFile: fixture.directory.path + "/bob-token")
            defer { _ = moved.stop() }
            let synced = try shell("""
                \(kvsfsBinary) sync \(moved.mountpoint); echo "sync=$?"
                sleep 1
                timeout 1 \(kvsfsBinary) events --all \(moved.mountpoint)
                """)
            #expect(synced.standardOutput.contains("sync=0"), "\(synced)")
            #expect(synced.standardOutput.contains("remote-reset"), "the move is a remote-reset: \(synced)")
            #expect(try alice() == before, "moving one mount to bob renewed alice's identity")
            #expect(try bobs() == bobBefore, "moving one mount to bob renewed bob's generation")
        }
    }
}
