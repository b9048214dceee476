import FuseKit
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Testing

@Suite("File operations over the store")
struct FileSystemTests {
    @Test("echo > key stores the string, and cat shows it as an XML property list")
    func writeAndRead() throws {
        let h = try Harness()
        try h.writeFile("greeting", "hello\n")
        #expect(try h.value("greeting") == .string("hello"))
        let xml = try h.readFile("greeting")
        #expect(xml.contains("<string>hello</string>"))
        #expect(try h.size("greeting") == UInt64(xml.utf8.count))
    }

    @Test("nothing is committed before flush; readers see the old value until then")
    func commitAtFlush() throws {
        let h = try Harness()
        try h.writeFile("k", "old")
        let (ino, handle) = try h.open("k", O_WRONLY | O_TRUNC)
        try h.write(ino, handle, "new")
        #expect(try h.value("k") == .string("old"))
        #expect(try h.readFile("k").contains("old"))
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == .string("new"))
    }

    @Test("a value that does not parse is refused with EINVAL at flush and the value is unchanged")
    func invalidAtFlush() throws {
        let h = try Harness()
        try h.writeFile("k", "good")
        #expect(errnoOf(h.fs) { try h.writeFile("k", "not ( valid") } == EINVAL)
        #expect(try h.value("k") == .string("good"))
    }

    @Test("a second flush of the same handle commits nothing new (bash duplicates descriptors)")
    func flushIdempotent() throws {
        let h = try Harness()
        let (ino, handle) = try h.open("k", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        // bash: open, dup2, close the original (a flush of the still empty file), then write.
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == nil)
        try h.write(ino, handle, "v1")
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        let changes = try h.store.changes().count
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.store.changes().count == changes)
        #expect(try h.value("k") == .string("v1"))
    }

    @Test("an early flush of a truncated key is refused, but writing on makes a fresh attempt")
    func earlyFlushOfTruncatedKey() throws {
        let h = try Harness()
        try h.writeFile("k", "old")
        let (ino, handle) = try h.open("k", O_WRONLY | O_TRUNC)
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == EINVAL)
        try h.write(ino, handle, "new")
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == .string("new"))
    }

    @Test("a value over the per-value limit is refused at write() with EFBIG, and nothing of it is committed")
    func perValueAtWrite() throws {
        let h = try Harness(limits: QuotaLimits(totalBytes: 100_000, valueBytes: 1000))
        try h.writeFile("k", "old")
        let (ino, handle) = try h.open("k", O_WRONLY | O_TRUNC)
        try h.write(ino, handle, String(repeating: "x", count: 900))
        #expect(errnoOf(h.fs) { try h.write(ino, handle, String(repeating: "x", count: 200), at: 900) } == EFBIG)
        // Whatever comes after, the handle commits nothing.
        #expect(errnoOf(h.fs) { try h.fs.flush(inode: ino, handle: handle, context: h.context) } == EFBIG)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("k") == .string("old"))
    }

    @Test("a value whose canonical form is over the limit is refused at flush with EFBIG")
    func perValueAtFlush() throws {
        let h = try Harness(limits: QuotaLimits(totalBytes: 100_000, valueBytes: 400))
        // 250 bytes written, but the XML property list of the string is longer than 400.
        #expect(errnoOf(h.fs) { try h.writeFile("k", String(repeating: "y", count: 250)) } == EFBIG)
        #expect(try h.value("k") == nil)
    }

    @Test("the byte total is refused with EDQUOT")
    func totalQuota() throws {
        let h = try Harness(limits: QuotaLimits(totalBytes: 1000, valueBytes: 1000))
        try h.writeFile("a", String(repeating: "a", count: 400))
        let (ino, handle) = try h.open("b", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        #expect(errnoOf(h.fs) { try h.write(ino, handle, String(repeating: "b", count: 500)) } == EDQUOT)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.value("b") == nil)
        #expect(errnoOf(h.fs) { try h.writeFile("c", String(repeating: "c", count: 350)) } == EDQUOT)
    }

    @Test("over a lowered byte total, a write that shrinks a key passes at write() as it does at commit")
    func shrinkingOverLoweredTotal() throws {
        let h = try Harness(limits: QuotaLimits(totalBytes: 2000, valueBytes: 2000))
        try h.writeFile("a", String(repeating: "a", count: 900))
        try h.writeFile("b", String(repeating: "b", count: 400))
        try h.store.setLimits(QuotaLimits(totalBytes: 1200, valueBytes: 2000))
        #expect(h.store.usage.bytes > 1200)
        // Smaller than the value it replaces, though the store stays over its total.
        try h.writeFile("a", String(repeating: "c", count: 800))
        #expect(try h.value("a") == .string(String(repeating: "c", count: 800)))
        // Growing is still refused.
        #expect(errnoOf(h.fs) { try h.writeFile("b", String(repeating: "d", count: 450)) } == EDQUOT)
        #expect(try h.value("b") == .string(String(repeating: "b", count: 400)))
    }

    @Test("one key too many is refused with ENOSPC when the file is created")
    func keyCount() throws {
        let h = try Harness(limits: QuotaLimits(keys: 2))
        try h.writeFile("a", "1")
        try h.writeFile("b", "2")
        #expect(errnoOf(h.fs) { _ = try h.open("c", O_WRONLY | O_CREAT, create: true) } == ENOSPC)
        try h.writeFile("a", "3")  // overwriting is fine
        #expect(try h.value("a") == .string("3"))
    }

    @Test("a key name over the limit is ENAMETOOLONG, at lookup and create")
    func longName() throws {
        let h = try Harness()
        let long = String(repeating: "n", count: 65)
        #expect(errnoOf(h.fs) { _ = try h.inode(long) } == ENAMETOOLONG)
        #expect(errnoOf(h.fs) { try h.writeFile(long, "x") } == ENAMETOOLONG)
        try h.writeFile(String(repeating: "n", count: 64), "x")
    }

    @Test("touch makes an empty placeholder: listed, not a key, not counted")
    func placeholder() throws {
        let h = try Harness()
        let (ino, handle) = try h.open("new", O_WRONLY | O_CREAT, create: true)
        try h.fs.flush(inode: ino, handle: handle, context: h.context)
        h.fs.release(inode: ino, handle: handle)
        #expect(try h.names() == ["new"])
        #expect(try h.size("new") == 0)
        #expect(h.store.keys().isEmpty)
        #expect(h.store.usage.keys == 0)
        try h.writeFile("new", "\"now a key\"")
        #expect(try h.value("new") == .string("now a key"))
    }

    @Test("emptying an existing key is refused with EINVAL: rm removes a key")
    func emptyingRefused() throws {
        let h = try Harness()
        try h.writeFile("k", "v")
        #expect(errnoOf(h.fs) { try h.writeFile("k", "") } == EINVAL)
        let ino = try #require(try h.inode("k"))
        #expect(errnoOf(h.fs) { _ = try h.fs.setattr(inode: ino, changes: AttributeChanges(size: 0), handle: nil, context: h.context) } == EINVAL)
        #expect(try h.value("k") == .string("v"))
        try h.unlink("k")
        #expect(try h.value("k") == nil)
        #expect(try h.inode("k") == nil)
    }

    @Test("rename replaces atomically; RENAME_NOREPLACE is honoured")
    func renameKeys() throws {
        let h = try Harness()
        try h.writeFile("a", "A")
        try h.writeFile("b", "B")
        #expect(errnoOf(h.fs) { try h.rename("a", "b", .noReplace) } == EEXIST)
        try h.rename("a", "b")
        #expect(try h.value("b") == .string("A"))
        #expect(try h.value("a") == nil)
        #expect(try h.names() == ["b"])
        #expect(errnoOf(h.fs) { try h.rename("b", "c", .exchange) } == EINVAL)
    }

    @Test("vim's save: k → k~, new k written, k~ removed; the key only ever changes once")
    func vimSave() throws {
        let h = try Harness()
        try h.writeFile("k", "v1")
        let revision = h.store.revision
        try h.rename("k", "k~")
        #expect(try h.inode("k") == nil)
        #expect(try h.value("k") == .string("v1"), "the key stays in the store while hidden")
        #expect(try h.readFile("k~").contains("v1"))
        try h.writeFile("k", "v2")
        try h.unlink("k~")
        #expect(try h.value("k") == .string("v2"))
        #expect(h.store.revision == revision + 1, "one change: the new value, no delete and re-create")
        #expect(try h.store.changes().last?.value != nil)
        #expect(try h.names() == ["k"])
    }

    @Test("a key renamed to a backup name and the backup removed: the key is gone")
    func backupRemovedDeletesKey() throws {
        let h = try Harness()
        try h.writeFile("k", "v1")
        try h.rename("k", "k~")
        try h.unlink("k~")
        #expect(try h.value("k") == nil)
    }

    @Test("a key renamed to a backup and back keeps its value and logs no change")
    func backupRestored() throws {
        let h = try Harness()
        try h.writeFile("k", "v1")
        let before = try h.store.changes()
        try h.rename("k", "k~")
        try h.rename("k~", "k")
        #expect(try h.value("k") == .string("v1"))
        #expect(try h.store.changes() == before)
    }

    @Test("sed -i: a temporary sedXXXXXX file renamed over the key commits its content")
    func sedInPlace() throws {
        let h = try Harness()
        try h.writeFile("k", "old")
        try h.writeFile("sedAb12Cd", "new")
        #expect(h.store.keys() == ["k"], "the temporary file is no key")
        try h.rename("sedAb12Cd", "k")
        #expect(try h.value("k") == .string("new"))
        #expect(try h.names() == ["k"])
    }

    @Test("sed -i producing an invalid value: the rename is refused and the key unchanged")
    func sedInvalid() throws {
        let h = try Harness()
        try h.writeFile("k", "old")
        try h.writeFile("sedXYZ123", "bad ( value")
        #expect(errnoOf(h.fs) { try h.rename("sedXYZ123", "k") } == EINVAL)
        #expect(try h.value("k") == .string("old"))
    }

    @Test("editor files never count against the quota nor become keys", arguments: [".k.swp", ".k.swo", ".k.swpx", "k~", "sedAAAAAA", "#k#", ".#k"])
    func editorFiles(name: String) throws {
        let h = try Harness(limits: QuotaLimits(totalBytes: 300, valueBytes: 5000, keys: 1))
        try h.writeFile("only", "1")
        try h.writeFile(name, String(repeating: "x", count: 2000))
        #expect(h.store.keys() == ["only"])
        #expect(try h.names().contains(name))
        try h.unlink(name)
        #expect(try h.names() == ["only"])
    }

    @Test("mkdir, symlink, link and mknod are refused with EPERM")
    func refusedKinds() throws {
        let h = try Harness()
        try h.writeFile("k", "v")
        let ino = try #require(try h.inode("k"))
        #expect(errnoOf(h.fs) { _ = try h.fs.mkdir(parent: .root, name: "d", mode: 0o755) } == EPERM)
        #expect(errnoOf(h.fs) { _ = try h.fs.symlink(target: "k", parent: .root, name: "s") } == EPERM)
        #expect(errnoOf(h.fs) { _ = try h.fs.link(inode: ino, newParent: .root, newName: "l") } == EPERM)
        #expect(errnoOf(h.fs) { _ = try h.fs.mknod(parent: .root, name: "p", mode: S_IFIFO | 0o644) } == EPERM)
    }

    @Test("a chmod succeeds when 0644 already gives it; group and other bits count only with allow-other; chown only to the owner",
          arguments: [false, true])
    func permissions(allowOther: Bool) throws {
        let h = try Harness(allowOther: allowOther)
        try h.writeFile("k", "v")
        let ino = try #require(try h.inode("k"))
        func chmod(_ mode: UInt32) -> Int32? {
            errnoOf(h.fs) { _ = try h.fs.setattr(inode: ino, changes: AttributeChanges(permissions: mode), handle: nil, context: h.context) }
        }
        #expect(chmod(0o644) == nil)
        #expect(chmod(0o444) == nil, "the owner asks less than 0644 gives")
        #expect(chmod(0o755) == EPERM, "no execute bit is given")
        #expect(chmod(0o4644) == EPERM && chmod(0o2644) == EPERM && chmod(0o1644) == EPERM)
        #expect(chmod(0o600) == (allowOther ? EPERM : nil), "others read a 0644 key on an allow-other mount")
        #expect(chmod(0o666) == (allowOther ? EPERM : nil), "others cannot write one")
        #expect(errnoOf(h.fs) { _ = try h.fs.setattr(inode: ino, changes: AttributeChanges(uid: getuid() + 1), handle: nil, context: h.context) } == EPERM)
        _ = try h.fs.setattr(inode: ino, changes: AttributeChanges(uid: getuid(), gid: getgid()), handle: nil, context: h.context)
        // A new key's mode is judged by the same rule when its first value is committed, after any
        // chmod (cp -a and tar create 0600 and chmod before they close); a scratch file's is not.
        func createAndWrite(_ name: String, chmodTo mode: UInt32? = nil, exclusive: Bool = false) throws -> Int32? {
            let flags = OpenFlags(rawValue: O_WRONLY | O_CREAT | (exclusive ? O_EXCL : 0))
            let (entry, reply) = try h.fs.create(parent: .root, name: name, mode: S_IFREG | 0o600, flags: flags, context: h.context)
            if let mode {
                _ = try h.fs.setattr(inode: entry.attributes.inode, changes: AttributeChanges(permissions: mode), handle: nil, context: h.context)
            }
            try h.write(entry.attributes.inode, reply.handle, "v")
            defer { h.fs.release(inode: entry.attributes.inode, handle: reply.handle) }
            return errnoOf(h.fs) { try h.fs.flush(inode: entry.attributes.inode, handle: reply.handle, context: h.context) }
        }
        #expect(try createAndWrite("private") == (allowOther ? EPERM : nil))
        #expect(try h.value("private") == (allowOther ? nil : .string("v")))
        #expect(try createAndWrite("chmodded", chmodTo: 0o644) == nil)
        // rsync's temporary file, made as mkstemp makes it, is scratch: its mode is not judged.
        #expect(try createAndWrite(".k.Xy12Ab", chmodTo: 0o600, exclusive: true) == nil)
        #expect(try h.value(".k.Xy12Ab") == nil, "scratch: never stored")
        // The same name made as any file is made is a key's.
        #expect(try createAndWrite(".k.Xy12Ab2") == (allowOther ? EPERM : nil))
        #expect(try createAndWrite(".backup.202406") == (allowOther ? EPERM : nil))
        #expect(try h.value(".backup.202406") == (allowOther ? nil : .string("v")))
    }

    @Test("user.kvsfs.type names the value's type", arguments: [
        ("s", "hello", "string"), ("a", "(1, 2)", "array"), ("d", "{a = b;}", "dictionary"), ("b", "<00ff>", "data"),
        ("i", "<plist><integer>3</integer></plist>", "integer"), ("r", "<plist><real>1.5</real></plist>", "real"),
        ("t", "<plist><true/></plist>", "boolean"), ("w", "<plist><date>2026-01-01T00:00:00Z</date></plist>", "date"),
    ])
    func typeAttribute(name: String, text: String, type: String) throws {
        let h = try Harness()
        try h.writeFile(name, text)
        let ino = try #require(try h.inode(name))
        #expect(try h.fs.getxattr(inode: ino, name: "user.kvsfs.type") == Array(type.utf8))
        #expect(try h.fs.listxattr(inode: ino) == ["user.kvsfs.type"])
        #expect(errnoOf(h.fs) { try h.fs.setxattr(inode: ino, name: "user.kvsfs.type", value: [], flags: 0) } == EPERM)
        #expect(errnoOf(h.fs) { try h.fs.setxattr(inode: ino, name: "system.posix_acl_access", value: [], flags: 0) } == EOPNOTSUPP)
        #expect(errnoOf(h.fs) { _ = try h.fs.getxattr(inode: ino, name: "user.other") } == ENODATA)
    }

    @Test("statfs reports the byte quota and keys by the quota's own measure")
    func statfs() throws {
        let h = try Harness()
        try h.writeFile("a", "1")
        try h.writeFile("b", "2")
        let stats = try h.fs.statfs(inode: .root)
        #expect(stats.blockSize == 1)
        #expect(stats.blocks == 1_048_576)
        #expect(stats.blocks - stats.blocksFree == UInt64(h.store.usage.bytes))
        #expect(stats.blocks - stats.blocksFree == (try h.size("a")) + (try h.size("b")))
        #expect(stats.files == 1024)
        #expect(stats.filesFree == 1022)
    }

    @Test("a binary mount shows bplist00 files and takes them back")
    func binaryFormat() throws {
        let h = try Harness(format: .binary)
        try h.writeFile("k", "(1, 2)")
        let (ino, handle) = try h.open("k", O_RDONLY)
        let bytes = try h.fs.read(inode: ino, handle: handle, offset: 0, size: 4096)
        h.fs.release(inode: ino, handle: handle)
        #expect(bytes.starts(with: Array("bplist00".utf8)))
        #expect(try h.size("k") == UInt64(bytes.count))
        // Writing the binary bytes back gives the same value.
        let (ino2, handle2) = try h.open("k2", O_WRONLY | O_CREAT | O_TRUNC, create: true)
        _ = try bytes.withUnsafeBytes { try h.fs.write(inode: ino2, handle: handle2, offset: 0, bytes: $0, context: h.context) }
        try h.fs.flush(inode: ino2, handle: handle2, context: h.context)
        h.fs.release(inode: ino2, handle: handle2)
        #expect(try h.value("k2") == .array([.string("1"), .string("2")]))
    }

    @Test("keys that cannot be file names are listed under their escaped names, and found by them")
    func escapedNames() throws {
        let h = try Harness()
        for key in ["a/b", ".", "..", "x~", "100%", "%41"] { try h.store.put(.string(key), forKey: key) }
        let names = try h.names()
        #expect(Set(names) == ["a%2Fb", "%2E", "%2E%2E", "%78%7E", "100%", "%2541"])
        for name in names {
            let key = try #require(KeyFileName.key(forFileName: name))
            #expect(try h.readFile(name).contains("<string>\(key.replacingOccurrences(of: "%", with: "%"))</string>"))
        }
        #expect(try h.inode("%61") == nil, "a non-canonical alias names nothing")
    }
}

@Suite("Key file names")
struct KeyFileNameTests {
    @Test("every key maps to one name that maps back", arguments: [
        "plain", "a/b", "/", "nul\u{0}byte", ".", "..", "...", ".hidden", "100%", "%2F", "%zz", "k~", ".k.swp", "sedABCDEF", ".k.Ab12cd",
        "#auto#", ".#lock", "日本語", "-", "a%", "%", "~",
    ])
    func roundTrip(key: String) throws {
        let name = KeyFileName.fileName(forKey: key)
        #expect(!name.contains("/") && !name.utf8.contains(0) && name != "." && name != "..")
        #expect(!EditorFileRule.isEditorFile(name))
        #expect(KeyFileName.key(forFileName: name) == key)
    }

    @Test("names of editors' files are recognised, ordinary names are not")
    func editorRule() {
        for name in [".k.swp", ".k.swo", ".k.swa", ".k.swpx", "k~", "sedXy12Ab", "#k#", ".#k",
                     ] {
            #expect(EditorFileRule.isEditorFile(name), "\(name)")
        }
        // rsync's `.NAME.XXXXXX` with a suffix in one case, or of digits, is a key's name: a
        // word or a number people name keys with.
        for name in ["k", "sed", "sedative", "sedAB", ".profile", "a.swp", "4913", "k.save",
                     ".vimrc.backup", ".config.sample", "..abcdef", ".k.Ab12c", ".k.Ab-12c", "k.Ab12cd", ".k.Ab12cde",
                     ".backup.202406", ".env.PROD01", ".log.000001", ".k.ABCDEF", ".k.123456", ".k.Ab12cd", "..bashrc.q9Zx0a"] {
            #expect(!EditorFileRule.isEditorFile(name), "\(name)")
        }
    }
}
