import FuseKit
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Testing

/// Registered defaults (`--defaults FILE`): what the file rules refuse, and how a key without
/// a value shows its default, without a mount.
@Suite("Registered defaults")
struct RegisteredDefaultsTests {
    private static func plist(_ entries: String) -> [UInt8] {
        Array("<plist version=\"1.0\"><dict>\(entries)</dict></plist>".utf8)
    }

    private func harness(_ entries: String, limits: QuotaLimits? = nil, format: ValueFormat = .xml) throws -> Harness {
        let h = try Harness(limits: limits, format: format, registersDefaults: true)
        h.fs.registerDefaults(try RegisteredDefaults.decode(Self.plist(entries), limits: h.store.limits))
        return h
    }

    @Test("a defaults file outside the rules is refused, naming the first bad entry in key order", arguments: [
        ("<array/>", "its root is of type array, not a dictionary"),
        ("<dict><key>a</key>", "not a property list"),
        ("<dict><key>b</key><integer>1</integer><key></key><integer>2</integer></dict>", #"entry "": the empty string is not a key"#),
        ("<dict><key>\(String(repeating: "k", count: 65))</key><true/><key>z\(String(repeating: "k", count: 70))</key><true/></dict>",
         #"entry "kkkkkkkkkk"#),
        ("<dict><key>big</key><string>\(String(repeating: "x", count: 2000))</string></dict>", #"entry "big": value of"#),
        ("<dict><key>caf\u{E9}</key><true/><key>cafe\u{301}</key><false/></dict>", "holds the key"),
    ])
    func refusedFiles(body: String, message: String) throws {
        let bytes = Array("<plist version=\"1.0\">\(body)</plist>".utf8)
        let limits = QuotaLimits(valueBytes: 1000)
        let error = #expect(throws: DefaultsError.self) { try RegisteredDefaults.decode(bytes, limits: limits) }
        #expect(error.map { "\($0)" }?.contains(message) == true, "\(String(describing: error))")
    }

    @Test("a file over the size bound is refused before it is parsed")
    func sizeBound() throws {
        let bytes = [UInt8](repeating: UInt8(ascii: " "), count: RegisteredDefaults.maxFileBytes + 1)
        #expect(throws: DefaultsError.tooLarge(size: RegisteredDefaults.maxFileBytes + 1, limit: RegisteredDefaults.maxFileBytes)) {
            try RegisteredDefaults.decode(bytes, limits: .modelled)
        }
    }

    @Test("a key without a value shows its default: listed, read, typed, synced never, counted nowhere")
    func defaultShown() throws {
        let h = try harness("<key>volume</key><integer>3</integer><key>name</key><string>x</string>")
        try h.writeFile("name", "stored")
        #expect(try h.names() == ["name", "volume"])
        #expect(try h.readFile("volume").contains("<integer>3</integer>"))
        #expect(try h.readFile("name").contains("<string>stored</string>"), "a stored value wins over the default")
        let ino = try #require(try h.inode("volume"))
        #expect(String(decoding: try h.fs.getxattr(inode: ino, name: KeyValueFileSystem.typeAttribute), as: UTF8.self) == "integer")
        #expect(try h.value("volume") == nil, "the store never holds a default")
        #expect(h.store.usage == QuotaUsage(bytes: h.store.entry(forKey: "name")!.size, keys: 1))
    }

    @Test("in a binary mount a default shows as a binary property list, of the size stat gives")
    func binaryFormat() throws {
        let h = try harness("<key>volume</key><integer>3</integer>", format: .binary)
        #expect(try h.readFile("volume").hasPrefix("bplist00"))
        #expect(try h.size("volume") == UInt64(try PropertyListCodec.encodeBinary(.integer(3)).count))
    }

    @Test("the kernel caches neither a default's entry and attributes nor a negative look-up; stored keys as before")
    func cacheTimeouts() throws {
        let h = try harness("<key>volume</key><integer>3</integer>")
        try h.writeFile("stored", "v")
        guard case .found(let shown) = try h.fs.lookup(parent: .root, name: "volume", context: h.context),
              case .found(let stored) = try h.fs.lookup(parent: .root, name: "stored", context: h.context),
              case .notFound(let negative) = try h.fs.lookup(parent: .root, name: "missing", context: h.context) else {
            Issue.record("unexpected look-up results")
            return
        }
        #expect(shown.entryTimeout == 0 && shown.attributeTimeout == 0)
        #expect(negative == 0)
        #expect(stored.entryTimeout == 3600 && stored.attributeTimeout == 3600)
        let plain = try Harness()
        guard case .notFound(let cached) = try plain.fs.lookup(parent: .root, name: "missing", context: plain.context) else { return }
        #expect(cached == 3600, "a mount without --defaults caches negative look-ups as before")
    }

    @Test("writing a default makes the key; removing the key shows the default again")
    func writeAndRemove() throws {
        let h = try harness("<key>volume</key><integer>3</integer>")
        try h.writeFile("volume", "<integer>7</integer>")
        #expect(try h.value("volume") == .integer(7))
        try h.unlink("volume")
        #expect(try h.value("volume") == nil)
        #expect(try h.names() == ["volume"])
        #expect(try h.readFile("volume").contains("<integer>3</integer>"))
    }

    @Test("rm and mv of a file that only shows a default are EPERM and change nothing; a copy to an editor file is taken")
    func defaultNotRemovable() throws {
        let h = try harness("<key>volume</key><integer>3</integer>")
        #expect(errnoOf(h.fs) { try h.unlink("volume") } == EPERM)
        #expect(errnoOf(h.fs) { try h.rename("volume", "other") } == EPERM)
        #expect(try h.names() == ["volume"])
        #expect(h.store.keys().isEmpty)
        try h.rename("volume", "volume~")
        #expect(try h.names() == ["volume", "volume~"])
        #expect(try h.readFile("volume~").contains("<integer>3</integer>"))
        #expect(try h.readFile("volume").contains("<integer>3</integer>"))
    }

    @Test("a default over which the key quota is full is refused at open for writing with ENOSPC")
    func writeHeldToQuota() throws {
        let h = try harness("<key>volume</key><integer>3</integer>", limits: QuotaLimits(keys: 1))
        try h.writeFile("other", "v")
        #expect(errnoOf(h.fs) { _ = try h.open("volume", O_WRONLY | O_TRUNC) } == ENOSPC)
        #expect(try h.value("volume") == nil)
    }

    @Test("registering anew: a new default appears, a changed one shows its new value, a dropped one goes; keys stay")
    func reregister() throws {
        let h = try harness("<key>a</key><integer>1</integer><key>b</key><integer>2</integer><key>c</key><integer>3</integer>")
        try h.writeFile("c", "<integer>30</integer>")
        let before = try h.size("b")
        h.fs.registerDefaults(try RegisteredDefaults.decode(Self.plist("<key>b</key><integer>200000</integer><key>d</key><true/>"),
                                                            limits: h.store.limits))
        #expect(try h.names() == ["b", "c", "d"])
        #expect(try h.inode("a") == nil)
        #expect(try h.size("b") != before)
        #expect(try h.readFile("b").contains("<integer>200000</integer>"))
        #expect(try h.value("c") == .integer(30))
    }

    @Test("a default dropped between the kernel's look-up of its name and the open is ESTALE: the kernel looks again, and nothing written is lost")
    func droppedBetweenLookupAndOpen() throws {
        let h = try harness("<key>a</key><integer>1</integer>")
        let looked = try #require(try h.inode("a"))
        h.fs.registerDefaults(RegisteredDefaults())
        #expect(errnoOf(h.fs) { _ = try h.fs.open(inode: looked, flags: OpenFlags(rawValue: O_WRONLY | O_TRUNC), context: h.context) } == ESTALE)
        // A reader still reads what the file showed.
        let reader = try h.fs.open(inode: looked, flags: OpenFlags(rawValue: O_RDONLY), context: h.context)
        h.fs.release(inode: looked, handle: reader.handle)
        // The kernel's second look finds no file, and O_CREAT makes one that takes the value.
        try h.writeFile("a", "<integer>2</integer>")
        #expect(try h.value("a") == .integer(2))
    }

    @Test("a default dropped while a writer has it open still takes what the writer commits")
    func droppedWhileWritten() throws {
        let h = try harness("<key>a</key><integer>1</integer>")
        let (ino, handle) = try h.open("a", O_WRONLY | O_TRUNC)
        h.fs.registerDefaults(RegisteredDefaults())
        try h.write(ino, handle, "<integer>2</integer>")
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("a") == .integer(2))
        #expect(try h.names() == ["a"])
    }
}
