import ArgumentParser
import Foundation
import Glibc
import KVStore

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a mount's whole store as one dictionary property list.",
        discussion: """
            Every key with a value, from one snapshot of the store taken by the mount (no change lands halfway \
            through it), as one dictionary: key to value. XML by default, sorted by key, so that two exports \
            compare with diff; --format binary for a bplist00. Registered defaults are not part of the store and \
            are left out. Only the user who mounted the store (or root) may export it.
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Option(help: "xml or binary.")
    var format: String = "xml"

    func validate() throws {
        guard ValueFormat(rawValue: format) != nil else { throw ValidationError("--format must be xml or binary") }
    }

    func run() throws {
        let plist = try ControlClient.send(ControlRequest(command: .export, format: format), to: mountpoint)
        try Self.writeStandardOutput(plist)
    }

    /// Writes all of `bytes` to standard output (a pipe or a file); a short write is an error.
    static func writeStandardOutput(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw CommandFailure("cannot write to standard output: \(String(cString: strerror(errno)))") }
            offset += count
        }
    }
}
