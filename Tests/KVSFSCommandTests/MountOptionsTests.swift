import Foundation
import Testing
@testable import kvsfs

/// The mount(8) form's `-o` options against `kvsfs mount`'s: one spelling for each.
@Suite("mount -o spellings")
struct MountOptionsTests {
    @Test("every kvsfs mount option has an -o spelling (--store is the mount(8) form's device)")
    func everyOptionIsSpelled() {
        let help = Mount.helpMessage(columns: 400)
        // Each option's line starts with it (its help may name other commands' options).
        let options = Swift.Set(help.split(separator: "\n").compactMap { line in
            line.firstMatch(of: /^\s+(--[a-z][a-z-]*)/).map { String($0.output.1) }
        })
        let spelled = Swift.Set(MountOptions.valued.values).union(MountOptions.flags.values).union(["--store", "--help"])
        #expect(options.contains("--history-versions"), "the help lists the options: \(help)")
        #expect(options.subtracting(spelled).isEmpty, "kvsfs mount options with no -o spelling: \(options.subtracting(spelled).sorted())")
    }

    @Test("history_versions and history_days become --history-versions and --history-days")
    func historyOptions() throws {
        let options = try MountOptions(store: "default", mountpoint: "/mnt/kv", options: "history_versions=3,history_days=7,rw")
        #expect(options.arguments == ["--store", "default", "/mnt/kv", "--history-versions", "3", "--history-days", "7"])
    }
}
