import Foundation
import Glibc
import KVTestSupport
import Logging
import Testing
@testable import kvsfs

/// The daemons' log lines: one message is one line, whatever words from outside it holds.
@Suite("The daemon log")
struct DaemonLogTests {
    @Test("control characters are written out, so a message cannot fake a line or a journald priority")
    func oneLine() {
        let hostile = "refused\n<2>kvsfs[1] critical: forged\r\u{1B}[31m\tend"
        let line = DaemonLogHandler.oneLine(hostile)
        #expect(line == "refused\\n<2>kvsfs[1] critical: forged\\r\\u{1b}[31m\\tend")
        #expect(!line.contains("\n"))
        #expect(DaemonLogHandler.oneLine(#"a\nb"#) == #"a\\nb"#, "a backslash written by the message is doubled")
    }

    @Test("a line is cut at 8192 bytes")
    func cut() {
        let line = DaemonLogHandler.oneLine(String(repeating: "é", count: 10_000))
        #expect(line.utf8.count <= DaemonLogHandler.maximumLineBytes)
        #expect(line.hasSuffix("..."))
    }

    @Test("journald gets the syslog priority of each level")
    func priorities() {
        #expect(DaemonLogHandler.priority(.warning) == 4)
        #expect(DaemonLogHandler.priority(.error) == 3)
        #expect(DaemonLogHandler.priority(.info) == 6)
        #expect(DaemonLogHandler.priority(.debug) == 7)
    }

    @Test("the journal is written to only when JOURNAL_STREAM names standard error")
    func journalStream() {
        var info = stat()
        #expect(fstat(STDERR_FILENO, &info) == 0)
        #expect(DaemonLogHandler.standardErrorIsJournal(["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"]))
        #expect(!DaemonLogHandler.standardErrorIsJournal(["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino + 1)"]))
        #expect(!DaemonLogHandler.standardErrorIsJournal(["JOURNAL_STREAM": "garbage"]))
        #expect(!DaemonLogHandler.standardErrorIsJournal([:]))
    }

    @Test("--log-level and -d choose the level; an unknown level is refused")
    func levels() throws {
        #expect(try LogOptions.parse([]).chosenLevel == .info)
        #expect(try LogOptions.parse(["-d"]).chosenLevel == .debug)
        #expect(try LogOptions.parse(["--log-level", "warning"]).chosenLevel == .warning)
        #expect(throws: (any Error).self) { try LogOptions.parse(["--log-level", "loud"]) }
    }
}
