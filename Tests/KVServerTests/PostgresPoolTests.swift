@testable import KVPostgres
import Testing

/// The pools a PostgreSQL storage queries through. A connection going back to a pool schedules
/// timers that a cancel does not free before their deadline, so at thousands of queries a
/// second a server's memory grew for a minute (bench/load.sh postgres: 48 KB per watcher at
/// connect, 170 KB after 60 s at 1,000 changes/s).
@Suite("PostgreSQL connection pools")
struct PostgresPoolTests {
    @Test("a pool keeps connections open with no keep-alive timer, and its extra ones time out within a second")
    func timersHoldLittle() throws {
        let location = try PostgresLocation(url: "postgres://kvsfs:secret@127.0.0.1:5432/kvsfs", environment: [:])
        for pool in [PostgresServerStorage.readConnections, PostgresServerStorage.pushConnections] {
            let options = location.clientConfiguration(kept: pool.kept, most: pool.most).options
            #expect(options.keepAliveBehavior == nil)
            #expect(options.minimumConnections >= 1)
            #expect(options.maximumConnections >= options.minimumConnections)
            #expect(options.connectionIdleTimeout <= .seconds(1))
        }
    }
}
