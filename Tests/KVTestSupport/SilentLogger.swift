import Logging

extension Logger {
    /// A logger that drops everything: for file systems whose refusals a test checks itself.
    public static let silent = Logger(label: "kvsfs.test") { _ in SwiftLogNoOpLogHandler() }
}
