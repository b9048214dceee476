import AsyncHTTPClient
import Foundation
import KVCloud
import KVWire
import NIOCore
import Synchronization

/// A sync server's event stream of one store (`GET .../events?after=N`, server-sent events):
/// a task reads it and queues each batch of changes, and an empty batch for each keep-alive.
/// Consumers take them with `next()`; several may wait at once, and each batch goes to one.
final class ChangeStream: Sendable {
    private struct State: Sendable {
        var queue: [ChangeBatch] = []
        var failure: (any Error)?
        var finished = false
        /// The consumers waiting, by a number of their own: a cancelled one is woken alone.
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0
        /// The cursor the consumer has taken batches up to.
        var position: Int64
    }

    /// The state, shared with the reading task.
    private final class Shared: Sendable {
        let state: Mutex<State>
        init(_ state: State) { self.state = Mutex(state) }
    }

    private let shared: Shared
    private let reader: Task<Void, Never>

    init(response: HTTPClientResponse, from cursor: Int64, base: String) {
        let shared = Shared(State(position: cursor))
        self.shared = shared
        reader = Task {
            var failure: any Error = CloudError.unavailable("\(base): the event stream ended")
            do {
                var pending = ByteBuffer()
                for try await chunk in response.body {
                    var chunk = chunk
                    pending.writeBuffer(&chunk)
                    while let event = ServerSentEvents.next(in: &pending) {
                        // A comment (keep-alive) is an empty batch.
                        ChangeStream.deliver(try ChangeEvent.batch(in: event) ?? ChangeBatch(changes: [], cursor: 0, complete: true), to: shared)
                    }
                }
            } catch {
                failure = error is DecodingError ? CloudError.notProtocol("\(base) sent an event that is not the protocol's")
                                                 : TransportFailure.cloudError(error, base: base)
            }
            let waiters = shared.state.withLock { state in
                state.finished = true
                state.failure = failure
                defer { state.waiters = [:] }
                return state.waiters.values
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    deinit { reader.cancel() }

    /// Where the consumer has got to: a stream is reused only by a caller at that cursor.
    var position: Int64 { shared.state.withLock { $0.position } }
    var isFinished: Bool { shared.state.withLock { $0.finished && $0.queue.isEmpty } }

    /// The next batch (empty for a keep-alive), waiting for it; throws once the stream ended
    /// or the waiting task is cancelled.
    func next() async throws -> ChangeBatch? {
        while true {
            let taken: Result<ChangeBatch, any Error>? = shared.state.withLock { state in
                if !state.queue.isEmpty {
                    let batch = state.queue.removeFirst()
                    if !batch.changes.isEmpty { state.position = batch.cursor }
                    return .success(batch)
                }
                if state.finished { return .failure(state.failure ?? CloudError.unavailable("the event stream ended")) }
                return nil
            }
            if let taken { return try taken.get() }
            try Task.checkCancellation()
            let id = shared.state.withLock { state in
                defer { state.nextWaiter += 1 }
                return state.nextWaiter
            }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let ready = shared.state.withLock { state in
                        guard state.queue.isEmpty, !state.finished, !Task.isCancelled else { return true }
                        state.waiters[id] = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                shared.state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
            }
        }
    }

    /// Wakes every waiter: one takes the batch, the others wait again.
    private static func deliver(_ batch: ChangeBatch, to shared: Shared) {
        let waiters = shared.state.withLock { state in
            state.queue.append(batch)
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        for waiter in waiters { waiter.resume() }
    }
}

/// The framing of server-sent events (what an event of the sync protocol holds is `ChangeEvent`'s).
public enum ServerSentEvents {
    /// Takes one event (its lines, up to a blank line) off the front of `buffer`; nil until a
    /// whole one has arrived.
    public static func next(in buffer: inout ByteBuffer) -> String? {
        let bytes = buffer.readableBytesView
        guard let end = bytes.firstRange(of: [10, 10]) else { return nil }
        let event = String(decoding: bytes[bytes.startIndex..<end.lowerBound], as: UTF8.self)
        buffer.moveReaderIndex(forwardBy: end.upperBound - bytes.startIndex)
        buffer.discardReadBytes()
        return event
    }
}
