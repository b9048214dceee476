import Glibc

/// The kernel's table of mounts as this process sees it (/proc/self/mountinfo): the one reader
/// of it, for whoever asks what is mounted where.
public enum MountTable {
    /// One line of the table.
    public struct Mount: Sendable, Equatable {
        /// Where it is mounted, unescaped.
        public let path: String
        /// Its device (`st_dev` of its files), as major and minor.
        public let major: UInt32
        public let minor: UInt32
        /// Its file system type: `fuse.kvsfs` for a kvsfs mount.
        public let type: String

        public init(path: String, major: UInt32, minor: UInt32, type: String) {
            self.path = path
            self.major = major
            self.minor = minor
            self.type = type
        }

        /// The id under which fusectl lists a FUSE mount's connection (its device number,
        /// `major << 20 | minor` as the kernel packs it).
        public var connection: UInt32 { major << 20 | minor }

        /// Whether a file with `st_dev` `device` is on this mount (glibc's packing of the
        /// major and minor into a dev_t).
        public func holds(device: UInt64) -> Bool {
            let major = UInt32(truncatingIfNeeded: (device >> 8) & 0xfff | (device >> 32) & ~UInt64(0xfff))
            let minor = UInt32(truncatingIfNeeded: device & 0xff | (device >> 12) & ~UInt64(0xff))
            return major == self.major && minor == self.minor
        }
    }

    /// Every mount, in the order they were made; empty when the table cannot be read.
    public static func mounts() -> [Mount] {
        let descriptor = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return [] }
        defer { close(descriptor) }
        var bytes = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").compactMap { line in
            // "36 35 0:42 / /mnt/x rw,nosuid - fuse.kvsfs kvsfs:default rw,..."
            let fields = line.split(separator: " ")
            guard fields.count > 4, let separator = fields.firstIndex(of: "-"), separator + 1 < fields.count else { return nil }
            let device = fields[2].split(separator: ":").compactMap { UInt32($0) }
            guard device.count == 2 else { return nil }
            return Mount(path: unescape(String(fields[4])), major: device[0], minor: device[1], type: String(fields[separator + 1]))
        }
    }

    /// The mount that shows at `path`: the last one made there.
    public static func top(at path: String) -> Mount? {
        mounts().last { $0.path == path }
    }

    /// mountinfo writes space, tab, newline and backslash as octal escapes.
    static func unescape(_ text: String) -> String {
        var remaining = Array(text.utf8)[...]
        var bytes = [UInt8]()
        while let byte = remaining.popFirst() {
            if byte == UInt8(ascii: "\\"), remaining.count >= 3,
               let value = UInt8(String(decoding: remaining.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                remaining = remaining.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
