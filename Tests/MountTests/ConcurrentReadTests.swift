import Foundation
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Synchronization
import Testing

/// Readers racing writers on one key: every read is a whole committed value.
@Suite("Readers and writers", .serialized)
struct ConcurrentReadTests {
    @Test("8 writers rewriting a 20 KB value with O_TRUNC and 8 readers for 10 s: no read is empty or torn")
    func noTornReads() throws {
        try withMountedStore { m in
            let path = m.path("k")
            // Values of different lengths, each written in its canonical form, so that a read
            // of one is exactly its bytes.
            let values = try (0..<8).map { writer in
                try PropertyListCodec.encodeXML(.string(String(repeating: Character(UnicodeScalar(UInt8(97 + writer))), count: 20_000 + 97 * writer)))
            }
            #expect(writeFile(path, values[0]) == nil)
            let committed = Set(values)
            let deadline = Date().addingTimeInterval(10)
            let tally = Mutex((reads: 0, empty: 0, torn: 0, writes: 0, failedWrites: 0))
            // Threads of their own: a dispatch pool runs only as many at once as there are cores.
            let finished = DispatchGroup()
            for worker in 0..<16 {
                finished.enter()
                Thread {
                    defer { finished.leave() }
                if worker < 8 {
                    while Date() < deadline {
                        let failed = writeFile(path, values[worker]) != nil
                        tally.withLock { $0.writes += 1; if failed { $0.failedWrites += 1 } }
                    }
                } else {
                    while Date() < deadline {
                        let content = readToEnd(path) ?? []
                        tally.withLock { t in
                            t.reads += 1
                            if content.isEmpty { t.empty += 1 } else if !committed.contains(content) { t.torn += 1 }
                        }
                    }
                }
                }.start()
            }
            finished.wait()
            let result = tally.withLock { $0 }
            print("concurrent reads: \(result.reads) reads, \(result.empty) empty, \(result.torn) torn, \(result.writes) writes")
            #expect(result.reads > 100 && result.writes > 100, "\(result)")
            #expect(result.failedWrites == 0, "\(result)")
            #expect(result.empty == 0, "\(result)")
            #expect(result.torn == 0, "\(result)")
        }
    }
}
