import ArgumentParser
import Foundation
import Glibc
import KVStore

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Set every key of a dictionary property list as one change.",
        discussion: """
            Sets each key of FILE's root dictionary to its value, and with --replace removes every key the \
            dictionary does not hold, as one change to the store: one transaction, checked whole against the \
            quotas (the error names the first key that does not fit, and nothing changes), pushed together. \
            --dry-run prints what would change and changes nothing. FILE is XML, binary or OpenStep, at most \
            64 MiB; - reads standard input. Prints one line per key added, changed or removed, then a count. \
            With --if-unchanged-since CURSOR (the remote cursor `kvsfs status` shows, read before the values the \
            import was made from), the import is made through the remote, which takes it only while no key it adds, \
            changes or removes has a version after CURSOR: refused, nothing changes and one line names a key that moved.
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Argument(help: "A property list whose root is a dictionary, or - for standard input.", completion: .file(extensions: ["plist"]))
    var file: String

    @Flag(help: "Also remove every key the dictionary does not hold.")
    var replace = false

    @Flag(name: .customLong("dry-run"), help: "Print what would change; change nothing.")
    var dryRun = false

    @Option(name: .customLong("if-unchanged-since"), help: ArgumentHelp(
        "Import only while no key it changes has a version on the remote after this cursor (kvsfs status: remote cursor).",
        valueName: "cursor"))
    var ifUnchangedSince: Int64?

    func validate() throws {
        if let ifUnchangedSince, ifUnchangedSince < 0 { throw ValidationError("--if-unchanged-since takes a cursor, 0 or more") }
    }

    func run() throws {
        let bytes = try readImport()
        let answer = try ControlClient.send(ControlRequest(command: .import, replace: replace, dryRun: dryRun, ifUnchangedSince: ifUnchangedSince), body: bytes, to: mountpoint)
        let plan: ImportPlan
        do {
            plan = try JSONDecoder().decode(ImportPlan.self, from: Data(answer))
        } catch {
            throw CommandFailure("the mount at \(mountpoint) gave an answer that is not an import's")
        }
        print(Self.report(plan, dryRun: dryRun), terminator: "")
    }

    private func readImport() throws -> [UInt8] {
        let limit = ControlConnection.maximumImportBytes
        let fd = file == "-" ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CommandFailure("cannot read \(file): \(String(cString: strerror(errno)))") }
        defer { if fd != STDIN_FILENO { close(fd) } }
        let bytes: [UInt8]
        do {
            bytes = try ValueFile.readToEnd(fd, stoppingPast: limit)
        } catch {
            throw CommandFailure("cannot read \(file): \(String(cString: strerror(error.code)))")
        }
        guard bytes.count <= limit else { throw CommandFailure("\(file) is over the \(limit >> 20) MiB an import may be") }
        return bytes
    }

    /// One line per key the import changes (`add`, `change`, `remove`), then the counts.
    static func report(_ plan: ImportPlan, dryRun: Bool) -> String {
        let lines = plan.added.map { "add \(Status.printable($0))" } + plan.changed.map { "change \(Status.printable($0))" }
            + plan.removed.map { "remove \(Status.printable($0))" }
        let counts = "\(plan.added.count) added, \(plan.changed.count) changed, \(plan.removed.count) removed, \(plan.unchanged) unchanged"
        return (lines + [dryRun ? "dry run, nothing changed: \(counts)" : "imported: \(counts)"]).joined(separator: "\n") + "\n"
    }
}
