import CFuse
import Glibc
import Synchronization

/// How an operation that may wait long is answered: now, or later from another thread.
///
/// A request thread that waits (on the network, say) is one fewer of libfuse's few threads
/// for every other request; with `later` it returns at once and the answer is sent when the
/// work ends.
public enum Answer {
    /// Answered now with success (a failure is thrown instead).
    case now
    /// Answered later: `start` is given the request's `Reply` on the request thread, begins
    /// the work and returns at once; whoever ends the work answers the reply, from any thread.
    case later(_ start: (Reply) -> Void)
}

/// The reply owed to one request, answered later from any thread: exactly once.
///
/// Invariant: the request gets one answer on every path: the first `answer` sends it and
/// later ones do nothing; a reply dropped unanswered sends EIO; a session that ends first
/// answers it with ENOTCONN (`OutstandingReplies`), after which an answer does nothing.
public final class Reply: Sendable {
    private let fileSystem: any FuseFileSystem
    private let deliver: @Sendable (Int32) -> Void
    private let answered = Atomic(false)

    /// A reply whose errno goes to `deliver`, mapped by `fileSystem`: how FuseKit answers a
    /// request, and how a file system's own tests, with no kernel, see the answer.
    public init(errnoFrom fileSystem: any FuseFileSystem, deliver: @escaping @Sendable (Int32) -> Void) {
        self.fileSystem = fileSystem
        self.deliver = deliver
    }

    /// Answers the request: success, or the errno the file system maps the failure to.
    public func answer<Failure: Error>(_ result: Result<Void, Failure>) {
        switch result {
        case .success: send(0)
        case .failure(let error): send(fileSystem.errno(for: error))
        }
    }

    private func send(_ code: Int32) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        deliver(code)
    }

    deinit {
        // Dropped by a file system that never answered: the caller is not left waiting.
        send(EIO)
    }
}

/// The requests of a session whose replies are owed (`Reply`), so that none outlives it.
///
/// Invariant: a request is answered under `state`'s lock, at most once, and only while the
/// session is open; `endAll` answers what is still owed and closes, before the session is
/// unmounted and destroyed, so that no reply is ever sent through a session that is gone.
final class OutstandingReplies: Sendable {
    private struct State {
        var next: UInt64 = 0
        /// The owed requests (their `fuse_req_t` as a bit pattern), by a number of their own.
        var owed: [UInt64: UInt] = [:]
        var open = true
    }

    private let state = Mutex(State())

    /// A reply for `request`, which the session now owes.
    func reply(to request: fuse_req_t, errnoFrom fileSystem: any FuseFileSystem) -> Reply {
        let raw = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(request)))
        let id: UInt64? = state.withLock { state in
            guard state.open else { return nil }
            state.next += 1
            state.owed[state.next] = raw
            return state.next
        }
        guard let id else {
            fuse_reply_err(request, ENOTCONN)
            return Reply(errnoFrom: fileSystem) { _ in }
        }
        return Reply(errnoFrom: fileSystem) { [self] code in send(code, to: id) }
    }

    private func send(_ code: Int32, to id: UInt64) {
        state.withLock { state in
            guard state.open, let raw = state.owed.removeValue(forKey: id) else { return }
            fuse_reply_err(OpaquePointer(bitPattern: raw), code)
        }
    }

    /// Answers every request still owed with `code` and sends nothing more: the session is ending.
    func endAll(with code: Int32) {
        state.withLock { state in
            state.open = false
            for raw in state.owed.values { fuse_reply_err(OpaquePointer(bitPattern: raw), code) }
            state.owed = [:]
        }
    }
}
