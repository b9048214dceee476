import Foundation
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Synchronization
import Testing

/// Small values read back whole: exactly their committed bytes, whatever the writer wrote,
/// and never torn by writers racing readers.
@Suite("Small values read whole", .serialized)
struct SmallValueReadTests {
    @Test("a value that shrinks when committed (padded XML) reads back as exactly its canonical bytes")
    func shrinkingValueReadsWhole() throws {
        try withMountedStore { m in
            let path = m.path("k")
            let canonical = try PropertyListCodec.encodeXML(.string("small"))
            let padded = Array(String(decoding: canonical, as: UTF8.self).replacingOccurrences(of: "<string>", with: String(repeating: " ", count: 3000) + "<string>").utf8)
            #expect(padded.count > 3000)
            #expect(writeFile(path, padded) == nil)
            #expect(Array(try readFile(path).utf8) == canonical)
            #expect(statSize(path) == canonical.count)
            #expect(Array(try readFile(path).utf8) == canonical)
        }
    }

    @Test("a reader open before a writer truncates the key reads the committed value whole until the writer commits, then the new one")
    func readerOpenBeforeTruncatingWriter() throws {
        try withMountedStore { m in
            let path = m.path("k")
            let old = try PropertyListCodec.encodeXML(.string(String(repeating: "o", count: 3000)))
            let new = try PropertyListCodec.encodeXML(.string("new"))
            #expect(writeFile(path, old) == nil)
            let reader = open(path, O_RDONLY)
            #expect(reader >= 0)
            defer { close(reader) }
            func read() -> [UInt8] {
                var buffer = [UInt8](repeating: 0, count: 8192)
                let count = pread(reader, &buffer, buffer.count, 0)
                return count < 0 ? [] : Array(buffer[0..<count])
            }
            #expect(read() == old, "the committed value")

            let writer = open(path, O_WRONLY | O_TRUNC)
            #expect(writer >= 0)
            #expect(read() == old, "a truncation not yet committed is not the value")
            #expect(new.prefix(10).withUnsafeBytes { Glibc.write(writer, $0.baseAddress, 10) } == 10)
            #expect(read() == old, "nor are a writer's first bytes")
            #expect(new.dropFirst(10).withUnsafeBytes { Glibc.write(writer, $0.baseAddress, $0.count) } == new.count - 10)
            #expect(read() == old)
            #expect(close(writer) == 0)
            #expect(read() == new, "committed at close")
        }
    }

    @Test("a reader open before writers truncate the key, none of whom commits, reads the committed value whole at every read")
    func readerOpenAcrossTruncatingWriters() throws {
        try withMountedStore { m in
            let path = m.path("k")
            let committed = try PropertyListCodec.encodeXML(.string(String(repeating: "c", count: 3000)))
            #expect(writeFile(path, committed) == nil)
            let reader = open(path, O_RDONLY)
            #expect(reader >= 0)
            defer { close(reader) }
            // Each writer truncates the file and writes, a byte at a time, what is no property
            // list: every close is refused, so the committed value never changes.
            let stop = Atomic<Bool>(false)
            let tally = Mutex((writers: 0, accepted: 0, failedOpens: 0))
            let finished = DispatchSemaphore(value: 0)
            let writing = Thread {
                defer { finished.signal() }
                while !stop.load(ordering: .relaxed) {
                    let writer = open(path, O_WRONLY | O_TRUNC)
                    guard writer >= 0 else {
                        tally.withLock { $0.failedOpens += 1 }
                        continue
                    }
                    var byte = UInt8(ascii: "<")
                    for _ in 0..<1000 { _ = Glibc.write(writer, &byte, 1) }
                    let closed = close(writer)
                    tally.withLock { $0.writers += 1; if closed == 0 { $0.accepted += 1 } }
                }
            }
            writing.start()
            var reads = 0
            var bad: [Int] = []
            let deadline = Date().addingTimeInterval(3)
            var buffer = [UInt8](repeating: 0, count: 8192)
            while Date() < deadline {
                let count = pread(reader, &buffer, buffer.count, 0)
                reads += 1
                if count != committed.count || !buffer.starts(with: committed) { bad.append(count) }
            }
            stop.store(true, ordering: .relaxed)
            #expect(finished.wait(timeout: .now() + 30) == .success, "the writers end")
            let result = tally.withLock { $0 }
            #expect(result.writers > 0 && result.accepted == 0 && result.failedOpens == 0, "\(result)")
            #expect(bad.count == 0, "\(bad.count) of \(reads) reads were not the committed value; their lengths: \(bad.prefix(20))")
            #expect(Array(try readFile(path).utf8) == committed)
        }
    }

    @Test("a key maps privately with its committed bytes; a shared mapping is refused with ENODEV")
    func mappedValue() throws {
        try withMountedStore { m in
            let path = m.path("k")
            let committed = try PropertyListCodec.encodeXML(.string("mapped"))
            #expect(writeFile(path, committed) == nil)
            let reader = open(path, O_RDONLY)
            #expect(reader >= 0)
            defer { close(reader) }
            let shared = mmap(nil, committed.count, PROT_READ, MAP_SHARED, reader, 0)
            #expect(shared == MAP_FAILED && errno == ENODEV)
            let mapped = mmap(nil, committed.count, PROT_READ, MAP_PRIVATE, reader, 0)
            #expect(mapped != MAP_FAILED)
            guard let mapped, mapped != MAP_FAILED else { return }
            defer { munmap(mapped, committed.count) }
            #expect(Array(UnsafeRawBufferPointer(start: mapped, count: committed.count)) == committed)
        }
    }

    @Test("8 writers rewriting a small value (100 B to 4 KB) and 8 readers for 5 s: no read is empty or torn")
    func noTornSmallReads() throws {
        try withMountedStore { m in
            let path = m.path("k")
            // Lengths that grow and shrink across a page, each value in its canonical form.
            let values = try (0..<8).map { writer in
                try PropertyListCodec.encodeXML(.string(String(repeating: Character(UnicodeScalar(UInt8(97 + writer))), count: [60, 3800, 500, 3000, 1, 2000, 3850, 250][writer])))
            }
            #expect(values.allSatisfy { $0.count <= 4096 })
            #expect(writeFile(path, values[0]) == nil)
            let committed = Set(values)
            let deadline = Date().addingTimeInterval(5)
            let tally = Mutex((reads: 0, bad: 0, writes: 0, failedWrites: 0))
            let finished = DispatchGroup()
            for worker in 0..<16 {
                finished.enter()
                Thread {
                    defer { finished.leave() }
                    while Date() < deadline {
                        if worker < 8 {
                            let failed = writeFile(path, values[worker]) != nil
                            tally.withLock { $0.writes += 1; if failed { $0.failedWrites += 1 } }
                        } else {
                            let content = readToEnd(path) ?? []
                            tally.withLock { $0.reads += 1; if !committed.contains(content) { $0.bad += 1 } }
                        }
                    }
                }.start()
            }
            finished.wait()
            let result = tally.withLock { $0 }
            #expect(result.reads > 100 && result.writes > 100, "\(result)")
            #expect(result.failedWrites == 0, "\(result)")
            #expect(result.bad == 0, "\(result)")
        }
    }
}
