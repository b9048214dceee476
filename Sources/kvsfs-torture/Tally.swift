import Foundation

/// The run's figures.
struct Tally {
    var cycles = 0
    var operations = 0
    /// Steps that changed the store and returned success.
    var acknowledged = 0
    /// Keys whose state after a remount contradicted an acknowledged change: must be 0.
    var lost = 0
    var kills = 0
    /// Steps in flight at a kill (that would change the store) found done, and not done.
    var happened = 0
    var notHappened = 0
    /// The errors the threads' last calls got once the daemon was killed, by errno.
    var endings: [Int32: Int] = [:]

    mutating func add(_ workers: [Worker]) {
        for worker in workers {
            operations += worker.operations
            acknowledged += worker.acknowledged
            if let ending = worker.endedBy { endings[ending.code, default: 0] += 1 }
        }
    }

    func print(after elapsed: Duration) {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let ends = endings.sorted { $0.key < $1.key }.map { "\(String(cString: strerror($0.key))) \($0.value)" }.joined(separator: ", ")
        say("""
            torture: cycles \(cycles), operations \(operations), changes acknowledged \(acknowledged), lost \(lost), \
            kills \(kills), time \(String(format: "%.1f", seconds)) s
            torture: steps in flight at a kill: \(happened) happened, \(notHappened) did not; the threads' last calls got: \(ends.isEmpty ? "-" : ends)
            """)
    }
}

/// Prints a line at once, even when standard output is a pipe.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
