import Dispatch
import Foundation
import KVCloud
import KVTestSupport
import Testing

/// The threads the SQLite storage blocks instead of Swift's cooperative ones.
@Suite("Blocking calls off the cooperative pool")
struct BlockingThreadsTests {
    private struct Refusal: Error, Equatable {
        let reason: String
    }

    @Test("a call returns its value, and throws its own error as it is")
    func valuesAndErrors() async throws {
        let threads = BlockingThreads(count: 2, name: "kvsfs-test")
        #expect(await threads.run { 6 * 7 } == 42)
        await #expect(throws: Refusal(reason: "no")) {
            try await threads.run { () throws(Refusal) in throw Refusal(reason: "no") }
        }
    }

    @Test("more calls blocked at once than the cooperative pool has threads leave it free to unblock them",
          .hangGuard)
    func blockedCallsLeaveThePoolFree() async {
        let blocked = ProcessInfo.processInfo.activeProcessorCount + 2
        let threads = BlockingThreads(count: blocked, name: "kvsfs-test")
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<blocked {
                group.addTask {
                    await threads.run {
                        started.signal()
                        gate.wait()
                    }
                }
            }
            // Runs on the cooperative pool: were the calls holding its threads, it never would.
            group.addTask {
                for _ in 0..<blocked {
                    while started.wait(timeout: .now()) != .success { await Task.yield() }
                }
                for _ in 0..<blocked { gate.signal() }
            }
        }
    }
}
