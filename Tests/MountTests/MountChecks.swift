import Foundation
import Glibc
import KVSFS
import KVStore
import KVTestSupport
import Testing

/// One named check against a real mount: what a program doing system calls sees.
struct MountCheck: Sendable, CustomTestStringConvertible {
    let name: String
    var limits: QuotaLimits? = nil
    var format: ValueFormat = .xml
    let body: @Sendable (InProcessMount) throws -> Void
    var testDescription: String { name }
}

/// Writes `bytes` with open/write/close; returns the errno of the first call that failed.
@discardableResult
func writeFile(_ path: String, _ bytes: [UInt8], flags: Int32 = O_WRONLY | O_CREAT | O_TRUNC, fsyncFirst: Bool = false) -> Int32? {
    let fd = open(path, flags, 0o644)
    guard fd >= 0 else { return errno }
    var failure: Int32?
    let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    if written < 0 { failure = errno }
    if failure == nil, fsyncFirst, fsync(fd) != 0 { failure = errno }
    if close(fd) != 0, failure == nil { failure = errno }
    return failure
}

func writeFile(_ path: String, _ text: String, fsyncFirst: Bool = false) -> Int32? {
    writeFile(path, Array(text.utf8), fsyncFirst: fsyncFirst)
}

func readFile(_ path: String) throws -> String {
    try String(contentsOfFile: path, encoding: .utf8)
}

/// What a reader got, byte for byte, from open to EOF, as `cat` reads; nil if a call failed.
func readToEnd(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var content = [UInt8]()
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return count == 0 ? content : nil }
        content += chunk[0..<count]
    }
}

func statSize(_ path: String) -> Int {
    var st = stat()
    return stat(path, &st) == 0 ? st.st_size : -1
}

func expectValue(_ mount: InProcessMount, _ key: String, _ expected: PropertyListValue?, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let actual = try mount.store.entry(forKey: key).map { try PropertyListCodec.decode($0.xml) }
    #expect(actual == expected, sourceLocation: sourceLocation)
}

let xmlHello = "<string>hello</string>"

let mountChecks: [MountCheck] = [
    MountCheck(name: "a written value reads back as its XML property list, and stat gives its exact size") { m in
        #expect(writeFile(m.path("k"), "hello\n") == nil)
        let text = try readFile(m.path("k"))
        #expect(text.contains(xmlHello))
        #expect(statSize(m.path("k")) == text.utf8.count)
        try expectValue(m, "k", .string("hello"))
    },
    MountCheck(name: "an invalid value fails at close with EINVAL and the old bytes still read back") { m in
        #expect(writeFile(m.path("k"), "hello") == nil)
        let before = try readFile(m.path("k"))
        #expect(writeFile(m.path("k"), "not ( a plist") == EINVAL)
        #expect(try readFile(m.path("k")) == before)
        #expect(statSize(m.path("k")) == before.utf8.count)
    },
    MountCheck(name: "fsync of an invalid value fails with EINVAL", body: { m in
        #expect(writeFile(m.path("k"), "ok") == nil)
        #expect(writeFile(m.path("k"), "(", fsyncFirst: true) == EINVAL)
        try expectValue(m, "k", .string("ok"))
    }),
    MountCheck(name: "a write past the per-value limit fails with EFBIG at write() and nothing changes",
               limits: QuotaLimits(totalBytes: 1_000_000, valueBytes: 4096)) { m in
        #expect(writeFile(m.path("k"), "small") == nil)
        let before = try readFile(m.path("k"))
        #expect(writeFile(m.path("k"), [UInt8](repeating: UInt8(ascii: "x"), count: 5000)) == EFBIG)
        #expect(try readFile(m.path("k")) == before)
    },
    MountCheck(name: "a write past the store's byte total fails with EDQUOT at write()",
               limits: QuotaLimits(totalBytes: 3000, valueBytes: 3000)) { m in
        #expect(writeFile(m.path("a"), String(repeating: "a", count: 1500)) == nil)
        #expect(writeFile(m.path("b"), [UInt8](repeating: UInt8(ascii: "b"), count: 2000)) == EDQUOT)
        try expectValue(m, "b", nil)
    },
    MountCheck(name: "one key too many fails with ENOSPC at open(O_CREAT)", limits: QuotaLimits(keys: 2)) { m in
        #expect(writeFile(m.path("a"), "1") == nil)
        #expect(writeFile(m.path("b"), "2") == nil)
        #expect(writeFile(m.path("c"), "3") == ENOSPC)
        #expect(writeFile(m.path("a"), "4") == nil)
    },
    MountCheck(name: "a name over 64 bytes fails with ENAMETOOLONG") { m in
        #expect(writeFile(m.path(String(repeating: "k", count: 65)), "x") == ENAMETOOLONG)
        #expect(writeFile(m.path(String(repeating: "k", count: 64)), "x") == nil)
    },
    MountCheck(name: "rename replaces atomically and rename with no-replace gives EEXIST") { m in
        #expect(writeFile(m.path("a"), "A") == nil)
        #expect(writeFile(m.path("b"), "B") == nil)
        #expect(SystemCalls.rename(m.path("a"), m.path("b"), flags: SystemCalls.renameNoReplace) == -1 && errno == EEXIST)
        #expect(rename(m.path("a"), m.path("b")) == 0)
        try expectValue(m, "b", .string("A"))
        #expect(access(m.path("a"), F_OK) == -1 && errno == ENOENT)
    },
    MountCheck(name: "mkdir, symlink, link and mknod fail with EPERM") { m in
        #expect(writeFile(m.path("k"), "v") == nil)
        #expect(mkdir(m.path("d"), 0o755) == -1 && errno == EPERM)
        #expect(symlink("k", m.path("s")) == -1 && errno == EPERM)
        #expect(link(m.path("k"), m.path("h")) == -1 && errno == EPERM)
        #expect(mkfifo(m.path("p"), 0o644) == -1 && errno == EPERM)
    },
    MountCheck(name: "unlink removes the key") { m in
        #expect(writeFile(m.path("k"), "v") == nil)
        #expect(unlink(m.path("k")) == 0)
        try expectValue(m, "k", nil)
        #expect(statSize(m.path("k")) == -1)
    },
    MountCheck(name: "the directory lists keys and placeholders") { m in
        #expect(writeFile(m.path("b"), "1") == nil)
        #expect(writeFile(m.path("a"), "2") == nil)
        let fd = open(m.path("empty"), O_WRONLY | O_CREAT, 0o644)
        close(fd)
        let names = try FileManager.default.contentsOfDirectory(atPath: m.mountpoint)
        #expect(names.sorted() == ["a", "b", "empty"])
        #expect(m.store.keys() == ["a", "b"])
    },
    MountCheck(name: "statvfs reports the quota in bytes and keys") { m in
        #expect(writeFile(m.path("k"), "v") == nil)
        var vfs = statvfs()
        #expect(statvfs(m.mountpoint, &vfs) == 0)
        #expect(UInt64(vfs.f_blocks) * UInt64(vfs.f_frsize) == 1_048_576)
        #expect(Int(vfs.f_blocks - vfs.f_bfree) == statSize(m.path("k")))
        #expect(vfs.f_files == 1024 && vfs.f_ffree == 1023)
    },
    MountCheck(name: "getxattr user.kvsfs.type names the type") { m in
        #expect(writeFile(m.path("k"), "(1)") == nil)
        #expect(SystemCalls.extendedAttribute(m.path("k"), "user.kvsfs.type") == "array")
        #expect(SystemCalls.extendedAttribute(m.path("k"), "user.other") == nil && errno == ENODATA)
    },
    MountCheck(name: "mtime is when the value last changed; rewriting the same value keeps it") { m in
        #expect(writeFile(m.path("k"), "one") == nil)
        var first = stat()
        stat(m.path("k"), &first)
        usleep(20_000)
        #expect(writeFile(m.path("k"), "one") == nil)
        var same = stat()
        stat(m.path("k"), &same)
        #expect(same.st_mtim.tv_sec == first.st_mtim.tv_sec && same.st_mtim.tv_nsec == first.st_mtim.tv_nsec)
        usleep(20_000)
        #expect(writeFile(m.path("k"), "two") == nil)
        var changed = stat()
        stat(m.path("k"), &changed)
        #expect(changed.st_mtim.tv_sec * 1_000_000_000 + changed.st_mtim.tv_nsec > first.st_mtim.tv_sec * 1_000_000_000 + first.st_mtim.tv_nsec)
    },
    MountCheck(name: "a large value (900 KB) is written and read back whole") { m in
        let text = String(repeating: "0123456789", count: 90_000)
        #expect(writeFile(m.path("big"), text) == nil)
        let read = try readFile(m.path("big"))
        #expect(read.contains(text))
    },
    MountCheck(name: "a binary mount reads bplist00 and accepts it back", format: .binary) { m in
        #expect(writeFile(m.path("k"), "{a = 1;}") == nil)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: m.path("k"))))
        #expect(bytes.starts(with: Array("bplist00".utf8)))
        #expect(statSize(m.path("k")) == bytes.count)
        #expect(writeFile(m.path("copy"), bytes) == nil)
        try expectValue(m, "copy", .dictionary(["a": .string("1")]))
    },
    MountCheck(name: "an editor's backup file is kept out of the store and the quota", limits: QuotaLimits(totalBytes: 2000, valueBytes: 2000, keys: 1)) { m in
        #expect(writeFile(m.path("k"), "v") == nil)
        #expect(writeFile(m.path("k~"), String(repeating: "x", count: 1900)) == nil)
        #expect(writeFile(m.path(".k.swp"), String(repeating: "y", count: 1900)) == nil)
        #expect(m.store.keys() == ["k"])
        #expect(unlink(m.path("k~")) == 0 && unlink(m.path(".k.swp")) == 0)
    },
]

@Suite("Real FUSE mount")
struct MountTests {
    @Test("mount check", arguments: mountChecks)
    func check(_ check: MountCheck) throws {
        try withMountedStore(limits: check.limits, configuration: MountConfiguration(format: check.format)) { mount in
            try check.body(mount)
        }
    }
}
