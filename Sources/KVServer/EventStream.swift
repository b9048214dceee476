import Foundation
import Hummingbird
import KVWire
import NIOCore
import Synchronization

// `GET .../events`: a store's changes as server-sent events, for as long as the client holds on.

extension SyncServer {
    /// How long an event stream goes on trusting its token before it looks it up again: a
    /// revoked token ends its streams within this time.
    static let streamTokenRecheck = Duration.seconds(1)

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
            let seen = notifier.version(of: store)
            if let (event, upTo) = recentEvents.event(of: store, after: cursor) {
                try await writer.write(event)
                cursor = upTo
                continue
            }
            let batch = try await run { try await storage.changes(in: store, after: cursor, mark: nil, limit: 4096) }
            if !batch.changes.isEmpty {
                let event = ByteBuffer(bytes: try ChangeEvent.encode(batch))
                recentEvents.keep(event, of: store, after: cursor, upTo: batch.cursor)
                try await writer.write(event)
                cursor = batch.cursor
                continue
            }
            await notifier.wait(for: store, since: seen, timeout: .seconds(10))
            // Nothing landed: the wait timed out.
            if notifier.version(of: store) == seen { try await writer.write(ByteBuffer(string: ChangeEvent.keepAlive)) }
        }
        try await writer.finish(nil)
    }

    /// Whether the token a stream was opened with still has the scope it had then.
    func stillAllowed(_ bearer: Bearer) async -> Bool {
        (try? await accounts.stillActiveScope(of: bearer.token)) == bearer.scope
    }
}

/// The last event of each store's stream, encoded once for every stream at the same cursor (a
/// store's devices wake together, at the same place). An event kept a while is still right:
/// it holds every change after its cursor up to its own, and the stream then reads on from there.
final class RecentEvents: Sendable {
    private struct Event {
        var after: Int64
        var upTo: Int64
        var bytes: ByteBuffer
    }

    private let events = Mutex<[String: Event]>([:])

    func event(of store: String, after cursor: Int64) -> (ByteBuffer, upTo: Int64)? {
        events.withLock { events in
            guard let event = events[store], event.after == cursor else { return nil }
            return (event.bytes, event.upTo)
        }
    }

    /// Keeps events of at most 64 KiB, for at most 4096 stores (any one makes room).
    func keep(_ bytes: ByteBuffer, of store: String, after cursor: Int64, upTo: Int64) {
        guard bytes.readableBytes <= 64 << 10 else { return }
        events.withLock { events in
            if events.count >= 4096, events[store] == nil, let any = events.keys.first { events[any] = nil }
            events[store] = Event(after: cursor, upTo: upTo, bytes: bytes)
        }
    }
}
