import Foundation
import KVStore
import Testing

@Suite("The binary property-list writer")
struct BinaryPropertyListWriterTests {
    static let values: [PropertyListValue] = PropertyListCodecTests.samples + [
        .unsignedInteger(.max), .unsignedInteger(1 << 63), .integer(.min), .integer(-1), .integer(255), .integer(256),
        .integer(65_536), .integer(1 << 32), .real(.nan), .real(-.infinity), .real(-0.0),
        .date(Date(timeIntervalSince1970: -62_135_596_800)), .date(Date(timeIntervalSince1970: 253_402_300_799)),
        .string(""), .string(String(repeating: "long ", count: 40)), .string("😀 non-ASCII, so UTF-16"),
        .array((0..<300).map { .integer($0) }),
        .dictionary(Dictionary(uniqueKeysWithValues: (0..<20).map { ("key \($0)", .string("shared")) })),
        .array([.string("é"), .string("e\u{301}")]),
    ]

    @Test("Foundation reads what it writes as the same value", arguments: values)
    func foundationReadsIt(value: PropertyListValue) throws {
        let binary = try PropertyListCodec.encodeBinary(value)
        let object = try PropertyListSerialization.propertyList(from: Data(binary), options: [], format: nil)
        let read = try #require(FoundationPropertyList.value(object))
        if case .real(let x) = value, x.isNaN {
            guard case .real(let y) = read else { Issue.record("read \(read)"); return }
            #expect(y.isNaN)
        } else if case .real(let x) = value, x == 0 {
            guard case .real(let y) = read else { Issue.record("read \(read)"); return }
            #expect(y == 0 && y.sign == x.sign)
        } else {
            #expect(read == value)
        }
    }

    @Test("it reads back as the same value, canonically equivalent strings kept apart", arguments: values)
    func roundTrip(value: PropertyListValue) throws {
        let read = try PropertyListCodec.decode(PropertyListCodec.encodeBinary(value))
        #expect(read == value || { if case .real(let x) = value { x.isNaN } else { false } }())
        if case .array(let items) = value, case .array(let again) = read {
            #expect(zip(items, again).allSatisfy { a, b in
                if case .string(let x) = a, case .string(let y) = b { Array(x.utf8) == Array(y.utf8) } else { true }
            })
        }
    }

    @Test("the output is deterministic, and equal scalars are written once")
    func deterministicAndShared() throws {
        let value = PropertyListValue.dictionary(["b": .array(Array(repeating: .string("shared text"), count: 30)), "a": .string("shared text")])
        let first = try PropertyListCodec.encodeBinary(value)
        #expect(try PropertyListCodec.encodeBinary(value) == first)
        let occurrences = first.indices.filter { first[$0...].starts(with: Array("shared text".utf8)) }.count
        #expect(occurrences == 1)
        #expect(first.count < 120)
    }
}
