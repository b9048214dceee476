import FuseKit
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Synchronization
import Testing

/// The sync side as far as refusals go: what the mount asks it to record in the event log.
private final class RefusalRecorder: MountSynchronizer {
    let recorded = Mutex<[(key: String, reason: String)]>([])

    func pushNow(then answer: @escaping @Sendable (Result<Void, SyncFailure>) -> Void) { answer(.success(())) }
    func rootAttributes() -> [String: String] { [:] }
    func standing() -> SyncStanding {
        SyncStanding(remote: "none", reachability: .reachable, lastSync: nil, eventLog: "", eventCursor: 0)
    }
    func record(refusedWriteOf key: String, reason: String) {
        recorded.withLock { $0.append((key, reason)) }
    }
}

/// Refusals at the write() that makes a value impossible, what they leave, and how they are told.
@Suite("Refused writes", .hangGuard)
struct WriteRefusalTests {
    @Test("bytes no value can begin with are refused at write() with EINVAL, before any flush",
          arguments: ["#!/bin/sh\necho hi\n", "two words\n", "hello\u{01}", "<plist><strin>", "{\"a\": null}\n", "[1, 2]]"])
    func refusedAtWrite(_ text: String) throws {
        let h = try Harness()
        let (ino, handle) = try h.open("k", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        #expect(errnoOf(h.fs) { try h.write(ino, handle, text) } == EINVAL)
        // Refused at write: terminal for this handle; the flush says the same, nothing is stored.
        #expect(errnoOf(h.fs) { try h.write(ino, handle, "x", at: text.utf8.count) } == EINVAL)
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == EINVAL)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == nil)
    }

    @Test("JSON goes in as the property list it maps to", arguments: [
        ("{\"port\": 8080, \"name\": \"x\"}\n", PropertyListValue.dictionary(["port": .integer(8080), "name": .string("x")])),
        ("[1, 2.5, true, \"s\"]", .array([.integer(1), .real(2.5), .boolean(true), .string("s")])),
        ("{\"nested\": {\"list\": [], \"big\": 18446744073709551615}}",
         .dictionary(["nested": .dictionary(["list": .array([]), "big": .unsignedInteger(.max)])])),
    ])
    func jsonAccepted(_ text: String, _ value: PropertyListValue) throws {
        let h = try Harness()
        try h.writeFile("k", text)
        #expect(try h.value("k") == value)
    }

    @Test("a bare word stays an OpenStep string, even one JSON would read otherwise")
    func bareWordsStayStrings() throws {
        let h = try Harness()
        for (key, text) in [("a", "8080"), ("b", "true"), ("c", "null")] {
            try h.writeFile(key, text)
            #expect(try h.value(key) == .string(text))
        }
    }

    @Test("an append (>>) to a key fails at write(): a key holds one value; the value is unchanged")
    func appendRefused() throws {
        let h = try Harness()
        try h.writeFile("k", "first")
        let before = try h.readFile("k")
        let (ino, handle) = try h.open("k", O_WRONLY | O_APPEND)
        #expect(errnoOf(h.fs) { try h.write(ino, handle, "more\n", at: before.utf8.count) } == EINVAL)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == .string("first"))
        // The kernel's idea of the size may be old (the 6 bytes of `echo first`, not the
        // canonical XML the key shows): an O_APPEND write goes to the end all the same.
        let (again, stale) = try h.open("k", O_WRONLY | O_APPEND)
        #expect(errnoOf(h.fs) { try h.write(again, stale, "more\n", at: 6) } == EINVAL)
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: again, handle: stale, context: h.context) } == EINVAL)
        h.fs.release(inode: again, handle: stale)
        #expect(try h.readFile("k") == before)
    }

    @Test("text after a complete value is refused at every door: at commit too, when written past a hole")
    func trailingTextRefused() throws {
        let h = try Harness()
        let xml = String(decoding: try PropertyListCodec.encodeXML(.string("x")), as: UTF8.self)
        #expect(throws: StoreError.self) { try PropertyListCodec.decode(Array((xml + "more").utf8)) }
        #expect(throws: StoreError.self) { try PropertyListCodec.decode(Array("(a, b) c".utf8)) }
        #expect(try PropertyListCodec.decode(Array((xml + "<!-- a comment -->\n").utf8)) == .string("x"))
        // Written from the end backwards, the check at write() cannot follow; the commit refuses.
        let (ino, handle) = try h.open("k", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        try h.write(ino, handle, "more", at: xml.utf8.count)
        try h.write(ino, handle, xml, at: 0)
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == EINVAL)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == nil)
    }

    @Test("a value rewritten in place, shorter, then cut to its length, is taken")
    func rewriteInPlace() throws {
        let h = try Harness()
        try h.writeFile("k", "a-rather-long-first-value")
        let (ino, handle) = try h.open("k", O_WRONLY)
        try h.write(ino, handle, "(x)")
        _ = try h.fs.setattr(inode: ino, changes: AttributeChanges(size: 3), handle: handle, context: h.context)
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == .array([.string("x")]))
    }

    @Test("a refused new file leaves no name; a refused existing key keeps its value; touch's file stays")
    func noPhantomNames() throws {
        let h = try Harness()
        try h.writeFile("kept", "v")
        let (ino, handle) = try h.open("touched", O_WRONLY | O_CREAT, create: true)
        h.fs.release(inode: ino, handle: handle)
        #expect(errnoOf(h.fs) { try h.writeFile("phantom", "two words") } == EINVAL)
        #expect(errnoOf(h.fs) { try h.writeFile("kept", "two words") } == EINVAL)
        #expect(try h.names() == ["kept", "touched"])
        #expect(try h.inode("phantom") == nil)
        #expect(try h.value("kept") == .string("v"))
    }

    @Test("strings may hold control characters; an XML mount shows such a value in binary")
    func controlCharacters() throws {
        let h = try Harness()
        try h.writeFile("k", "\"bell\\a nul\\000 cr\\r\"")
        #expect(try h.value("k") == .string("bell\u{07} nul\u{00} cr\r"))
        let shown = try h.readFile("k")
        #expect(shown.hasPrefix("bplist00"))
        #expect(try h.size("k") == UInt64(shown.utf8.count))
        // A carriage return alone is XML 1.0: shown in XML, as a character reference.
        try h.writeFile("cr", "\"a\\rb\"")
        #expect(try h.readFile("cr").contains("<string>a&#13;b</string>"))
    }

    @Test("each refusal is told once per key, with the errno and the reason, in the event log")
    func refusalsRecorded() throws {
        let recorder = RefusalRecorder()
        let h = try Harness(limits: QuotaLimits(totalBytes: 100_000, valueBytes: 1000), sync: recorder)
        #expect(errnoOf(h.fs) { try h.writeFile("a", "two words") } == EINVAL)
        #expect(errnoOf(h.fs) { try h.writeFile("a", "two words") } == EINVAL)
        #expect(errnoOf(h.fs) { try h.writeFile("b", "\"" + String(repeating: "x", count: 2000) + "\"") } == EFBIG)
        // bash's `echo x > k` on an existing key: an early flush of the truncated, empty file is
        // refused, then the write makes it good. Nothing is refused in the end: nothing is told.
        try h.writeFile("c", "old")
        let (ino, handle) = try h.open("c", O_WRONLY | O_TRUNC)
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == EINVAL)
        try h.write(ino, handle, "new")
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        let recorded = recorder.recorded.withLock { $0 }
        #expect(recorded.map(\.key) == ["a", "b"], "a second refusal of a within the interval is not told again, c not at all")
        #expect(recorded.first?.reason.hasPrefix("EINVAL (Invalid argument): not a property list: ") == true, "\(recorded)")
        #expect(recorded.last?.reason.hasPrefix("EFBIG (File too large): value of ") == true, "\(recorded)")
    }
}
