import ArgumentParser
import Foundation
import Glibc
import KVSFS
import KVStore

struct Conflicts: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the open conflicts of a mount's store: changes that lost to a concurrent change, kept.",
        discussion: """
            Two changes of a key are concurrent when neither device held the other's change when it wrote. The \
            remote keeps the one with the greater stamp, as always, and now keeps the other too, as the key's open \
            conflict, until a later write settles it (kvsfs resolve, or any write made once the conflict was \
            seen); when changes of several devices lost, each device's newest is kept. For each: the key's file \
            name, then each change that lost (newest first) and the one that won, each with when \
            and on which device it was made (its id, then its name when one is known), its type (removed for a removal), its size and its value as kvsfs \
            get prints it (control characters written as \\u{HEX}).
            """)

    @Argument(help: "A kvsfs mount.")
    var mountpoint: String

    @Flag(help: "Print one JSON array instead: per conflict, key, lost (an array, newest first) and won, each change with time, device, deviceName (null when none is known), type, size and value (XML, null for a removal).")
    var json = false

    func run() throws {
        let (conflicts, names) = try ConflictList.fetchNamed(from: mountpoint)
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(conflicts.map { ConflictList.Listed($0, names: names) }), as: UTF8.self))
            return
        }
        for conflict in conflicts {
            print(Self.visible(KeyFileName.fileName(forKey: conflict.key)))
            for (label, side) in conflict.lost.map({ ("lost", $0) }) + [("won ", conflict.won)] {
                let kind = side.type.map { "\($0.rawValue), \(side.value?.count ?? 0) bytes" } ?? "removed"
                let device = DeviceName.shown(side.stamp.device, named: names[side.stamp.device])
                print("  \(label)  \(side.stamp.timeText)  \(Self.visible(device))  \(kind)")
                if let value = try ConflictList.value(of: side, key: conflict.key) {
                    var text = try ValueText.plain(value)
                    if text.unicodeScalars.last == "\n" { text.unicodeScalars.removeLast() }  // not a CR before it
                    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                        print("        " + Self.visible(String(line)))
                    }
                }
            }
        }
    }

    /// `text` with its control characters (a carriage return among them) written as `\u{…}`
    /// escapes: no key or value can move the cursor, or start a line that reads as a listing's.
    static func visible(_ text: String) -> String {
        text.unicodeScalars.map { scalar in
            scalar.properties.generalCategory == .control ? "\\u{\(String(scalar.value, radix: 16))}" : String(scalar)
        }.joined()
    }
}

struct Resolve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Settle a key's open conflict by keeping one of its changes.",
        discussion: """
            --keep-local writes the change that lost back to the key: when changes of several devices lost, the \
            one this mount's device lost, or the one of the device --device names. --keep-remote keeps the one \
            that won, which the key shows now, by writing it again. Either is a new change, as any write: quotas \
            apply, it syncs and watchers see it. Once the remote has it, the conflict is settled on every mount \
            (kvsfs sync MOUNTPOINT waits for that), and every other change that lost is let go.
            """)

    @Argument(help: "The key's file in a mount (it need not exist).")
    var path: String

    @Flag(help: "Keep the change that lost.")
    var keepLocal = false

    @Flag(help: "Keep the change that won.")
    var keepRemote = false

    @Option(help: ArgumentHelp("With --keep-local: keep the change that device DEVICE lost, not this mount's.", valueName: "DEVICE"))
    var device: String?

    func validate() throws {
        guard keepLocal != keepRemote else { throw ValidationError("name one of --keep-local and --keep-remote") }
        if device != nil, !keepLocal { throw ValidationError("--device names a change that lost: it goes with --keep-local") }
    }

    func run() throws {
        let key = try KeyFile(path)
        guard let conflict = try ConflictList.fetch(from: key.mountpoint).first(where: { $0.key == key.name }) else {
            throw CommandFailure("\(key.name.debugDescription) has no open conflict")
        }
        // The conflict as read here: one that changed since is refused, not settled blind.
        let note = try ControlClient.send(ControlRequest(command: .resolve, key: key.name, losers: conflict.lost.map(\.stamp),
                                                         won: conflict.won.stamp, keepLost: keepLocal, keepDevice: device),
                                          to: key.mountpoint)
        // Settled, but not yet where other devices see it: said, as a warning, with status 0.
        if !note.isEmpty { FileHandle.standardError.write(Data(("kvsfs: " + String(decoding: note, as: UTF8.self) + "\n").utf8)) }
    }
}

/// A mount's open conflicts as its daemon gives them, checked before anything is printed or
/// written: each stamp by the stamp rule (so no device id carries a terminal's escapes), each
/// value a property list of its listed type.
enum ConflictList {
    static func fetch(from mountpoint: String) throws -> [KeyConflict] {
        try fetchNamed(from: mountpoint).conflicts
    }

    /// The conflicts, and the names known of their devices; a name outside the rule
    /// (`DeviceName`) is left out.
    static func fetchNamed(from mountpoint: String) throws -> (conflicts: [KeyConflict], names: [String: String]) {
        let answer = try ControlClient.send(ControlRequest(command: .conflicts), to: mountpoint)
        let listing: ConflictListing
        if let named = try? JSONDecoder().decode(ConflictListing.self, from: Data(answer)) {
            listing = named
        } else if let unnamed = try? JSONDecoder().decode([KeyConflict].self, from: Data(answer)) {
            // A daemon started before device names answers the list alone.
            listing = ConflictListing(conflicts: unnamed, devices: [:])
        } else {
            throw CommandFailure("the mount at \(mountpoint) answered with something other than a list of conflicts")
        }
        let conflicts = listing.conflicts
        for conflict in conflicts {
            guard !conflict.lost.isEmpty, conflict.lost.count <= KeptChangeList.maximumCount else {
                throw CommandFailure("the conflict of \(conflict.key.debugDescription) lists \(conflict.lost.count) changes that lost, "
                                     + "outside 1 to \(KeptChangeList.maximumCount)")
            }
            for side in conflict.lost + [conflict.won] {
                do {
                    try StampRule().checkFields(side.stamp)
                } catch {
                    throw CommandFailure("the conflict of \(conflict.key.debugDescription) has a stamp outside the rule: \(error)")
                }
                _ = try value(of: side, key: conflict.key)
            }
        }
        return (conflicts, listing.devices.filter { DeviceName.isValid($0.value) })
    }

    /// A side's value, checked against the value rule and its type; nil for a removal.
    static func value(of side: KeptChange, key: String) throws -> PropertyListValue? {
        guard let bytes = side.value else {
            guard side.type == nil else { throw CommandFailure("the conflict of \(key.debugDescription) lists a type without a value") }
            return nil
        }
        let value: PropertyListValue
        do {
            value = try PropertyListCodec.decode([UInt8](bytes))
        } catch {
            throw CommandFailure("the conflict of \(key.debugDescription) holds a value the store does not accept: \(error)")
        }
        guard value.type == side.type else { throw CommandFailure("the conflict of \(key.debugDescription) lists a value under another type") }
        return value
    }

    /// A conflict as `kvsfs conflicts --json` prints it.
    struct Listed: Encodable {
        struct Side: Encodable {
            var time: String
            var device: String
            /// The device's name; nil (null) when none is known.
            var deviceName: String?
            var type: String
            var size: Int
            /// The value as XML; nil (null) for a removal.
            var value: String?

            init(_ side: KeptChange, names: [String: String]) {
                time = side.stamp.timeText
                device = side.stamp.device
                deviceName = names[side.stamp.device]
                type = side.type?.rawValue ?? "removed"
                size = side.value?.count ?? 0
                value = side.value.map { String(decoding: $0, as: UTF8.self) }
            }

            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(time, forKey: .time)
                try container.encode(device, forKey: .device)
                try container.encode(deviceName, forKey: .deviceName)  // null when none is known
                try container.encode(type, forKey: .type)
                try container.encode(size, forKey: .size)
                try container.encode(value, forKey: .value)  // null for a removal, not left out
            }

            private enum CodingKeys: String, CodingKey { case time, device, deviceName, type, size, value }
        }

        var key: String
        var lost: [Side]
        var won: Side

        init(_ conflict: KeyConflict, names: [String: String]) {
            key = conflict.key
            lost = conflict.lost.map { Side($0, names: names) }
            won = Side(conflict.won, names: names)
        }
    }
}
