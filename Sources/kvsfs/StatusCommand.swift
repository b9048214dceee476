import ArgumentParser
import Foundation
import FuseKit
import KVSFS

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a mount's store, its use of the quotas, and where sync stands.",
        discussion: """
            Prints one fact a line: the store, its data directory and database, the remote and whether the last round \
            with it succeeded, when a sync last succeeded, the pending changes, the open conflicts, bytes and keys used of \
            their quotas, the per-value and key-name limits, the store's schema with how many keys do not conform to it, the event log with its last cursor, and the remote's cursor up to which the mount has taken in every change (what kvsfs import --if-unchanged-since takes). With --json, the same facts as one JSON \
            object whose fields kvsfs(1) lists. The mount's root holds them as extended attributes too (getfattr -d).
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Flag(help: "Print one JSON object instead (fields in kvsfs(1)).")
    var json = false

    func run() throws {
        let status: MountStatus
        do {
            status = try MountStatus(json: try Self.statusAttribute(of: mountpoint))
        } catch let error as StatusError {
            throw CommandFailure("\(mountpoint) gave \(error)")
        }
        print(json ? try status.json() : Self.lines(of: status).map { "\($0.label) \(Self.printable($0.value))" }.joined(separator: "\n"))
    }

    /// `user.kvsfs.status` of the mount's root, as the daemon answers it.
    static func statusAttribute(of mountpoint: String) throws -> [UInt8] {
        try requiredMountAttribute(mountpoint, "user.kvsfs.status", capacity: MountStatus.maximumJSONBytes, what: "the status")
    }

    /// The facts in the order they are printed, labels padded to one column.
    static func lines(of status: MountStatus) -> [(label: String, value: String)] {
        let facts: [(String, String)] = [
            ("store", status.store ?? "unknown"),
            ("data directory", status.dataDirectory ?? "unknown"),
            ("database", status.database ?? "unknown"),
            ("remote", status.remote ?? "none"),
            ("reachable", status.offlineReason.map { "offline: \($0)" } ?? status.reachable.rawValue),
            ("last sync", status.lastSync.map(MountStatus.text(of:)) ?? "never"),
            ("pending", "\(status.pending) change\(status.pending == 1 ? "" : "s")"),
            ("conflicts", "\(status.conflicts) open" + (status.conflicts == 0 ? "" : " (\(status.conflictBytes) bytes kept)")),
            ("bytes", "\(status.bytes.used) of \(status.bytes.quota) used"),
            ("keys", "\(status.keys.used) of \(status.keys.quota) used"),
            ("value limit", "\(status.valueLimit) bytes"),
            ("key-name limit", "\(status.keyNameLimit) bytes"),
            ("schema", status.schemaVersion == 0 ? "none"
                : "version \(status.schemaVersion), \(status.nonConforming) key\(status.nonConforming == 1 ? "" : "s") not conforming"),
            ("event log", status.eventLog.map { path in "\(path) (last cursor \(status.eventCursor ?? 0))" } ?? "none"),
            ("remote cursor", status.remote == nil ? "none" : status.remoteCursor.map { "\($0) (every change up to it taken in)" } ?? "not known yet"),
        ]
        let width = facts.map(\.0.count).max() ?? 0
        return facts.map { (label: $0.0 + ":" + String(repeating: " ", count: width - $0.0.count), value: $0.1) }
    }

    /// A value as one line a terminal shows as it is: control characters become spaces.
    static func printable(_ value: String) -> String {
        String(String.UnicodeScalarView(value.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
    }
}
