import Foundation
import KVStore

/// Any bytes, through the one decoder behind every property-list format the store reads, and
/// as a key path into what they decode to.
///
/// Invariant: a value the decoder returns and the canonical XML (or binary) encoder accepts
/// decodes from that encoding to the same value. An encoder refusing a value is not a failure
/// (a date the writer cannot place); a value that changes on the way is.
enum PropertyListFuzzing {
    static func run(_ bytes: [UInt8]) {
        guard let value = try? PropertyListCodec.decode(bytes) else { return }
        // `kvsfs get FILE KEYPATH`: any path walks any value to a member or says which is missing.
        do {
            _ = try value.member(at: PropertyListKeyPath(String(decoding: bytes.prefix(256), as: UTF8.self)))
        } catch {
            if error.description.isEmpty { fatalError("a missing member is not said") }
        }
        for format in ValueFormat.allCases {
            guard let encoded = try? PropertyListCodec.encode(value, as: format) else { continue }
            let again: PropertyListValue
            do {
                again = try PropertyListCodec.decode(encoded)
            } catch {
                fatalError("the \(format) encoding of \(value) does not decode: \(error)")
            }
            guard same(value, again) else { fatalError("\(value) decodes from its \(format) encoding as \(again)") }
        }
    }

    static func same(_ a: PropertyListValue, _ b: PropertyListValue) -> Bool { a.isSame(as: b) }
}
