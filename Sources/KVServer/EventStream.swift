import Foundation
import Hummingbird
import KVCloud
import KVWire
import NIOCore
import Synchronization

// `GET .../events`: a store's changes as server-sent events, for as long as the client holds on.

extension SyncServer {
    /// How long an event stream goes on trusting its token before it looks it up again: a
    /// revoked token ends its streams within this time, and the storage's own sharing of such
    /// looks (`TokenRechecks`, at most as long again): within a second in all.
    static let streamTokenRecheck = Duration.milliseconds(500)

    /// Writes every batch of changes after `cursor` as an event as soon as it lands, and a
    /// comment every 10 s so that a dead connection is found; ends when `allowed` turns false
    /// (a revoked token), at shutdown, or when the client goes away (a write fails).
    func streamChanges(of store: String, after cursor: Int64, while allowed: () async -> Bool,
                       to writer: inout any ResponseBodyWriter) async throws {
        var cursor = cursor
        // The request was authorized just now; the token is looked up again at most once a
        // `streamTokenRecheck`, not for every event.
        var checked = ContinuousClock.now
        while !notifier.isClosed {
            if ContinuousClock.now - checked >= Self.streamTokenRecheck {
                guard await allowed() else { break }
                checked = .now
            }
            let after = cursor
            let read = try await storeReads.read(of: store, after: after, seen: notifier.version(of: store)) { [self] in
                try await run { try await storage.changes(in: store, after: after, mark: nil, limit: 4096) }
            }
            if let event = read.event {
                try await writer.write(event)
                cursor = read.upTo
                // More than one event's worth: read on at once.
                if !read.complete { continue }
            }
            // Everything up to the version read before the read began is written: a change
            // since has moved the version on, and the wait ends at once.
            await notifier.wait(for: store, since: read.seen, timeout: .seconds(10))
            // Nothing landed: the wait timed out.
            if notifier.version(of: store) == read.seen { try await writer.write(ByteBuffer(string: ChangeEvent.keepAlive)) }
        }
        try await writer.finish(nil)
    }

    /// Whether the token a stream was opened with still has the scope it had then.
    func stillAllowed(_ bearer: Bearer) async -> Bool {
        (try? await accounts.stillActiveScope(of: bearer.token)) == bearer.scope
    }
}

/// A store's changes after a cursor, read once for every stream at that cursor: the streams of
/// a store's devices wake together, at the same place, and share one read of the storage and
/// one encoding. A read that found changes is kept for streams that come later: it is still
/// right, as it holds every change after its cursor up to its own, and the stream reads on
/// from there; for `keptFor` at most, so that a store restored from a backup under a running
/// server is soon read afresh. One that found none is shared only while it runs (the next
/// push outdates it).
final class StoreReads: Sendable {
    struct Read: Sendable {
        /// The changes after the cursor as one event; nil when there were none.
        var event: ByteBuffer?
        /// The cursor the event reaches.
        var upTo: Int64
        /// Whether the event holds every change the store had when the read began.
        var complete: Bool
        /// The store's notifier version read before the read began.
        var seen: UInt64
    }

    private struct Entry {
        var after: Int64
        var id: UInt64
        var begun: ContinuousClock.Instant
        var task: Task<Read, any Error>
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var lastID: UInt64 = 0
    }

    /// Reads kept for at most this many stores (any one makes room), each of at most 64 KiB.
    private static let stores = 4096
    private static let keptBytes = 64 << 10
    private static let keptFor = Duration.seconds(10)
    private let state = Mutex(State())

    /// The changes of `store` after `cursor`: the read a stream at the same cursor began, or a
    /// new one (`fetch`) begun when the store's notifier had version `seen`.
    func read(of store: String, after cursor: Int64, seen: UInt64,
              _ fetch: @escaping @Sendable () async throws -> ChangeBatch) async throws -> Read {
        let task = state.withLock { state -> Task<Read, any Error> in
            let now = ContinuousClock.now
            if let entry = state.entries[store], entry.after == cursor, now - entry.begun < Self.keptFor { return entry.task }
            state.lastID &+= 1
            let id = state.lastID
            // It runs to its end even when the stream that began it goes away: others await it.
            let task = Task { [self] () async throws -> Read in
                do {
                    let batch = try await fetch()
                    let event = batch.changes.isEmpty ? nil : ByteBuffer(bytes: try ChangeEvent.encode(batch))
                    if (event?.readableBytes ?? .max) > Self.keptBytes { forget(store, id) }
                    return Read(event: event, upTo: batch.cursor, complete: batch.complete, seen: seen)
                } catch {
                    forget(store, id)
                    throw error
                }
            }
            if state.entries.count >= Self.stores, state.entries[store] == nil, let other = state.entries.keys.first {
                state.entries[other] = nil
            }
            state.entries[store] = Entry(after: cursor, id: id, begun: now, task: task)
            return task
        }
        return try await task.value
    }

    /// Stops sharing read `id` of `store`, unless another took its place.
    private func forget(_ store: String, _ id: UInt64) {
        state.withLock { state in
            if state.entries[store]?.id == id { state.entries[store] = nil }
        }
    }
}
