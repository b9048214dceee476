import Foundation

extension KeyValueStore {
    /// Every key's value as one dictionary property list in `format`, taken from one snapshot
    /// of the store (no change lands halfway through). Registered defaults are the mount's,
    /// not the store's, and are not in it.
    ///
    /// Each stored value was checked when it was committed; it is decoded again within the
    /// bounds of its own canonical size, so a damaged database row is an error, not a value.
    public func exportedPropertyList(as format: ValueFormat) throws(StoreError) -> [UInt8] {
        let entries = state.withLock { $0.entries }
        var dictionary = [String: PropertyListValue](minimumCapacity: entries.count)
        for (key, entry) in entries {
            let limits = PropertyListDecodingLimits(maxObjects: max(PropertyListDecodingLimits.standard.maxObjects, entry.xml.count),
                                                    maxBytes: entry.xml.count)
            do {
                dictionary[key] = try PropertyListCodec.decode(entry.xml, limits: limits)
            } catch {
                throw .invalidPropertyList("the stored value of \(key.debugDescription) no longer decodes: \(error)")
            }
        }
        do {
            return try PropertyListCodec.encode(.dictionary(dictionary), as: format)
        } catch {
            // Keys may hold characters (NUL, other controls) that XML cannot carry; say which.
            func xmlCarries(_ key: String) -> Bool {
                do {
                    _ = try PropertyListCodec.encodeXML(.string(key))
                    return true
                } catch {
                    return false
                }
            }
            if format == .xml, let key = dictionary.keys.sorted().first(where: { !xmlCarries($0) }) {
                throw .invalidPropertyList("the key \(key.debugDescription) holds a character an XML property list cannot carry: export in binary")
            }
            throw error
        }
    }
}
