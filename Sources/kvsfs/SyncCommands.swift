import ArgumentParser
import Foundation
import FuseKit
import KVSync

/// Reads an extended attribute of a mount's root; nil when it is not a syncing kvsfs mount.
func mountAttribute(_ mountpoint: String, _ name: String) -> String? {
    var buffer = [UInt8](repeating: 0, count: 4096)
    let length = buffer.withUnsafeMutableBytes { SystemCalls.extendedAttribute(of: mountpoint, named: name, into: $0) }
    guard length >= 0 else { return nil }
    return String(decoding: buffer[..<length], as: UTF8.self)
}

/// Reads an extended attribute of a kvsfs mount's root, of at most `capacity` bytes; an error
/// says in one line why the mount did not give `what`.
func requiredMountAttribute(_ mountpoint: String, _ name: String, capacity: Int, what: String) throws -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: capacity)
    let length = buffer.withUnsafeMutableBytes { SystemCalls.extendedAttribute(of: mountpoint, named: name, into: $0) }
    guard length >= 0 else {
        let code = errno
        switch code {
        case ENODATA, ENOTSUP: throw CommandFailure("\(mountpoint) is not a kvsfs mount")
        case ENOTCONN: throw CommandFailure("\(mountpoint) is a mount whose daemon has gone away")
        default: throw CommandFailure("cannot read \(what) of \(mountpoint): \(String(cString: strerror(code)))")
        }
    }
    return Array(buffer[..<length])
}

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Push what is pending and fetch what is new, now (synchronize()).",
        discussion: """
            Returns once the remote's changes show in the mount. Fails when the remote cannot be reached or refuses the mount's token. \
            With --replace-with-remote, the store's values are replaced by the remote's instead of merged: local changes the remote \
            does not have, pending ones included, are discarded.
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Flag(help: "Replace the store's values by the remote's, discarding local changes the remote does not have.")
    var replaceWithRemote = false

    func run() throws {
        // Through the control socket, which only the mounting user (or root) may use: an act
        // on the whole store is the mount owner's alone.
        _ = try ControlClient.send(ControlRequest(command: replaceWithRemote ? .replaceWithRemote : .synchronize), to: mountpoint)
    }
}

struct Events: ParsableCommand {
    /// Every reason a line of the log may have, from the one list (`SyncEvent.Reason`); `resync`
    /// is the reader's own, said below.
    static let loggedReasons = SyncEvent.Reason.allCases.filter { $0 != .resync }.map(\.rawValue).joined(separator: "|")

    static let configuration = CommandConfiguration(
        abstract: "Print the mount's external changes as they happen, one JSON line each.",
        discussion: """
            Each line: {"cursor":N,"keys":[...],"reason":"\(Self.loggedReasons)","time":"..."} \
            (all but server-change and initial-sync also carry "message"). With --since, a reader resumes after the \
            cursor of the last line it took; when the log no longer holds what came right after it, the first line \
            is {"keys":[],"message":"...","reason":"resync","time":"..."}. With --all or --since it prints what is \
            logged and exits, as tail does; with -f too, it goes on printing events as they happen. Without either, it \
            prints events as they happen until interrupted.
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Flag(help: "Print the events already logged, then exit (with -f, go on).")
    var all = false

    @Option(help: ArgumentHelp("Print the events logged after this cursor (a resync line if they are gone), then exit (with -f, go on).",
                               valueName: "cursor"))
    var since: Int64?

    @Flag(name: [.short, .long], help: "After --all or --since, go on printing events as they happen, as tail -f does.")
    var follow = false

    func validate() throws {
        if let since, since < 0 { throw ValidationError("--since takes a cursor of 0 or more") }
        if since != nil, all { throw ValidationError("--since and --all cannot be used together") }
    }

    func run() throws {
        guard let path = mountAttribute(mountpoint, "user.kvsfs.events") else {
            throw CommandFailure("\(mountpoint) is not a kvsfs mount that syncs")
        }
        var log = try EventFollower(path: path)
        if let since {
            FileHandle.standardOutput.write(Data(try log.resume(after: since).map { $0 + "\n" }.joined().utf8))
        } else if all {
            log.printLogged { FileHandle.standardOutput.write($0) }
        } else {
            log.skipToEnd()
        }
        // What is logged is printed; following is asked for, or the only thing asked.
        if follow || (since == nil && !all) { log.follow { FileHandle.standardOutput.write($0) } }
    }
}
