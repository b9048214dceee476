import Foundation

/// A change that came from elsewhere, as a program watching the mount learns of it: one per
/// batch of keys changed for one reason (the modelled store's change notification).
public struct SyncEvent: Codable, Sendable, Equatable {
    public enum Reason: String, Codable, Sendable, CaseIterable {
        /// Another device changed values.
        case serverChange = "server-change"
        /// The first download into this device's store.
        case initialSync = "initial-sync"
        /// A local write the remote refused (a quota) was rolled back to the remote's value.
        case quotaViolation = "quota-violation"
        /// No longer sent (an account change used to replace every local value): see
        /// `remoteReset`. Kept so that older event logs still read.
        case accountChange = "account-change"
        /// The remote's history is not the one this mount saw (its identity changed, or it has
        /// not reached the mount's cursor: emptied, replaced, restored from a backup). Local
        /// changes it lacks were pushed again and its changes merged; nothing local was removed.
        case remoteReset = "remote-reset"
        /// A change fetched from the remote broke the change rule (its key, stamp or value) and
        /// was not applied; `message` says why. Retrying cannot mend it, so sync goes on past it.
        case refusedRemoteChange = "refused-remote-change"
        /// Remote changes could not be taken into the local store (`message` says why): they
        /// are fetched and applied again on the next round, after a backoff.
        case applyFailed = "apply-failed"
    }

    public var time: Date
    public var reason: Reason
    public var keys: [String]
    /// For a quota violation: what the remote said; for a refused remote change: why.
    public var message: String?

    public init(time: Date = Date(), reason: Reason, keys: [String], message: String? = nil) {
        self.time = time
        self.reason = reason
        self.keys = keys
        self.message = message
    }

    /// One line of JSON, as `kvsfs events` prints it.
    public var jsonLine: String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(SyncEvent.timeFormat.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    nonisolated(unsafe) static let timeFormat: ISO8601DateFormatter = {
        let format = ISO8601DateFormatter()
        format.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return format
    }()
}

/// The mount's event stream: one JSON line per event appended to a file, which
/// `kvsfs events` follows. Each line is one `write` to a file opened with O_APPEND, so readers
/// never see half a line from a writer.
public final class EventLog: Sendable {
    public let path: String
    private let descriptor: Int32

    /// Opens the log at `path`; a log over `maximumBytes` is started afresh.
    public init(path: String, maximumBytes: Int = 4 << 20) throws {
        var info = stat()
        if stat(path, &info) == 0, Int(info.st_size) > maximumBytes { _ = truncate(path, 0) }
        descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path]) }
        self.path = path
    }

    deinit { close(descriptor) }

    public func append(_ event: SyncEvent) {
        let line = Array((event.jsonLine + "\n").utf8)
        _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    }
}
