import Foundation

extension KeyValueStore {
    /// Every key's value as one dictionary property list in `format`, taken from one snapshot
    /// of the store (no change lands halfway through). Registered defaults are the mount's,
    /// not the store's, and are not in it.
    ///
    /// Each stored value was checked when it was committed; it is decoded again within the
    /// bounds of its own canonical size, so a damaged database row is an error, not a value.
    public func exportedPropertyList(as format: ValueFormat) throws(StoreError) -> [UInt8] {
        let entries = state.withLock { $0.values.entries }
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
        let exported = try PropertyListCodec.encode(.dictionary(dictionary), as: format)
        guard format == .xml, !PropertyListCodec.carriesInXML10(exported) else { return exported }
        // A key or string holds a character (NUL, another control) that XML 1.0 cannot
        // carry: an XML reader would refuse the whole file. Say which key.
        func carried(_ key: String) -> Bool {
            guard let xml = try? PropertyListCodec.encodeXML(.dictionary([key: dictionary[key]!])) else { return false }
            return PropertyListCodec.carriesInXML10(xml)
        }
        let key = dictionary.keys.sorted().first { !carried($0) } ?? ""
        throw .invalidPropertyList("the key \(key.debugDescription) or its value holds a character an XML 1.0 property list cannot carry: export in binary")
    }
}
