import ArgumentParser

/// What the command line asks for.
struct Options: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvsfs-torture",
        abstract: "Kill a kvsfs mount daemon with SIGKILL while threads write, and check that every acknowledged change survives.")

    @Option(help: "The kvsfs binary to mount with.")
    var kvsfs: String
    @Option(help: "A fresh directory for the mountpoint, the store's data and the daemon's log.")
    var work: String
    @Option(help: "How many times the daemon is killed and the store mounted again.")
    var cycles = 50
    @Option(help: "The longest a workload runs before its daemon is killed (at a random moment from 0.2 s).")
    var seconds = 1.5
    @Option(help: "How many threads write at once.")
    var threads = 3
    @Option(help: "The seed of the workload's choices (random when not given), to run a failing one again.")
    var seed = UInt64.random(in: 1...UInt64.max)

    func validate() throws {
        guard !kvsfs.isEmpty, !work.isEmpty else { throw ValidationError("--kvsfs and --work must not be empty") }
        guard (1...100_000).contains(cycles) else { throw ValidationError("--cycles must be from 1 to 100000") }
        guard (0.2...60).contains(seconds) else { throw ValidationError("--seconds must be from 0.2 to 60") }
        guard (1...8).contains(threads) else { throw ValidationError("--threads must be from 1 to 8") }
    }
}
