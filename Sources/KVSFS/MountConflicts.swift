import FoundationEssentials
import FuseKit
import KVStore

/// A conflict settled (`kvsfs resolve`) as the mount shows it: the store takes the kept side
/// as a new change (`KeyValueStore.settle`), and, as after an import, the key's node is brought
/// along and the kernel told to forget what it holds of the key.
extension KeyValueFileSystem {
    /// Keeps `side`, one of `conflict`'s lost changes or its won one, as a new change of its key.
    public func settle(_ conflict: KeyConflict, keeping side: KeptChange) throws {
        if configuration.readOnly { throw StoreError.readOnly("the mount is read-only") }
        var notices: [KernelNotice] = []
        try state.withLock { ns throws in
            var removedContent: [InodeNumber: [UInt8]] = [:]
            if let node = ns.names[KeyFileName.fileName(forKey: conflict.key)], node.key == conflict.key, node.openHandles > 0 {
                removedContent[node.inode] = content(of: node)
            }
            let (before, after) = try store.settle(conflict, keeping: side)
            notices = switch (before, after) {
            case (nil, nil): []
            case (nil, .some): show(added: [conflict.key], changed: [], removed: [], removedContent: [:], in: &ns)
            case (.some, nil): show(added: [], changed: [], removed: [conflict.key], removedContent: removedContent, in: &ns)
            case (.some, .some): show(added: [], changed: [conflict.key], removed: [], removedContent: [:], in: &ns)
            }
        }
        tell(notices, of: "a settled conflict")
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
