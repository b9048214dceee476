/// A setting kept with the store, by its one name and its type. Every setting a module keeps
/// beside the store is named here, once (the quota limits, which the store alone reads and
/// writes, are named with their table in `StoreDatabase`): no two modules can spell one
/// differently, and none reads another's as the wrong type.
public struct StoreSetting<Value: Sendable>: Sendable {
    public let name: String
    let text: @Sendable (Value) -> String
    let value: @Sendable (String) -> Value?
}

extension StoreSetting where Value == String {
    private init(name: String) {
        self.init(name: name, text: { $0 }, value: { $0 })
    }

    /// This device's id among the remote's writers, made at the store's creation.
    public static let deviceID = StoreSetting(name: "device.id")
    /// The name this device gives itself (`DeviceName`), told with its changes.
    public static let deviceName = StoreSetting(name: "device.name")
    /// The identity of the remote the store last synced with: another one means a remote reset.
    public static let remoteIdentity = StoreSetting(name: "sync.remote")
    /// Where sync stands with the remote, as sync writes it (its cursor and history mark).
    public static let syncPosition = StoreSetting(name: "sync.cursor")
}

extension StoreSetting where Value == Int64 {
    /// The event log's last cursor, kept beside the store so that a log deleted or cut short
    /// never numbers again from less.
    public static let eventLogCursor = StoreSetting(name: "eventLogCursor", text: { String($0) }, value: { Int64($0) })
}
