import FoundationEssentials
import KVStore

/// Values a mount shows for keys that hold no value, as an application registers defaults
/// before it reads its preferences (`--defaults FILE`).
///
/// Invariants: every key obeys the store's key rule (`KeyName`, the key-length quota) and
/// every value the value rule and the per-value quota, exactly as if it were stored; the store
/// never holds a default and sync never sees one.
public struct RegisteredDefaults: Sendable, Equatable {
    /// One registered value, with its canonical XML (what the file shows in the default format).
    public struct Value: Sendable, Equatable {
        public let value: PropertyListValue
        public let xml: [UInt8]
    }

    /// The largest defaults file read, in bytes; also the bound on the canonical XML of its
    /// whole dictionary, so that a small binary file cannot decode to more.
    public static let maxFileBytes = 4 << 20

    public private(set) var values: [String: Value]

    public init() {
        values = [:]
    }

    public subscript(key: String) -> Value? { values[key] }

    public var count: Int { values.count }

    /// The defaults a property list registers: its root is a dictionary whose entries are
    /// keys and their default values. Entries are checked in key order; the first one outside
    /// the rules is named in the error, and nothing is registered.
    public static func decode(_ bytes: [UInt8], limits: QuotaLimits) throws(DefaultsError) -> RegisteredDefaults {
        guard bytes.count <= maxFileBytes else { throw .tooLarge(size: bytes.count, limit: maxFileBytes) }
        let root: PropertyListValue
        do throws(StoreError) {
            root = try PropertyListCodec.decode(bytes, limits: PropertyListDecodingLimits(maxBytes: maxFileBytes))
        } catch .valueTooLarge {
            throw .decodesTooLarge(limit: maxFileBytes)
        } catch {
            throw .notAPropertyList(error.description)
        }
        guard case .dictionary(let entries) = root else { throw .notADictionary(root.type) }
        let ledger = QuotaLedger(limits: limits)
        var defaults = RegisteredDefaults()
        // Two spellings of one key are one dictionary key (Swift's string equality), which the
        // decoder refuses: normalising cannot make two entries one.
        for name in entries.keys.sorted() {
            let key = KeyName.canonical(name)
            do throws(StoreError) {
                try ledger.checkKeyName(key)
                let value = entries[name]!
                let xml = try PropertyListCodec.encodeXML(value)
                try ledger.checkValueSize(QuotaLedger.size(ofXML: xml))
                defaults.values[key] = Value(value: value, xml: xml)
            } catch {
                throw .invalidEntry(key: name, reason: error.description)
            }
        }
        return defaults
    }
}

extension RegisteredDefaults {
    /// The defaults a store's schema gives (`KeySchema.defaults`), each checked as a file's
    /// entry is; one outside the rules here (a key longer than this mount's key-length
    /// quota, say) is left out and named with why in `skipped`: the schema is the remote's.
    public static func fromSchema(_ defaults: [String: PropertyListValue], limits: QuotaLimits) -> (RegisteredDefaults, skipped: [String: String]) {
        let ledger = QuotaLedger(limits: limits)
        var registered = RegisteredDefaults()
        var skipped = [String: String]()
        for key in defaults.keys.sorted() {
            do throws(StoreError) {
                try ledger.checkKeyName(key)
                let xml = try PropertyListCodec.encodeXML(defaults[key]!)
                try ledger.checkValueSize(QuotaLedger.size(ofXML: xml))
                registered.values[key] = Value(value: defaults[key]!, xml: xml)
            } catch {
                skipped[key] = error.description
            }
        }
        return (registered, skipped)
    }
}

/// Why a defaults file was refused.
public enum DefaultsError: Error, Equatable, Sendable, CustomStringConvertible {
    case unreadable(String)
    case tooLarge(size: Int, limit: Int)
    /// A small file whose values take more than the limit as XML (a binary list's references).
    case decodesTooLarge(limit: Int)
    case notAPropertyList(String)
    case notADictionary(ValueType)
    case invalidEntry(key: String, reason: String)

    public var description: String {
        switch self {
        case .unreadable(let reason): "cannot read it: \(reason)"
        case .tooLarge(let size, let limit): "the file has \(size) bytes, more than the limit of \(limit)"
        case .decodesTooLarge(let limit): "its values take more than the limit of \(limit) bytes as XML"
        case .notAPropertyList(let reason): reason
        case .notADictionary(let type): "its root is of type \(type.rawValue), not a dictionary of keys and values"
        case .invalidEntry(let key, let reason): "entry \(key.debugDescription): \(reason)"
        }
    }
}
