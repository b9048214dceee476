import ArgumentParser
import Foundation
import Glibc
import KVCloud
import KVSFS
import KVStore

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the versions the remote keeps of a key, or print one of them.",
        discussion: """
            One line per version, newest first: its number, when and on which device the change was made (its id, then its name when the remote keeps one), the \
            value's type (removed for a removal) and its size in bytes. The remote keeps the last 16 versions of \
            each key and a removed key's history for 30 days, unless its store says otherwise; a change not yet \
            pushed is not listed. Works for a removed key too: name the file it had.
            """)

    @Argument(help: "A key's file in a mount (it need not exist).")
    var path: String

    @Option(help: ArgumentHelp("Print this version's value instead, as kvsfs get prints one.", valueName: "version"))
    var show: Int64?

    func validate() throws {
        if let show, show < 1 { throw ValidationError("--show takes a version number, 1 or more") }
    }

    func run() throws {
        let key = try KeyFile(path)
        if let show {
            let value = try key.value(ofVersion: show)
            print(try ValueText.plain(value), terminator: "")
            return
        }
        let versions = try key.history()
        guard !versions.isEmpty else { throw CommandFailure("the remote keeps no history of \(key.name.debugDescription)") }
        print(Self.table(versions), terminator: "")
    }

    /// Columns as `ls -l` aligns them, under a heading line.
    static func table(_ versions: [KeyVersion]) -> String {
        let rows = [["VERSION", "TIME", "DEVICE", "TYPE", "SIZE"]] + versions.map { version in
            [String(version.version), version.stamp.timeText,
             Conflicts.visible(DeviceName.shown(version.stamp.device, named: version.deviceName.flatMap { DeviceName.isValid($0) ? $0 : nil })),
             version.type?.rawValue ?? "removed", String(version.size)]
        }
        let widths = (0..<5).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { column, text in
                column == 4 ? text : text.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }.joined(separator: "  ") + "\n"
        }.joined()
    }

}

struct Revert: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a version the remote keeps back to its key, as a new change.",
        discussion: """
            The version's value is written to the key's file, as any write is: quotas apply, the change syncs \
            and watchers see it. Reverting to a removal removes the key.
            """)

    @Argument(help: "A key's file in a mount (it need not exist).")
    var path: String

    @Argument(help: "A version number, as kvsfs history lists them.")
    var version: Int64

    func validate() throws {
        if version < 1 { throw ValidationError("the version number must be 1 or more") }
    }

    func run() throws {
        let key = try KeyFile(path)
        let found = try key.keptVersion(version)
        if found.isRemoval {
            guard found.value == nil else { throw CommandFailure("the remote sent version \(version) as a removal with a value") }
            if unlink(path) != 0, errno != ENOENT { throw CommandFailure("cannot remove \(path): \(explain(errno))") }
            return
        }
        // Checked before it reaches the file: what a remote sent is not trusted to be a value.
        _ = try key.value(of: found)
        try ValueFile.write(Array(found.value ?? Data()), to: path, key: key)
    }
}

/// A key named by its file in a mount, and what the mount's remote keeps of it.
///
/// Invariant: the directory holding the file is the root of a kvsfs mount, so that a command
/// that reads, writes or removes a key never touches a file anywhere else.
struct KeyFile {
    let path: String
    let mountpoint: String
    let name: String

    /// Keys are the mount's top-level files: the directory holding `path` must be a kvsfs
    /// mount (`fuse.kvsfs` in /proc/self/mountinfo), else the command is refused in one line.
    init(_ path: String) throws {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        let directory = url.deletingLastPathComponent().path
        guard let resolved = realpath(directory, nil) else {
            throw CommandFailure("\(path) is not in a kvsfs mount: \(directory): \(explain(errno))")
        }
        let mount = String(cString: resolved)
        free(resolved)
        guard ControlClient.isKVSFSMount(mount) else {
            throw CommandFailure("\(path) is not in a kvsfs mount: nothing was read, written or removed")
        }
        guard let key = KeyFileName.key(forFileName: url.lastPathComponent), !EditorFileRule.isEditorFile(url.lastPathComponent) else {
            throw CommandFailure("\(path) names no key: its file name is not one a key shows as")
        }
        self.path = path
        mountpoint = directory
        name = key
    }

    func history() throws -> [KeyVersion] {
        let answer = try ControlClient.send(ControlRequest(command: .history, key: name), to: mountpoint)
        let versions = try decodeAnswer([KeyVersion].self, answer)
        for version in versions { try check(version) }
        return versions
    }

    /// What the remote sent is printed and written back: each version must meet the rules a
    /// remote keeps them by (a version number, a stamp by the stamp rule, a size) before it is.
    private func check(_ version: KeyVersion) throws {
        do {
            try StampRule().checkFields(version.stamp)
        } catch {
            throw CommandFailure("the remote sent version \(version.version) of \(name.debugDescription) with a stamp outside the rule: \(error)")
        }
        guard version.version > 0, version.size >= 0, (0...StampRule.latestTime).contains(version.acceptedAt) else {
            throw CommandFailure("the remote sent a version of \(name.debugDescription) outside the rules (number \(version.version), size \(version.size))")
        }
    }

    /// `version` as the remote keeps it; refused when it keeps no such version, or answers
    /// with another one.
    func keptVersion(_ version: Int64) throws -> KeyVersion {
        let answer = try ControlClient.send(ControlRequest(command: .version, key: name, version: version), to: mountpoint)
        guard let found = try decodeAnswer(KeyVersion?.self, answer) else {
            throw CommandFailure("the remote keeps no version \(version) of \(name.debugDescription)")
        }
        guard found.version == version else { throw CommandFailure("the remote answered with version \(found.version), not \(version)") }
        try check(found)
        return found
    }

    /// The value of `version`; refused for a version the remote does not keep, or a removal.
    func value(ofVersion version: Int64) throws -> PropertyListValue {
        let found = try keptVersion(version)
        guard !found.isRemoval else {
            throw CommandFailure("version \(version) of \(name.debugDescription) is its removal: it has no value")
        }
        return try value(of: found)
    }

    /// The value a version carries, checked against the value rule and the type the remote
    /// listed for it.
    func value(of found: KeyVersion) throws -> PropertyListValue {
        let described = "version \(found.version) of \(name.debugDescription)"
        guard let bytes = found.value, let type = found.type else { throw CommandFailure("the remote sent \(described) without its value") }
        let value: PropertyListValue
        do {
            value = try PropertyListCodec.decode([UInt8](bytes))
        } catch {
            throw CommandFailure("\(described) is not a value the store accepts: \(error)")
        }
        guard value.type == type else { throw CommandFailure("\(described) is listed as \(type.rawValue) but holds another type") }
        return value
    }

    private func decodeAnswer<T: Decodable>(_ type: T.Type, _ answer: [UInt8]) throws -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(answer))
        } catch {
            throw CommandFailure("the mount at \(mountpoint) gave an answer that is not one")
        }
    }
}
