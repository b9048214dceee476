import KVStore

/// Any bytes, through the JSON reader.
///
/// Invariant: a value read from JSON that the JSON writer accepts reads back from what the
/// writer wrote as the same value. The writer refusing a value is not a failure; written JSON
/// that does not read, or a value that changes on the way, is.
enum JSONFuzzing {
    static func run(_ bytes: [UInt8]) {
        guard let value = try? PropertyListCodec.decodeJSON(bytes) else { return }
        guard let encoded = try? PropertyListCodec.encodeJSON(value) else { return }
        let again: PropertyListValue
        do {
            again = try PropertyListCodec.decodeJSON(encoded)
        } catch {
            fatalError("the JSON of \(value) does not decode: \(error)")
        }
        guard value.isSame(as: again) else { fatalError("\(value) decodes from its JSON as \(again)") }
    }
}
