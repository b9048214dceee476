import Foundation
import KVStore

/// Any bytes, as a store's schema and as a pattern in one.
///
/// Invariants: reading never traps; a schema that is read takes each of its own defaults; a
/// pattern that is read matches any text within its stated bound, (characters + 1) × its
/// program's length visits, and agrees with itself when matched twice.
enum SchemaFuzzing {
    static func run(_ bytes: [UInt8]) {
        if let schema = try? KeySchema(decoding: bytes) {
            for (key, value) in schema.defaults where schema.violation(key: key, value: value) != nil {
                fatalError("the schema refuses its own default of \(key): \(bytes)")
            }
            _ = schema.violation(key: "fuzz", value: .string(String(decoding: bytes, as: UTF8.self)))
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { return }
        let subject = String(text.reversed()) + text
        for pattern in [try? ValuePattern(regularExpression: text), try? ValuePattern(glob: text)].compactMap({ $0 }) {
            let (matched, steps) = pattern.run(subject.unicodeScalars)
            let bound = (subject.unicodeScalars.count + 1) * pattern.programLength
            guard steps <= bound else { fatalError("\(text.debugDescription) took \(steps) steps, past its bound \(bound)") }
            guard pattern.matches(subject) == matched else { fatalError("\(text.debugDescription) answers twice differently") }
        }
    }
}
