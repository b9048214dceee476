import Foundation

/// A property-list value: what one key of the store holds.
///
/// Dates keep whole seconds, as the XML property-list format does; dictionary keys are strings.
/// The values a decoder returns obey the value rule documented on `PropertyListCodec`.
public enum PropertyListValue: Hashable, Sendable {
    case string(String)
    case integer(Int)
    /// An integer above `Int64.max` (up to `UInt64.max`); smaller ones are `integer`. Its type
    /// is `.integer`.
    case unsignedInteger(UInt64)
    case real(Double)
    case boolean(Bool)
    case date(Date)
    case data(Data)
    case array([PropertyListValue])
    case dictionary([String: PropertyListValue])

    /// The value's type, as `user.kvsfs.type` names it.
    public var type: ValueType {
        switch self {
        case .string: .string
        case .integer, .unsignedInteger: .integer
        case .real: .real
        case .boolean: .boolean
        case .date: .date
        case .data: .data
        case .array: .array
        case .dictionary: .dictionary
        }
    }
}

extension PropertyListValue {
    /// Equality, except that NaN equals NaN: every NaN is written `nan`, so this is what a round
    /// trip through either encoding keeps.
    package func isSame(as other: PropertyListValue) -> Bool {
        switch (self, other) {
        case let (.real(x), .real(y)): x == y || (x.isNaN && y.isNaN)
        case let (.array(xs), .array(ys)): xs.count == ys.count && zip(xs, ys).allSatisfy { $0.isSame(as: $1) }
        case let (.dictionary(xs), .dictionary(ys)):
            xs.count == ys.count && xs.allSatisfy { key, x in ys[key].map { x.isSame(as: $0) } ?? false }
        default: self == other
        }
    }
}

/// The eight property-list types.
public enum ValueType: String, Sendable, CaseIterable, Codable {
    case string, integer, real, boolean, date, data, array, dictionary
}

/// The on-disk form in which a mount shows values.
public enum ValueFormat: String, Sendable, CaseIterable {
    case xml, binary
}

/// One change to the store, for `KeyValueStore.apply`.
public enum KeyChange: Sendable, Equatable {
    case put(String, PropertyListValue)
    case delete(String)
    case move(from: String, to: String)
}
