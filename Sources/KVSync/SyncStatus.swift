import Foundation
import KVCloud

extension SyncEngine {
    /// How the engine stands, for the mount's root (`user.kvsfs.sync`, `kvsfs status`).
    public struct Status: Sendable, Equatable {
        /// The error the last round (or push) ended with; nil once a round succeeds.
        public var lastError: String?
        /// The wall-clock time the last round succeeded: shown to the user, never used to time
        /// anything (the engine's clock does that).
        public var lastSync: Date?
        public var initialSyncDone: Bool = false
        /// The last time the remote's history was found not to be the one this mount saw, and
        /// what was done (see `resynchronise`).
        public var lastIncident: String?
        /// What the log and the event log were last told of the remote: said again only when
        /// it changes, never once per retry.
        public var told: Told = .nothing
    }

    /// The standing last told: online, or offline for a cause (`cause(of:)`).
    public enum Told: Sendable, Equatable {
        case nothing
        case online
        case offline(cause: String, words: String)
    }

    public var status: Status { state.value }

    func noteSuccess() {
        telling.withLock { _ in noteSuccessTold() }
    }

    private func noteSuccessTold() {
        var news: SyncEvent?
        state.update {
            $0.lastError = nil
            $0.lastSync = Date()
            $0.initialSyncDone = true
            switch $0.told {
            case .online: break
            case .nothing: news = SyncEvent(reason: .online, keys: [], message: "in sync with \(remote.description)")
            case .offline(_, let words):
                news = SyncEvent(reason: .online, keys: [], message: "back in sync with \(remote.description), after: \(words)")
            }
            $0.told = .online
        }
        if let news { onEvent(news) }
    }

    /// A round or a push that failed: reported in the status, and a gap when the remote's
    /// (`noteGap`).
    func noteFailure(_ error: any Error) {
        let words = String(describing: error)
        let cause = Self.cause(of: error)
        telling.withLock { _ in
            var news: SyncEvent?
            state.update {
                $0.lastError = words
                if case .offline(cause, _) = $0.told { return }
                $0.told = .offline(cause: cause, words: words)
                news = SyncEvent(reason: .offline, keys: [], message: words)
            }
            if let news { onEvent(news) }
        }
        noteGap(after: error)
    }

    /// What makes two failures the same for the log: the kind of failure, not its words,
    /// which change with every retry (a wait, a count).
    static func cause(of error: any Error) -> String {
        guard let error = error as? CloudError else { return String(describing: error) }
        switch error {
        case .unreachable(let how, _): return "unreachable \(how)"
        case .busy: return "busy"
        // A server's words are its own: a few hundred bytes tell causes apart, and a server
        // that varies its words past them (a request id) is not said again on every retry.
        case .notAuthorized(let reason): return "token \(reason.prefix(200))"
        case .storeLimit: return "store limit"
        case .refused: return "refused"
        case .unavailable(let reason): return "unavailable \(reason.prefix(200))"
        case .notProtocol: return "not the protocol"
        case .cursorAhead, .historyDiffers, .historyMismatch: return "history"
        case .invalidStoreName: return error.description
        case .schemaMoved: return "schema moved"
        }
    }

    /// Records an incident (see `Status.lastIncident`) and reports it as a `remote-reset` event
    /// for `keys`.
    func noteIncident(_ message: String, keys: [String]) {
        state.update { $0.lastIncident = "\(SyncEvent.timeFormat.string(from: Date())) \(message)" }
        onEvent(SyncEvent(reason: .remoteReset, keys: keys, message: message))
    }
}
