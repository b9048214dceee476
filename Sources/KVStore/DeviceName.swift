import Foundation

/// What people call a device (`--device-name`, the host name by default), shown beside its id
/// in conflicts, history and the xattrs. The id stays what a change is known by; the name is
/// only told.
///
/// The rule every door applies (the mount to its option, the server and the file remote to a
/// push, a mount to what it fetches): 1 to 64 bytes of UTF-8 with no control, format (such as
/// the bidirectional overrides), separator, private-use or unassigned characters, none of
/// `(`, `)` and `;`, and no leading or trailing space. A name outside the rule is refused with why where a person
/// gave it, and is not kept where it came from elsewhere.
public enum DeviceName {
    public static let maximumBytes = 64
    /// The names a remote keeps per store, and a mount per store. Past it, those named or
    /// renamed longest ago go; each push names its device again, so a device whose name went
    /// is named again at its next push, however many ids another writer makes up.
    public static let keptPerStore = 256

    /// Refuses a name outside the rule, with why.
    public static func check(_ name: String) throws(StoreError) {
        let bytes = name.utf8.count
        guard bytes >= 1, bytes <= maximumBytes else {
            throw .invalidDeviceName("it is \(bytes) bytes (1 to \(maximumBytes) allowed)")
        }
        for scalar in name.unicodeScalars {
            let code = "U+" + String(format: "%04X", scalar.value)
            switch scalar.properties.generalCategory {
            case .control:
                throw .invalidDeviceName("it holds the control character \(code)")
            case .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned:
                throw .invalidDeviceName("it holds \(code), an invisible, separating, private or unassigned character")
            default:
                if Self.delimiters.contains(scalar) {
                    throw .invalidDeviceName("it holds '\(scalar)', which the views use around and between devices")
                }
            }
        }
        if name.first?.isWhitespace == true || name.last?.isWhitespace == true {
            throw .invalidDeviceName("it starts or ends with a space")
        }
    }

    /// What `ID (NAME)` and the conflict xattr's `; ` use: a name holding them could forge a
    /// view's parts.
    static let delimiters: Set<Unicode.Scalar> = ["(", ")", ";"]

    public static func isValid(_ name: String) -> Bool {
        do {
            try check(name)
            return true
        } catch {
            return false
        }
    }

    /// The name a device takes at its first mount: the host name, as much of it as the rule
    /// allows, or "unnamed" when there is none.
    public static func ofThisHost() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "unnamed" }
        let host = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var name = String(host.unicodeScalars.filter { $0.properties.generalCategory != .control }.map(Character.init))
            .trimmingCharacters(in: .whitespaces)
        while name.utf8.count > maximumBytes { name.removeLast() }
        name = name.trimmingCharacters(in: .whitespaces)
        return isValid(name) ? name : "unnamed"
    }

    /// `ID (NAME)`, or the id alone when no name is known: how every view shows a device.
    public static func shown(_ device: String, named name: String?) -> String {
        guard let name else { return device }
        return "\(device) (\(name))"
    }
}

/// The names kept of a store's devices, by id, at most `DeviceName.keptPerStore`: past the
/// bound, those named or renamed longest ago go.
public struct DeviceNameBook: Sendable {
    private var entries: [String: (name: String, told: UInt64)] = [:]
    private var clock: UInt64 = 0

    public init() {}

    /// Keeps the names `told`, by device id; names outside the rule are not kept.
    public mutating func keep(_ told: [String: String]) {
        for (device, name) in told where DeviceName.isValid(name) && entries[device]?.name != name {
            clock += 1
            entries[device] = (name, clock)
        }
        guard entries.count > DeviceName.keptPerStore else { return }
        let oldest = entries.sorted { $0.value.told < $1.value.told }.prefix(entries.count - DeviceName.keptPerStore)
        for (device, _) in oldest { entries[device] = nil }
    }

    /// The names kept of `devices`; a device with none is left out.
    public func names(of devices: some Sequence<String>) -> [String: String] {
        var found: [String: String] = [:]
        for device in devices {
            if let entry = entries[device] { found[device] = entry.name }
        }
        return found
    }
}
