import Foundation
import Glibc
import Synchronization
import Testing
@testable import kvsfs

/// The daemon's one line to the `kvsfs STORE MOUNTPOINT` process that started it.
@Suite("The daemon's ready pipe")
struct StarterPipeTests {
    /// Two threads telling one pipe at the same moment, and which of them told it.
    private final class Race: Sendable {
        private let arrived = Atomic<Int>(0)
        let told = Mutex<[String]>([])

        /// Returns once both threads are here.
        func line(up count: Int) {
            arrived.add(1, ordering: .sequentiallyConsistent)
            while arrived.load(ordering: .sequentiallyConsistent) < count {}
        }
    }

    @Test("ready (the mount probe's thread) racing failed (the main thread): one line is written, by one of them, and the pipe is closed after it")
    func readyRacingFailed() throws {
        let lines = ["READY\n", "FAILED the FUSE session ended with status 1\n"]
        for round in 0..<500 {
            var ends: [Int32] = [0, 0]
            try #require(pipe(&ends) == 0)
            defer { close(ends[0]) }
            let starter = StarterPipe(descriptor: ends[1])
            let race = Race()
            let done = DispatchSemaphore(value: 0)
            for text in lines {
                Thread {
                    race.line(up: lines.count)
                    if starter.tell(text) { race.told.withLock { $0.append(text) } }
                    done.signal()
                }.start()
            }
            for _ in lines { done.wait() }
            let told = race.told.withLock { $0 }
            #expect(told.count == 1, "round \(round): \(told)")
            // The one line, then end of file: the only write end was closed.
            #expect(readToEnd(ends[0]) == told.first, "round \(round)")
            if told.count != 1 { break }
        }
    }

    /// Everything written to `descriptor` up to end of file; nil if it is still open after 5 s.
    private func readToEnd(_ descriptor: Int32) -> String? {
        var bytes = [UInt8]()
        var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while poll(&waiting, 1, 5000) == 1 {
            var chunk = [UInt8](repeating: 0, count: 256)
            let count = read(descriptor, &chunk, chunk.count)
            if count <= 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[..<count]
        }
        return nil
    }
}
