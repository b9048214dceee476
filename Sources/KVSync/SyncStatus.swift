import Foundation

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
    }

    public var status: Status { state.value }

    func noteSuccess() {
        state.update {
            $0.lastError = nil
            $0.lastSync = Date()
            $0.initialSyncDone = true
        }
    }

    /// A round or a push that failed: reported in the status, and a gap when the remote's
    /// (`noteGap`).
    func noteFailure(_ error: any Error) {
        state.update { $0.lastError = String(describing: error) }
        noteGap(after: error)
    }

    /// Records an incident (see `Status.lastIncident`) and reports it as a `remote-reset` event
    /// for `keys`.
    func noteIncident(_ message: String, keys: [String]) {
        state.update { $0.lastIncident = "\(SyncEvent.timeFormat.string(from: Date())) \(message)" }
        onEvent(SyncEvent(reason: .remoteReset, keys: keys, message: message))
    }
}
