import Foundation
import GRDB

/// The names of devices as the store keeps them: its own (setting `device.name`), given at
/// mount or taken from the host name at the first one, and those of other devices, as the
/// remote tells them, for every view that shows a device.
extension KeyValueStore {
    /// The store's own device name: `name` when given (kept from now on), else the one kept
    /// before, else the host name's (`DeviceName.ofThisHost`). A name outside the rule is
    /// refused with why, and nothing is kept.
    @discardableResult
    public func nameDevice(_ name: String?) throws(StoreError) -> String {
        if let name {
            try DeviceName.check(name)
            if try setting(.deviceName) != name { try setSetting(.deviceName, to: name) }
            return name
        }
        if let kept = try setting(.deviceName), DeviceName.isValid(kept) { return kept }
        let host = DeviceName.ofThisHost()
        try setSetting(.deviceName, to: host)
        return host
    }

    /// The store's own device name, nil when it was never named.
    public var deviceName: String? {
        get throws(StoreError) { try setting(.deviceName).flatMap { DeviceName.isValid($0) ? $0 : nil } }
    }


    /// Keeps the names a remote told of its devices (`told`, by device id); one outside the
    /// rule is not kept, and one kept already as it is writes nothing. A new or changed one is
    /// told after every other (`told`, a sequence); past `DeviceName.keptPerStore` names, those
    /// told longest ago go.
    public func keepDeviceNames(_ told: [String: String]) throws(StoreError) {
        let named = told.filter { $0.key != deviceID && DeviceName.isValid($0.value) }
        let known = try deviceNames(of: named.keys)
        let changed = named.filter { known[$0.key] != $0.value }
        guard !changed.isEmpty else { return }
        try state.withLock { (state: inout State) throws(StoreError) in
            try write(&state) { db in
                for (device, name) in changed.sorted(by: { $0.key < $1.key }) {
                    try db.cachedStatement(sql: """
                        INSERT INTO deviceName (device, name, told) VALUES (?1, ?2, (SELECT coalesce(max(told), 0) + 1 FROM deviceName))
                        ON CONFLICT (device) DO UPDATE SET name = excluded.name, told = excluded.told
                        """).execute(arguments: [device, name])
                    try db.cachedStatement(sql: """
                        DELETE FROM deviceName WHERE device IN (SELECT device FROM deviceName ORDER BY told DESC LIMIT -1 OFFSET ?)
                        """).execute(arguments: [DeviceName.keptPerStore])
                }
            }
        }
    }

    /// The names known of `devices`, this store's own included; a device with none is left out.
    public func deviceNames(of devices: some Sequence<String>) throws(StoreError) -> [String: String] {
        var names: [String: String] = [:]
        let others = Set(devices).subtracting([deviceID])
        if Set(devices).contains(deviceID), let own = try deviceName { names[deviceID] = own }
        guard !others.isEmpty else { return names }
        do {
            try database.read { db in
                for device in others {
                    if let name = try String.fetchOne(db.cachedStatement(sql: "SELECT name FROM deviceName WHERE device = ?"), arguments: [device]),
                       DeviceName.isValid(name) {
                        names[device] = name
                    }
                }
            }
        } catch {
            throw .database(String(describing: error))
        }
        return names
    }
}
