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
            compare with diff; --format binary for a bplist00; --format json for one JSON object, as \
            `plutil -convert json` writes it (refused, naming the key, when a value is a date or data, which JSON \
            cannot carry). Registered defaults are not part of the store and are left out. Only the user who \
            mounted the store (or root) may export it.
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Option(help: "xml, binary or json.")
    var format: String = "xml"

    func validate() throws {
        guard format == "json" || ValueFormat(rawValue: format) != nil else { throw ValidationError("--format must be xml, binary or json") }
    }

    func run() throws {
        guard format == "json" else {
            try Self.writeStandardOutput(try ControlClient.send(ControlRequest(command: .export, format: format), to: mountpoint))
            return
        }
        // The daemon exports in binary, which carries every value; JSON is written here.
        let binary = try ControlClient.send(ControlRequest(command: .export, format: ValueFormat.binary.rawValue), to: mountpoint)
        let json: [UInt8]
        do {
            json = try PropertyListCodec.encodeJSON(try PropertyListCodec.decode(binary, limits: PropertyListDecodingLimits(maxObjects: .max, maxBytes: .max)))
        } catch StoreError.invalidPropertyList(let reason) {
            throw CommandFailure("\(mountpoint): cannot export as JSON: \(reason)")
        } catch {
            throw CommandFailure("\(mountpoint): cannot export as JSON: \(error)")
        }
        try Self.writeStandardOutput(json)
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
