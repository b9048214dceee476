/// What one open file holds, and whether what it wrote may still be committed: the rules of a
/// handle's life between open and release (`OpenFiles.swift`), kept in one place.
///
/// Who opened the handle (the applier showing a remote change, `OpenFile.shown`) is not part
/// of it: that is fixed at open and decides how a commit is done, not whether one is due.
enum HandleState {
    /// A reader: the committed value as it was at open, or at its last read from offset 0,
    /// which every read serves whole, so that a value read in several requests is one value.
    case reading(snapshot: [UInt8])
    /// A writer that has changed nothing: it reads the committed value as it is now, and its
    /// first write or truncation starts from it.
    case unchanged
    /// A writer's bytes, not yet committed: the next flush, fsync or release commits them.
    case dirty([UInt8])
    /// A writer's bytes, committed as they stand: nothing is due; the handle goes on reading
    /// them, and its next write starts from them (not from a value committed since).
    case committed([UInt8])
    /// A writer's bytes, refused at commit: every flush and fsync fails again with `reason`,
    /// and the release commits nothing and tells the refusal. The next write or truncation
    /// clears it: a shell's redirection flushes an empty duplicate before it writes, and that
    /// refusal must not doom the rest.
    case refusedAtCommit([UInt8], reason: any Error)
    /// A writer's bytes after a refused write: bytes are missing, so nothing this handle
    /// wrote will ever be committed. Terminal: every later write, truncation, flush and fsync
    /// fails with `reason`; the release commits nothing (the refusal was told at the write).
    case refusedAtWrite([UInt8], reason: any Error)

    /// The state a handle opens in: a reader's snapshot of `committed`, or a writer's
    /// (with its bytes emptied at once when the open truncates).
    static func opened(writable: Bool, truncating: Bool, committed: @autoclosure () -> [UInt8]) -> HandleState {
        guard writable else { return .reading(snapshot: committed()) }
        return truncating ? .dirty([]) : .unchanged
    }

    /// The bytes the handle reads: its own, or nil when it shows the committed value as it
    /// is now.
    var bytes: [UInt8]? {
        switch self {
        case .reading(let bytes), .dirty(let bytes), .committed(let bytes), .refusedAtCommit(let bytes, _),
             .refusedAtWrite(let bytes, _):
            bytes
        case .unchanged:
            nil
        }
    }

    /// A reader reading from offset 0 starts over on the value committed now. Writers keep theirs.
    mutating func readFromStart(committed: @autoclosure () -> [UInt8]) {
        if case .reading = self { self = .reading(snapshot: committed()) }
    }

    /// Throws the refusal a write refused earlier: no write or truncation follows one.
    func checkMayWrite() throws {
        if case .refusedAtWrite(_, let reason) = self { throw reason }
    }

    /// The handle's own bytes, taken out for a write to change in place (nil when it has none):
    /// the state no longer refers to them, so they are not copied as they grow. The write puts
    /// them back with `wrote` or `refusedWrite`.
    mutating func takeBytesForWriting() -> [UInt8]? {
        let bytes = self.bytes
        self = .unchanged
        return bytes
    }

    /// A write or truncation changed the handle's bytes to `bytes`: they are due for commit,
    /// and a refusal at commit of what they were before no longer stands.
    mutating func wrote(_ bytes: [UInt8]) {
        self = .dirty(bytes)
    }

    /// A write was refused with `reason`, leaving `bytes`: the handle is refused for good.
    mutating func refusedWrite(_ bytes: [UInt8], reason: any Error) {
        self = .refusedAtWrite(bytes, reason: reason)
    }

    /// What a flush or fsync must commit: nil when nothing is due; throws the refusal when the
    /// handle is refused (at write first: that one is for good).
    func bytesToCommit() throws -> [UInt8]? {
        switch self {
        case .refusedAtWrite(_, let reason), .refusedAtCommit(_, let reason): throw reason
        case .dirty(let bytes): return bytes
        case .reading, .unchanged, .committed: return nil
        }
    }

    /// The bytes due for commit: what a release commits, and what is worth decoding before
    /// the lock. Nil when nothing is due or the handle is refused.
    var dueBytes: [UInt8]? {
        if case .dirty(let bytes) = self { bytes } else { nil }
    }

    /// The commit of the due bytes succeeded.
    mutating func committed() {
        if case .dirty(let bytes) = self { self = .committed(bytes) }
    }

    /// The commit of the due bytes was refused with `reason`.
    mutating func refusedCommit(_ reason: any Error) {
        if case .dirty(let bytes) = self { self = .refusedAtCommit(bytes, reason: reason) }
    }

    /// Whether the handle changed bytes that are not committed (written, or refused).
    var holdsUncommittedBytes: Bool {
        switch self {
        case .dirty, .refusedAtCommit, .refusedAtWrite: true
        case .reading, .unchanged, .committed: false
        }
    }

    /// Whether the handle ends refused: what it wrote never became the value.
    var isRefused: Bool {
        switch self {
        case .refusedAtCommit, .refusedAtWrite: true
        case .reading, .unchanged, .dirty, .committed: false
        }
    }

    /// The refusal to tell when the handle is released: one at commit, which nothing told
    /// yet. (One at write was told at the write.)
    var refusalUntold: (any Error)? {
        if case .refusedAtCommit(_, let reason) = self { reason } else { nil }
    }
}
