import Foundation
import KVSync

/// The mount's event log followed as it grows, and again from its start when a mount starts
/// afresh with a new file (the old one moved to `PATH.1`).
struct EventFollower {
    let path: String
    private var handle: FileHandle
    private var identity: (device: UInt, inode: UInt)

    init(path: String) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw CommandFailure("cannot read the event log \(path)") }
        self.path = path
        self.handle = handle
        identity = Self.identity(of: handle.fileDescriptor)
    }

    /// The lines to print first for a reader that stopped at `cursor` (a `resync` line first
    /// when the log lacks some of what came after it), the follower left just past them. The
    /// file read is the one followed: when a mount has moved it to `PATH.1` since it was
    /// opened, it is not read twice, and the new log is followed from its start.
    mutating func resume(after cursor: Int64) throws -> [String] {
        handle.seek(toFileOffset: 0)
        let current = [UInt8](handle.readDataToEndOfFile())
        let older = isFollowing(path + ".1") ? [] : EventHistory.readFile(path + ".1")
        let resumption = EventHistory.resume(after: cursor, older: older, current: current)
        handle.seek(toFileOffset: UInt64(resumption.offset))
        return try (resumption.resync.map { [try $0.jsonLine()] } ?? []) + resumption.lines
    }

    /// Whether `other` names the file being followed.
    private func isFollowing(_ other: String) -> Bool {
        var info = stat()
        return stat(other, &info) == 0 && (UInt(info.st_dev), UInt(info.st_ino)) == identity
    }
    mutating func skipToEnd() { handle.seekToEndOfFile() }

    /// Hands the whole lines logged so far to `output`, in chunks, leaving the follower past
    /// them (a line still being written is left for `follow`).
    mutating func printLogged(_ output: (Data) -> Void) {
        var partial = Data()
        while true {
            let chunk = handle.readData(ofLength: 64 << 10)
            if chunk.isEmpty { break }
            partial.append(chunk)
            if let lastNewline = partial.lastIndex(of: UInt8(ascii: "\n")) {
                output(Data(partial[partial.startIndex...lastNewline]))
                partial.removeSubrange(partial.startIndex...lastNewline)
            }
        }
        if !partial.isEmpty { handle.seek(toFileOffset: handle.offsetInFile - UInt64(partial.count)) }
    }

    /// Hands every whole line written from here on to `output`, for ever.
    mutating func follow(_ output: (Data) -> Void) -> Never {
        var partial = Data()
        var idle = 0
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty {
                idle += 1
                // Once a second of quiet: a new log in the file's place is read from its start.
                if idle % 100 == 0, let replaced = FileHandle(forReadingAtPath: path),
                   Self.identity(of: replaced.fileDescriptor) != identity {
                    handle = replaced
                    identity = Self.identity(of: replaced.fileDescriptor)
                    partial = Data()
                }
                usleep(10_000)
                continue
            }
            idle = 0
            partial.append(chunk)
            while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
                output(Data(partial[partial.startIndex...newline]))
                partial.removeSubrange(partial.startIndex...newline)
            }
        }
    }

    private static func identity(of descriptor: Int32) -> (device: UInt, inode: UInt) {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return (0, 0) }
        return (UInt(info.st_dev), UInt(info.st_ino))
    }
}
