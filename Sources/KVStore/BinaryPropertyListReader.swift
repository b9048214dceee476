import Foundation

/// Reads a binary property list (`bplist00`), trusting nothing in it.
///
/// The trailer must be consistent: offsets of 1–8 bytes, references of 1–8 bytes, at least
/// one object, the top object among them, and an offset table that starts after the header
/// and ends exactly at the trailer; every offset must point into the object area. Objects must
/// lie wholly before the offset table. Integers of 1, 2 and 4 bytes are unsigned, of 8 bytes
/// signed, of 16 bytes accepted only within −2^63…2^64−1; reals are 4 or 8 bytes; dates must
/// be finite and within the value rule; ASCII strings hold only ASCII, UTF-16 strings only
/// valid UTF-16; dictionary keys are strings. UIDs, sets, null and fill objects are refused,
/// and so is an object that contains itself. An object named from several places is decoded
/// (and counted in the budget) at every place.
struct BinaryPropertyListReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private(set) var budget: DecodingBudget
    private let offsetSize: Int
    private let referenceSize: Int
    private let objectCount: Int
    private let topObject: Int
    private let tableOffset: Int
    /// The objects on the path from the top to the one being read.
    private var visiting: [Bool]

    static let magic = Array("bplist00".utf8)

    /// Whether `bytes` claim to be a binary property list (of any version).
    static func claims(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.count >= 6 && zip(bytes, magic.prefix(6)).allSatisfy { $0 == $1 }
    }

    init(_ bytes: UnsafeBufferPointer<UInt8>, budget: DecodingBudget) throws(StoreError) {
        self.bytes = bytes
        self.budget = budget
        // `bplist0` and any one byte, as Apple's reader takes it: the last byte of the version
        // has never changed the format.
        guard bytes.count >= 8, zip(bytes, Self.magic.prefix(7)).allSatisfy({ $0 == $1 }) else {
            throw Self.fail("only version bplist0 is read")
        }
        guard bytes.count >= 8 + 1 + 32 else { throw Self.fail("\(bytes.count) bytes are too few for an object and a trailer") }
        let trailer = bytes.count - 32
        offsetSize = Int(bytes[trailer + 6])
        referenceSize = Int(bytes[trailer + 7])
        let count = Self.unsigned(bytes, at: trailer + 8, size: 8)
        let top = Self.unsigned(bytes, at: trailer + 16, size: 8)
        let table = Self.unsigned(bytes, at: trailer + 24, size: 8)
        guard (1...8).contains(offsetSize) else { throw Self.fail("the trailer gives offsets \(offsetSize) bytes (1 to 8 are valid)") }
        guard (1...8).contains(referenceSize) else { throw Self.fail("the trailer gives references \(referenceSize) bytes (1 to 8 are valid)") }
        guard count >= 1, count <= UInt64(bytes.count) else { throw Self.fail("the trailer counts \(count) objects") }
        guard top < count else { throw Self.fail("the top object \(top) is not among the \(count) objects") }
        let (tableSize, o1) = count.multipliedReportingOverflow(by: UInt64(offsetSize))
        let (tableEnd, o2) = table.addingReportingOverflow(tableSize)
        guard table >= 9, !o1, !o2, tableEnd == UInt64(trailer) else {
            throw Self.fail("the offset table (at \(table), \(count) offsets of \(offsetSize) bytes) does not end at the trailer")
        }
        objectCount = Int(count)
        topObject = Int(top)
        tableOffset = Int(table)
        visiting = Array(repeating: false, count: objectCount)
        for index in 0..<objectCount {
            let offset = Self.unsigned(bytes, at: tableOffset + index * offsetSize, size: offsetSize)
            guard offset >= 8, offset < UInt64(tableOffset) else {
                throw Self.fail("object \(index) has offset \(offset), outside the objects (8..<\(tableOffset))")
            }
        }
    }

    mutating func read() throws(StoreError) -> PropertyListValue {
        try readObject(topObject, depth: 0)
    }

    private func offset(of index: Int) -> Int {
        Int(Self.unsigned(bytes, at: tableOffset + index * offsetSize, size: offsetSize))
    }

    private mutating func readObject(_ index: Int, depth: Int) throws(StoreError) -> PropertyListValue {
        guard !visiting[index] else { throw fail(index, "it contains itself") }
        let start = offset(of: index)
        let marker = bytes[start]
        switch marker >> 4 {
        case 0x0:
            guard marker == 0x08 || marker == 0x09 else {
                throw fail(index, marker == 0x00 ? "null is not a property-list value" : "marker 0x\(String(marker, radix: 16)) is not a value")
            }
            try budget.scalar(length: CanonicalXML.boolean(marker == 0x09), depth: depth)
            return .boolean(marker == 0x09)
        case 0x1:
            let value = try readInteger(index, start, marker)
            switch value {
            case .integer(let i): try budget.scalar(length: CanonicalXML.integer(i), depth: depth)
            case .unsignedInteger(let u): try budget.scalar(length: CanonicalXML.integer(u), depth: depth)
            default: break
            }
            return value
        case 0x2:
            let value: Double
            switch marker {
            case 0x22:
                try need(index, start + 1, 4)
                value = Double(Float(bitPattern: UInt32(Self.unsigned(bytes, at: start + 1, size: 4))))
            case 0x23:
                try need(index, start + 1, 8)
                value = Double(bitPattern: Self.unsigned(bytes, at: start + 1, size: 8))
            default:
                throw fail(index, "a real of \(1 << Int(marker & 0x0F)) bytes (4 and 8 are valid)")
            }
            try budget.scalar(length: CanonicalXML.real(value), depth: depth)
            return .real(value)
        case 0x3:
            guard marker == 0x33 else { throw fail(index, "marker 0x\(String(marker, radix: 16)) is not a date") }
            try need(index, start + 1, 8)
            let seconds = Double(bitPattern: Self.unsigned(bytes, at: start + 1, size: 8))
            guard let date = PropertyListDate.fromBinary(seconds) else {
                throw fail(index, "the date \(seconds) seconds after 2001 is not finite or outside 0001-01-01T00:00:00Z…9999-12-31T23:59:59Z")
            }
            try budget.scalar(length: CanonicalXML.date, depth: depth)
            return .date(date)
        case 0x4:
            let (count, contentStart) = try readCount(index, start, marker)
            try need(index, contentStart, count)
            try budget.scalar(length: CanonicalXML.data(byteCount: count), depth: depth)
            return .data(Data(UnsafeBufferPointer(rebasing: bytes[contentStart..<(contentStart + count)])))
        case 0x5, 0x6:
            let (string, escaped) = try readString(index, start, marker)
            try budget.scalar(length: CanonicalXML.string(escapedLength: escaped), depth: depth)
            return .string(string)
        case 0x8:
            throw fail(index, "a UID (keyed-archiver reference) is not a property-list value")
        case 0xA:
            let (count, contentStart) = try readCount(index, start, marker)
            try needReferences(index, contentStart, count)
            try budget.open(.array, depth: depth)
            try budget.precheck(.array, count: count, depth: depth)
            visiting[index] = true
            var items = [PropertyListValue]()
            items.reserveCapacity(count)
            for k in 0..<count {
                items.append(try readObject(try reference(index, contentStart + k * referenceSize), depth: depth + 1))
            }
            visiting[index] = false
            try budget.close(.array, count: count, depth: depth)
            return .array(items)
        case 0xC:
            throw fail(index, "a set is not a property-list value")
        case 0xD:
            let (count, contentStart) = try readCount(index, start, marker)
            let (references, overflow) = count.multipliedReportingOverflow(by: 2)
            guard !overflow else { throw fail(index, "a dictionary of \(count) entries") }
            try needReferences(index, contentStart, references)
            try budget.open(.dictionary, depth: depth)
            try budget.precheck(.dictionary, count: count, depth: depth)
            visiting[index] = true
            var items = [String: PropertyListValue](minimumCapacity: count)
            for k in 0..<count {
                let keyIndex = try reference(index, contentStart + k * referenceSize)
                let keyStart = offset(of: keyIndex)
                let keyMarker = bytes[keyStart]
                guard keyMarker >> 4 == 0x5 || keyMarker >> 4 == 0x6 else {
                    throw fail(index, "dictionary key \(k) (object \(keyIndex)) is not a string")
                }
                let (key, escaped) = try readString(keyIndex, keyStart, keyMarker)
                try budget.key(escapedLength: escaped, depth: depth + 1)
                let valueIndex = try reference(index, contentStart + (count + k) * referenceSize)
                let value = try readObject(valueIndex, depth: depth + 1)
                guard items.updateValue(value, forKey: key) == nil else {
                    throw fail(index, "the dictionary holds the key \(PropertyListText.quoted(key)) twice")
                }
            }
            visiting[index] = false
            try budget.close(.dictionary, count: count, depth: depth)
            return .dictionary(items)
        default:
            throw fail(index, "marker 0x\(String(marker, radix: 16)) is not a property-list object")
        }
    }

    private func readInteger(_ index: Int, _ start: Int, _ marker: UInt8) throws(StoreError) -> PropertyListValue {
        let power = Int(marker & 0x0F)
        guard power <= 4 else { throw fail(index, "an integer of 2^\(power) bytes (1, 2, 4, 8 and 16 are valid)") }
        let size = 1 << power
        try need(index, start + 1, size)
        switch size {
        case 1, 2, 4:
            return .integer(Int(Self.unsigned(bytes, at: start + 1, size: size)))
        case 8:
            return .integer(Int(Int64(bitPattern: Self.unsigned(bytes, at: start + 1, size: 8))))
        default:
            let high = Int64(bitPattern: Self.unsigned(bytes, at: start + 1, size: 8))
            let low = Self.unsigned(bytes, at: start + 9, size: 8)
            if high == 0 {
                return low <= UInt64(Int.max) ? .integer(Int(low)) : .unsignedInteger(low)
            }
            if high == -1, low > UInt64(Int.max) {
                return .integer(Int(Int64(bitPattern: low)))
            }
            throw fail(index, "the 128-bit integer is outside −9223372036854775808…18446744073709551615")
        }
    }

    /// An ASCII or UTF-16 string object, with the length of its canonical (escaped) form.
    private func readString(_ index: Int, _ start: Int, _ marker: UInt8) throws(StoreError) -> (String, Int) {
        let (count, contentStart) = try readCount(index, start, marker)
        if marker >> 4 == 0x5 {
            try need(index, contentStart, count)
            let run = UnsafeBufferPointer(rebasing: bytes[contentStart..<(contentStart + count)])
            if let high = run.first(where: { $0 >= 0x80 }) {
                throw fail(index, "an ASCII string holds byte 0x\(String(high, radix: 16, uppercase: true))")
            }
            return (String(decoding: run, as: UTF8.self), CanonicalXML.escapedLength(run))
        }
        let (length, overflow) = count.multipliedReportingOverflow(by: 2)
        guard !overflow else { throw fail(index, "a string of \(count) UTF-16 units") }
        try need(index, contentStart, length)
        let utf8: [UInt8]
        do {
            utf8 = try PropertyListText.utf16(UnsafeBufferPointer(rebasing: bytes[contentStart..<(contentStart + length)]))
        } catch {
            throw fail(index, "the UTF-16 string holds a lone surrogate")
        }
        let escaped = utf8.withUnsafeBufferPointer { CanonicalXML.escapedLength($0) }
        return (String(decoding: utf8, as: UTF8.self), escaped)
    }

    /// The count in a marker's low nibble, or in the integer object after it when the nibble
    /// is 0xF; and where the content starts.
    private func readCount(_ index: Int, _ start: Int, _ marker: UInt8) throws(StoreError) -> (Int, Int) {
        let nibble = Int(marker & 0x0F)
        guard nibble == 0x0F else { return (nibble, start + 1) }
        try need(index, start + 1, 1)
        let intMarker = bytes[start + 1]
        guard intMarker >> 4 == 0x1, intMarker & 0x0F <= 3 else { throw fail(index, "its count is not an integer of 1, 2, 4 or 8 bytes") }
        let size = 1 << Int(intMarker & 0x0F)
        try need(index, start + 2, size)
        let count = Self.unsigned(bytes, at: start + 2, size: size)
        guard count <= UInt64(tableOffset) else { throw fail(index, "its count \(count) is larger than the file") }
        return (Int(count), start + 2 + size)
    }

    /// The object index of the reference at `position`.
    private func reference(_ index: Int, _ position: Int) throws(StoreError) -> Int {
        let target = Self.unsigned(bytes, at: position, size: referenceSize)
        guard target < UInt64(objectCount) else { throw fail(index, "it refers to object \(target) of \(objectCount)") }
        return Int(target)
    }

    private func needReferences(_ index: Int, _ start: Int, _ count: Int) throws(StoreError) {
        let (length, overflow) = count.multipliedReportingOverflow(by: referenceSize)
        guard !overflow else { throw fail(index, "it holds \(count) references") }
        try need(index, start, length)
    }

    /// Checks that `length` bytes from `start` lie before the offset table.
    private func need(_ index: Int, _ start: Int, _ length: Int) throws(StoreError) {
        let (end, overflow) = start.addingReportingOverflow(length)
        guard !overflow, length >= 0, end <= tableOffset else { throw fail(index, "it runs past the end of the objects") }
    }

    private static func unsigned(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int, size: Int) -> UInt64 {
        var value: UInt64 = 0
        for k in 0..<size { value = value << 8 | UInt64(bytes[position + k]) }
        return value
    }

    private func fail(_ index: Int, _ reason: String) -> StoreError {
        .invalidPropertyList("binary property list, object \(index) at offset \(offset(of: index)): \(reason)")
    }

    private static func fail(_ reason: String) -> StoreError {
        .invalidPropertyList("binary property list: \(reason)")
    }
}
