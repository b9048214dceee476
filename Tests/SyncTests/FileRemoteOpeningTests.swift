import Dispatch
import Foundation
import KVCloud
import KVTestSupport
import Synchronization
import Testing

/// A file remote that several mounts open at once, as two mounts started together on a fresh
/// file do: each finds it ready, and none fails on what another made first.
@Suite("Opening a file remote at once")
struct FileRemoteOpeningTests {
    @Test("eight openers of a fresh file at once all open it, in ten rounds")
    func openedTogether() throws {
        try withTemporaryDirectory { dir in
            for round in 0..<10 {
                let path = dir.path + "/cloud\(round).sqlite"
                let failures = Mutex<[String]>([])
                DispatchQueue.concurrentPerform(iterations: 8) { _ in
                    do {
                        _ = try SQLiteCloudStorage(path: path)
                    } catch {
                        failures.withLock { $0.append(String(describing: error)) }
                    }
                }
                #expect(failures.withLock { $0 }.isEmpty, "round \(round): \(failures.withLock { $0 })")
            }
        }
    }
}
