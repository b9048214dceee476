import FoundationEssentials
import FuseKit
import KVStore

/// A conflict settled (`kvsfs resolve`) as the mount shows it: the store takes the kept side
/// as a new change (`KeyValueStore.settle`), and, as after an import, the applier shows it
/// through the mount (`showChanged`).
extension KeyValueFileSystem {
    /// Keeps `side`, one of `conflict`'s lost changes or its won one, as a new change of its key.
    public func settle(_ conflict: KeyConflict, keeping side: KeptChange) throws {
        if configuration.readOnly { throw StoreError.readOnly("the mount is read-only") }
        var removedContent: [InodeNumber: [UInt8]] = [:]
        let (before, after) = try state.withLock { ns throws in
            if let node = ns.names[KeyFileName.fileName(forKey: conflict.key)], node.key == conflict.key, node.openHandles > 0 {
                removedContent[node.inode] = content(of: node)
            }
            do {
                return try store.settle(conflict, keeping: side)
            } catch {
                // The value kept refused by a rule, told as a refused write; not a conflict that
                // moved on, which the command line says.
                if case StoreError.conflictChanged = error {} else { tell(refusalOf: conflict.key, error) }
                throw error
            }
        }
        let key = [conflict.key]
        switch (before, after) {
        case (nil, nil): break
        case (nil, .some): showChanged(added: key, changed: [], removed: [], removedContent: [:], of: "a settled conflict")
        case (.some, nil): showChanged(added: [], changed: [], removed: key, removedContent: removedContent, of: "a settled conflict")
        case (.some, .some): showChanged(added: [], changed: key, removed: [], removedContent: [:], of: "a settled conflict")
        }
    }
}

extension KeyConflict {
    /// Every change in one line, as `user.kvsfs.conflict` gives them:
    /// `lost TIME DEVICE TYPE SIZE; won TIME DEVICE TYPE SIZE`, with one `lost …; ` for each
    /// change that lost, newest first; each time ISO 8601 UTC to the millisecond, each device
    /// its id with its name in parentheses when one is known (`names`, by id), the type
    /// `removed` (and no size) for a removal.
    func summary(names: [String: String]) -> String {
        (lost.map { "lost \(Self.summary(of: $0, names: names))" } + ["won \(Self.summary(of: won, names: names))"]).joined(separator: "; ")
    }

    private static func summary(of side: KeptChange, names: [String: String]) -> String {
        let time = side.stamp.timeText
        let device = DeviceName.shown(side.stamp.device, named: names[side.stamp.device])
        guard let type = side.type, let value = side.value else { return "\(time) \(device) removed" }
        return "\(time) \(device) \(type.rawValue) \(value.count)"
    }
}
