/// How much one decoded property list may hold: bounds checked while decoding, before the
/// value is built, so that a few hundred hostile bytes cannot take the time or memory of a
/// value far over the store's limits.
///
/// A binary property list can name one object from many places; every visit counts, so a
/// list of references to references is measured by what it expands to.
public struct PropertyListDecodingLimits: Sendable, Equatable {
    /// The most arrays and dictionaries nested in one another (a scalar inside `maxDepth`
    /// arrays is accepted, one more array is not).
    public var maxDepth: Int
    /// The most values decoded, every element, key and value counted, and every visit of a
    /// shared binary object counted again.
    public var maxObjects: Int
    /// The largest canonical XML (`PropertyListCodec.encodeXML`) the decoded value may have:
    /// the caller passes the per-value quota. Decoding stops with `StoreError.valueTooLarge` as
    /// soon as the part decoded so far passes it.
    public var maxBytes: Int

    public init(maxDepth: Int = 128, maxObjects: Int = 262_144, maxBytes: Int = 1_048_576) {
        self.maxDepth = maxDepth
        self.maxObjects = maxObjects
        self.maxBytes = maxBytes
    }

    /// 128 levels, 262,144 objects, 1 MiB: the modelled store's per-value limit.
    public static let standard = PropertyListDecodingLimits()
}
