import Foundation

/// Writes binary property lists (`bplist00`) in the form Apple's writer uses.
///
/// The top object is object 0; equal scalars (strings, numbers, dates, data, booleans) are
/// written once and referred to from every place; arrays and dictionaries are written each
/// time, dictionary keys in sorted order. Non-negative integers take 1, 2, 4 or 8 bytes,
/// negative ones 8, and those above Int64.max 16 (the high 8 bytes zero). Reals are 8 bytes;
/// dates are whole seconds, as in XML; strings are ASCII when they can be, else UTF-16.
enum BinaryPropertyListWriter {
    static func encode(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        var objects = ObjectTable()
        _ = try objects.add(value)
        let referenceSize = byteCount(UInt64(objects.entries.count - 1))
        var out = BinaryPropertyListReader.magic
        var offsets = [Int]()
        offsets.reserveCapacity(objects.entries.count)
        for entry in objects.entries {
            offsets.append(out.count)
            write(entry, referenceSize: referenceSize, to: &out)
        }
        let tableOffset = out.count
        let offsetSize = byteCount(UInt64(tableOffset))
        for offset in offsets { append(UInt64(offset), size: offsetSize, to: &out) }
        out.append(contentsOf: repeatElement(0, count: 6))  // five unused bytes and the sort version
        out.append(UInt8(offsetSize))
        out.append(UInt8(referenceSize))
        append(UInt64(objects.entries.count), size: 8, to: &out)
        append(0, size: 8, to: &out)  // the top object
        append(UInt64(tableOffset), size: 8, to: &out)
        return out
    }

    private enum Entry {
        case scalar(PropertyListValue)
        case array([Int])
        case dictionary(keys: [Int], values: [Int])
    }

    /// What makes two scalars one object: the same type and the same bits.
    private enum ScalarKey: Hashable {
        case string([UInt8])
        case integer(Int)
        case unsignedInteger(UInt64)
        case real(UInt64)
        case boolean(Bool)
        case date(UInt64)
        case data(Data)
    }

    private struct ObjectTable {
        var entries = [Entry]()
        var scalars = [ScalarKey: Int]()

        mutating func add(_ value: PropertyListValue) throws(StoreError) -> Int {
            let key: ScalarKey
            switch value {
            case .array(let items):
                let index = entries.count
                entries.append(.array([]))
                var references = [Int]()
                references.reserveCapacity(items.count)
                for item in items { references.append(try add(item)) }
                entries[index] = .array(references)
                return index
            case .dictionary(let items):
                let index = entries.count
                entries.append(.array([]))
                let keys = items.keys.sorted()
                var keyReferences = [Int]()
                keyReferences.reserveCapacity(keys.count)
                for key in keys { keyReferences.append(try add(.string(key))) }
                var valueReferences = [Int]()
                valueReferences.reserveCapacity(keys.count)
                for key in keys {
                    guard let item = items[key] else { continue }
                    valueReferences.append(try add(item))
                }
                entries[index] = .dictionary(keys: keyReferences, values: valueReferences)
                return index
            case .string(let s): key = .string(Array(s.utf8))
            case .integer(let i): key = .integer(i)
            case .unsignedInteger(let u): key = .unsignedInteger(u)
            case .real(let d): key = .real(d.bitPattern)
            case .boolean(let b): key = .boolean(b)
            case .date(let d):
                try PropertyListDate.check(d)
                key = .date(d.timeIntervalSince1970.bitPattern)
            case .data(let d): key = .data(d)
            }
            if let index = scalars[key] { return index }
            let index = entries.count
            entries.append(.scalar(value))
            scalars[key] = index
            return index
        }
    }

    private static func write(_ entry: Entry, referenceSize: Int, to out: inout [UInt8]) {
        switch entry {
        case .array(let references):
            appendMarker(0xA0, count: references.count, to: &out)
            for reference in references { append(UInt64(reference), size: referenceSize, to: &out) }
        case .dictionary(let keys, let values):
            appendMarker(0xD0, count: keys.count, to: &out)
            for reference in keys + values { append(UInt64(reference), size: referenceSize, to: &out) }
        case .scalar(let value):
            write(value, to: &out)
        }
    }

    private static func write(_ value: PropertyListValue, to out: inout [UInt8]) {
        switch value {
        case .boolean(let b):
            out.append(b ? 0x09 : 0x08)
        case .integer(let i):
            appendInteger(i, to: &out)
        case .unsignedInteger(let u):
            out.append(0x14)
            append(0, size: 8, to: &out)
            append(u, size: 8, to: &out)
        case .real(let d):
            out.append(0x23)
            append(d.bitPattern, size: 8, to: &out)
        case .date(let d):
            out.append(0x33)
            let seconds = d.timeIntervalSince1970.rounded(.down) - PropertyListDate.referenceOffset
            append(seconds.bitPattern, size: 8, to: &out)
        case .data(let d):
            appendMarker(0x40, count: d.count, to: &out)
            out.append(contentsOf: d)
        case .string(let s):
            if s.utf8.allSatisfy({ $0 < 0x80 }) {
                appendMarker(0x50, count: s.utf8.count, to: &out)
                out.append(contentsOf: s.utf8)
            } else {
                let units = Array(s.utf16)
                appendMarker(0x60, count: units.count, to: &out)
                for unit in units { append(UInt64(unit), size: 2, to: &out) }
            }
        case .array, .dictionary:
            break  // written from the object table
        }
    }

    /// A marker whose low nibble is the count, or 0xF followed by the count as an integer.
    private static func appendMarker(_ marker: UInt8, count: Int, to out: inout [UInt8]) {
        if count < 15 {
            out.append(marker | UInt8(count))
        } else {
            out.append(marker | 0x0F)
            appendInteger(count, to: &out)
        }
    }

    private static func appendInteger(_ value: Int, to out: inout [UInt8]) {
        guard value >= 0 else {
            out.append(0x13)
            append(UInt64(bitPattern: Int64(value)), size: 8, to: &out)
            return
        }
        let size = byteCount(UInt64(value))
        out.append(0x10 | UInt8(size.trailingZeroBitCount))
        append(UInt64(value), size: size, to: &out)
    }

    /// 1, 2, 4 or 8: the bytes that hold `value`.
    private static func byteCount(_ value: UInt64) -> Int {
        switch value {
        case ..<0x100: 1
        case ..<0x1_0000: 2
        case ..<0x1_0000_0000: 4
        default: 8
        }
    }

    private static func append(_ value: UInt64, size: Int, to out: inout [UInt8]) {
        for k in stride(from: size - 1, through: 0, by: -1) { out.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(k)))) }
    }
}
