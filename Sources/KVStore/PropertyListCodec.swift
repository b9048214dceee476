import Foundation

/// Turns bytes into property-list values and back.
///
/// Reading accepts XML, binary and OpenStep property lists (what Foundation reads).
/// The canonical form is the XML that `encodeXML` writes: deterministic (dictionary keys
/// sorted, dates in whole seconds), so that its length can be the quota's measure.
public enum PropertyListCodec {
    /// Parses any property-list format; throws `StoreError.invalidPropertyList` otherwise.
    public static func decode(_ bytes: some Collection<UInt8>, limits: PropertyListDecodingLimits = .standard) throws(StoreError) -> PropertyListValue {
        if let value = PlainStringPropertyList.decode(bytes) { return value }
        let data = Data(bytes)
        guard !data.isEmpty else { throw .invalidPropertyList("the file is empty") }
        let object: Any
        do {
            object = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        } catch {
            throw .invalidPropertyList(reason(of: error))
        }
        return try value(from: object)
    }

    /// The canonical XML property list of `value`.
    public static func encodeXML(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        out.append(contentsOf: xmlHeader)
        try appendXML(value, depth: 0, to: &out)
        out.append(contentsOf: "</plist>\n".utf8)
        return out
    }

    /// A binary (`bplist00`) property list of `value`.
    public static func encodeBinary(_ value: PropertyListValue) throws(StoreError) -> [UInt8] {
        do {
            let data = try PropertyListSerialization.data(fromPropertyList: foundationObject(value), format: .binary, options: 0)
            return [UInt8](data)
        } catch {
            throw .invalidPropertyList("cannot encode as a binary property list: \(reason(of: error))")
        }
    }

    public static func encode(_ value: PropertyListValue, as format: ValueFormat) throws(StoreError) -> [UInt8] {
        switch format {
        case .xml: try encodeXML(value)
        case .binary: try encodeBinary(value)
        }
    }

    // MARK: - From Foundation

    private static func value(from object: Any) throws(StoreError) -> PropertyListValue {
        switch object {
        case let string as String:
            return .string(string)
        case let bool as Bool where type(of: object) == Bool.self:
            return .boolean(bool)
        case let number as NSNumber:
            switch String(cString: number.objCType) {
            case "d", "f":
                return .real(number.doubleValue)
            case "Q" where number.uint64Value > UInt64(Int.max):
                throw .invalidPropertyList("integer \(number.uint64Value) is larger than a signed 64-bit integer")
            default:
                return .integer(number.intValue)
            }
        case let date as Date:
            return .date(Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)))
        case let data as Data:
            return .data(data)
        case let array as [Any]:
            var items = [PropertyListValue]()
            items.reserveCapacity(array.count)
            for item in array { items.append(try value(from: item)) }
            return .array(items)
        case let dictionary as [AnyHashable: Any]:
            var items = [String: PropertyListValue]()
            for (key, item) in dictionary {
                guard let key = key.base as? String else {
                    throw .invalidPropertyList("dictionary keys must be strings")
                }
                items[key] = try value(from: item)
            }
            return .dictionary(items)
        default:
            throw .invalidPropertyList("unsupported object of type \(type(of: object))")
        }
    }

    private static func foundationObject(_ value: PropertyListValue) -> Any {
        switch value {
        case .string(let s): s
        case .integer(let i): NSNumber(value: i)
        case .real(let d): NSNumber(value: d)
        case .boolean(let b): b
        case .date(let d): d
        case .data(let d): d
        case .array(let items): items.map(foundationObject)
        case .dictionary(let items): items.mapValues(foundationObject)
        }
    }

    private static func reason(of error: any Error) -> String {
        let nsError = error as NSError
        if let inner = nsError.userInfo["kCFPropertyListOldStyleParsingError"] as? NSError,
           let text = inner.userInfo[NSDebugDescriptionErrorKey] as? String {
            return text
        }
        return nsError.userInfo[NSDebugDescriptionErrorKey] as? String ?? nsError.localizedDescription
    }

    // MARK: - Canonical XML

    private static let xmlHeader = Array("""
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">

        """.utf8)

    private static func appendXML(_ value: PropertyListValue, depth: Int, to out: inout [UInt8]) throws(StoreError) {
        func indent(_ level: Int) { out.append(contentsOf: repeatElement(UInt8(ascii: "\t"), count: level)) }
        func element(_ name: String, _ text: String) throws(StoreError) {
            indent(depth)
            out.append(contentsOf: "<\(name)>".utf8)
            try appendEscaped(text, to: &out)
            out.append(contentsOf: "</\(name)>\n".utf8)
        }
        switch value {
        case .string(let s):
            try element("string", s)
        case .integer(let i):
            try element("integer", String(i))
        case .real(let d):
            try element("real", realText(d))
        case .boolean(let b):
            indent(depth)
            out.append(contentsOf: (b ? "<true/>\n" : "<false/>\n").utf8)
        case .date(let d):
            try element("date", dateText(d))
        case .data(let d):
            try element("data", d.base64EncodedString())
        case .array(let items):
            indent(depth)
            if items.isEmpty { out.append(contentsOf: "<array/>\n".utf8); return }
            out.append(contentsOf: "<array>\n".utf8)
            for item in items { try appendXML(item, depth: depth + 1, to: &out) }
            indent(depth)
            out.append(contentsOf: "</array>\n".utf8)
        case .dictionary(let items):
            indent(depth)
            if items.isEmpty { out.append(contentsOf: "<dict/>\n".utf8); return }
            out.append(contentsOf: "<dict>\n".utf8)
            for key in items.keys.sorted() {
                indent(depth + 1)
                out.append(contentsOf: "<key>".utf8)
                try appendEscaped(key, to: &out)
                out.append(contentsOf: "</key>\n".utf8)
                try appendXML(items[key]!, depth: depth + 1, to: &out)
            }
            indent(depth)
            out.append(contentsOf: "</dict>\n".utf8)
        }
    }

    /// Escapes XML markup; refuses characters that XML 1.0 cannot carry, so that every stored
    /// value reads back as exactly the value that was written.
    private static func appendEscaped(_ text: String, to out: inout [UInt8]) throws(StoreError) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "&"): out.append(contentsOf: "&amp;".utf8)
            case UInt8(ascii: "<"): out.append(contentsOf: "&lt;".utf8)
            case UInt8(ascii: ">"): out.append(contentsOf: "&gt;".utf8)
            case UInt8(ascii: "\t"), UInt8(ascii: "\n"): out.append(byte)
            case 0..<0x20:
                throw .invalidPropertyList("a string holds control character 0x\(String(byte, radix: 16)), which an XML property list cannot carry")
            default: out.append(byte)
            }
        }
    }

    static func realText(_ d: Double) -> String {
        if d.isNaN { return "nan" }
        if d.isInfinite { return d < 0 ? "-infinity" : "+infinity" }
        if d == d.rounded(), abs(d) < 1e15 { return String(Int64(d)) }
        return "\(d)"
    }

    /// ISO 8601 in UTC, whole seconds: the XML property-list date form.
    static func dateText(_ d: Date) -> String {
        var seconds = time_t(d.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let year = String(format: "%04d", Int(parts.tm_year) + 1900)
        return "\(year)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}
