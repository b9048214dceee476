import Foundation

/// A change that came from elsewhere, as a program watching the mount learns of it: one per
/// batch of keys changed for one reason (the modelled store's change notification).
public struct SyncEvent: Codable, Sendable, Equatable {
    public enum Reason: String, Codable, Sendable, CaseIterable {
        /// Another device changed values.
        case serverChange = "server-change"
        /// The first download into this device's store.
        case initialSync = "initial-sync"
        /// A local write the remote refused (a quota, or the store's schema: `message` says
        /// which rule) was rolled back to the remote's value.
        case quotaViolation = "quota-violation"
        /// The remote could not judge a local write: its row for the key cannot be read
        /// (written by another program; `message` says why). The write stays, pending, and is
        /// pushed again every round until the row is mended; said once per write.
        case pushDeferred = "push-deferred"
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
        /// A change to each key lost to a concurrent change (`ConflictRule`) and is kept as the
        /// key's open conflict: `kvsfs conflicts` lists it, `kvsfs resolve` settles it.
        case conflict = "conflict"
        /// A write through the mount was refused (`message`: the errno and the reason): its
        /// writer was told only the errno. Rate-limited per key in the mount.
        case refusedLocalWrite = "refused-local-write"
        /// The remote answers again, or for the first time (`message`: which remote, and the
        /// cause of the offline spell it ends). Said once per change of state.
        case online = "online"
        /// The remote cannot be used (`message`: why, in words): writes stay pending. Said once
        /// per cause, not once per retry.
        case offline = "offline"
        /// The store's schema changed on the remote, and the mount took it: `message` gives
        /// its version, and how many keys hold values that break it (or that it was removed,
        /// or why this kvsfs cannot read it).
        case schemaChange = "schema-change"
        /// Changes fetched from the remote hold values that break the store's schema (set
        /// before it, which the store keeps): taken in as the remote holds them; `message`
        /// names each key, the value's type and the rule. `kvsfs schema check` lists them.
        case schemaViolation = "schema-violation"
        /// Said to a reader only (`kvsfs events --since`), never logged: the log no longer
        /// holds the events right after the reader's cursor, so the reader must look at the
        /// whole store again rather than take the events that follow for all it missed.
        case resync = "resync"
    }

    public var time: Date
    public var reason: Reason
    public var keys: [String]
    /// For a quota violation or a deferred push: what the remote said; for a refused remote
    /// change: why.
    public var message: String?
    /// The event's place in the mount's event log: one more than the event before it, across
    /// restarts and the log's rotation. Nil in lines written before events were numbered, and
    /// in a `resync`.
    public var cursor: Int64?

    public init(time: Date = Date(), reason: Reason, keys: [String], message: String? = nil, cursor: Int64? = nil) {
        self.time = time
        self.reason = reason
        self.keys = keys
        self.message = message
        self.cursor = cursor
    }

    /// One line of JSON, as `kvsfs events` prints it.
    public func jsonLine() throws -> String {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(SyncEvent.timeFormat.string(from: date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    /// An event from one line of the log; nil for a line that is not one (cut short, or
    /// written by something else).
    public init?(line: some StringProtocol) {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            // The formatter (ICU) traps on some malformed times, such as a long fraction: only
            // the shape the log writes reaches it.
            guard SyncEvent.isTimeShaped(text), let date = SyncEvent.timeFormat.date(from: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a time: \(text)"))
            }
            return date
        }
        do {
            self = try decoder.decode(SyncEvent.self, from: Data(line.utf8))
        } catch {
            return nil  // the reader passes such a line over: it names no event
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS`, then `.` and 1 to 9 digits or nothing, then `Z`: the time the log
    /// writes, in ASCII.
    static func isTimeShaped(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        let shape = Array("dddd-dd-ddTdd:dd:dd".utf8)
        guard bytes.count >= shape.count + 1, bytes.count <= shape.count + 11, bytes.last == UInt8(ascii: "Z") else { return false }
        for (byte, expected) in zip(bytes, shape) {
            if expected == UInt8(ascii: "d") ? !(0x30...0x39).contains(byte) : byte != expected { return false }
        }
        let fraction = bytes[shape.count..<bytes.count - 1]
        guard let dot = fraction.first else { return true }
        return dot == UInt8(ascii: ".") && fraction.count >= 2 && fraction.dropFirst().allSatisfy { (0x30...0x39).contains($0) }
    }

    nonisolated(unsafe) static let timeFormat: ISO8601DateFormatter = {
        let format = ISO8601DateFormatter()
        format.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return format
    }()
}
