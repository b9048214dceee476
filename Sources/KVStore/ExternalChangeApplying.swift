/// Takes remote changes into the local store. Returns the keys whose value changed; throws
/// when a change could not be taken in, so that the caller fetches and applies it again.
public protocol ExternalChangeApplying: Sendable {
    func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String]
}

/// Applies straight to the store: for a store that is not mounted (and in tests).
public struct StoreApplier: ExternalChangeApplying {
    let store: KeyValueStore

    public init(store: KeyValueStore) {
        self.store = store
    }

    public func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        try store.applyExternal(changes, mode: mode)
    }
}
