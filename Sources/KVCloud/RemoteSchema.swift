import Foundation
import KVStore
import Synchronization

/// A store's schema as its remote keeps it: a version of its own, apart from the keys' changes.
public struct RemoteSchema: Sendable, Equatable, Codable {
    /// 0 while the store never had a schema; each set or removal adds one.
    public var version: Int64
    /// The property list as it was set (in any format `KeySchema` reads); nil when there is none.
    public var text: [UInt8]?

    public init(version: Int64, text: [UInt8]?) {
        self.version = version
        self.text = text
    }

    /// What a store without a schema has.
    public static let none = RemoteSchema(version: 0, text: nil)

    private enum CodingKeys: String, CodingKey {
        case version, text
    }

    /// The text as `Data` (base64 in JSON), not as an array of numbers four times its size.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
        try container.encode(text.map { Data($0) }, forKey: .text)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = try container.decode(Int64.self, forKey: .version)
        text = try container.decodeIfPresent(Data.self, forKey: .text).map { [UInt8]($0) }
    }
}

/// How a remote takes a schema to set: read by `KeySchema`'s rule, or refused with its words
/// (and the remote changes nothing).
package enum SchemaAdmission {
    /// The schema `text` is, nil for a removal; `CloudError.refused` with the reason when
    /// `KeySchema` refuses it.
    package static func admit(_ text: [UInt8]?) throws(CloudError) -> KeySchema? {
        guard let text else { return nil }
        do {
            return try KeySchema(decoding: text)
        } catch {
            throw .refused(error.description)
        }
    }

    /// Throws `schemaMoved` unless the store's schema is at `expected` (when given).
    package static func check(_ expected: Int64?, current: Int64) throws(CloudError) {
        if let expected, expected != current { throw .schemaMoved(current: current) }
    }
}

/// Each store's schema as last decoded, by its version: a push reads the store's schema
/// version in its transaction, and the text is read and decoded again only when that moved.
/// One entry per store (the newest version seen); one cache per opened storage, as versions
/// name texts only within one remote.
package final class DecodedSchemas: Sendable {
    private let decoded = Mutex<[String: (version: Int64, schema: KeySchema?)]>([:])

    package init() {}

    /// The schema of `store` at `version` as decoded before; nil when it was not (`.some(nil)`:
    /// the store had none at that version).
    package func cached(_ store: String, at version: Int64) -> KeySchema?? {
        if version == 0 { return .some(nil) }
        guard let kept = decoded.withLock({ $0[store] }), kept.version == version else { return nil }
        return .some(kept.schema)
    }

    /// `text`, the schema of `store` at `version`, decoded and kept. A stored text that does
    /// not decode (written by another program) fails the store's pushes rather than let
    /// values past a rule nobody can read.
    package func decode(_ text: [UInt8]?, of store: String, at version: Int64) throws(CloudError) -> KeySchema? {
        let schema: KeySchema?
        do {
            schema = try text.map { (text) throws(StoreError) in try KeySchema(decoding: text) }
        } catch {
            throw .unavailable("the schema of store \(store) (version \(version)) cannot be read: \(error)")
        }
        decoded.withLock { $0[store] = (version, schema) }
        return schema
    }

    /// The schema of `store` at `version`: the one decoded before, or `read()`'s text decoded.
    package func schema(of store: String, at version: Int64, read: () throws -> [UInt8]?) throws -> KeySchema? {
        if let cached = cached(store, at: version) { return cached }
        return try decode(try read(), of: store, at: version)
    }
}
