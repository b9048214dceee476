import ArgumentParser
import Foundation
import Glibc
import KVStore

struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print every change to a mount's keys as it happens, made here or elsewhere, as gsettings monitor and etcdctl watch do.",
        discussion: """
            Each line: CURSOR REASON KEY DEVICE, and with --values "= VALUE" (a scalar as kvsfs get prints it, a container as \
            one line of JSON, or of XML when it holds a date or data; "deleted" for a removal). REASON is local (this \
            device's change) or server-change (another's). With --json, one object a line: \
            {"cursor":N,"device":"...","deviceID":"...","key":"...","reason":"...","deleted":false} and with --values \
            "value" (its JSON) or "xml" (its XML property list, for a value with a date or data in it). Give the mount \
            to watch every key, or key files in one mount to watch those. --since CURSOR first prints the changes after a \
            cursor a line showed, so that a watch resumes where it stopped; a key changed several times since shows once, \
            with its latest change, as the store keeps no other. Runs until interrupted, or until --count changes.
            """)

    @Argument(help: "A kvsfs mount, or key files in one.")
    var paths: [String]

    @Flag(help: "Print each change's value.")
    var values = false

    @Flag(help: "Print one JSON object a line.")
    var json = false

    @Option(help: ArgumentHelp("First print the changes after this cursor, then go on.", valueName: "cursor"))
    var since: Int64?

    @Option(help: "Exit once this many changes are printed.")
    var count: Int?

    func validate() throws {
        if paths.isEmpty { throw ValidationError("name a kvsfs mount, or key files in one") }
        if let since, since < 0 { throw ValidationError("--since takes a cursor of 0 or more") }
        if let count, count < 1 { throw ValidationError("--count takes 1 or more") }
    }

    /// How long the watch sleeps when the mount raises no event: the longest a change can wait
    /// to be printed should an event be missed (the inotify queue overflowing, say).
    static let idlePoll: Int32 = 1000

    func run() throws {
        let (mountpoint, keys) = try Self.watched(paths)
        let events = try MountEvents(mountpoint)
        defer { events.close() }
        var cursor = try since ?? Self.page(of: mountpoint, after: nil, keys: keys).page.cursor
        var printed = 0
        while true {
            let answer = try Self.page(of: mountpoint, after: cursor, keys: keys)
            for change in answer.page.changes {
                // Written at once, not buffered: a reader on a pipe sees each change as it comes.
                FileHandle.standardOutput.write(Data((try line(for: change, devices: answer.devices) + "\n").utf8))
                printed += 1
                if let count, printed >= count { return }
            }
            cursor = answer.page.cursor
            if !answer.page.more { events.wait(milliseconds: Self.idlePoll) }
        }
    }

    /// The mount the paths name, and the keys watched (nil: all of them).
    static func watched(_ paths: [String]) throws -> (mountpoint: String, keys: [String]?) {
        if paths.count == 1, ControlClient.isKVSFSMount(paths[0]) || ControlClient.isKVSFSMount(realPath(paths[0])) {
            return (paths[0], nil)
        }
        let files = try paths.map(KeyFile.init)
        let mountpoints = Swift.Set(files.map { realPath($0.mountpoint) })
        guard mountpoints.count == 1, let mountpoint = files.first?.mountpoint else {
            throw CommandFailure("the key files named are in \(mountpoints.count) mounts: watch one mount at a time")
        }
        return (mountpoint, files.map(\.name))
    }

    private static func realPath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func page(of mountpoint: String, after cursor: Int64?, keys: [String]?) throws -> WatchPage {
        let answer = try ControlClient.send(ControlRequest(command: .changes, after: cursor, keys: keys), to: mountpoint)
        do {
            return try JSONDecoder().decode(WatchPage.self, from: Data(answer))
        } catch {
            throw CommandFailure("the mount at \(mountpoint) gave an answer that is not one")
        }
    }

    func line(for change: FedChange, devices: [String: String]) throws -> String {
        let reason = change.local ? "local" : "server-change"
        let device = devices[change.device] ?? change.device
        let value = try change.xml.map { try PropertyListCodec.decode($0) }
        if json {
            var object: [String: Any] = ["cursor": change.cursor, "reason": reason, "key": change.key, "device": device,
                                         "deviceID": change.device, "deleted": value == nil]
            if values, let value {
                if let form = Self.jsonForm(value) { object["value"] = form } else { object["xml"] = String(decoding: change.xml!, as: UTF8.self) }
            }
            let bytes = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            return String(decoding: bytes, as: UTF8.self)
        }
        let words = "\(change.cursor) \(reason) \(Self.printable(change.key)) \(Self.printable(device))"
        guard values else { return words }
        guard let value, let xml = change.xml else { return words + " deleted" }
        return words + " = " + Self.oneLine(value, xml: xml)
    }

    /// A value in one line: a scalar as `kvsfs get` prints it, a container as compact JSON, or
    /// as its XML with the line breaks taken out when JSON cannot hold it.
    static func oneLine(_ value: PropertyListValue, xml: [UInt8]) -> String {
        switch value {
        case .array, .dictionary:
            if let form = jsonForm(value),
               let bytes = try? JSONSerialization.data(withJSONObject: form, options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed]) {
                return String(decoding: bytes, as: UTF8.self)
            }
            return String(decoding: xml, as: UTF8.self).split(whereSeparator: \.isNewline)
                .map { $0.trimmingCharacters(in: .whitespaces) }.joined()
        default:
            let plain = (try? ValueText.plain(value)) ?? ""
            return printable(String(plain.dropLast()))
        }
    }

    /// The value as a JSON object for `JSONSerialization`; nil when it holds a date or data.
    static func jsonForm(_ value: PropertyListValue) -> Any? {
        switch value {
        case .string(let text): text
        case .integer(let number): number
        case .unsignedInteger(let number): number
        case .real(let number): number.isFinite ? number : nil
        case .boolean(let flag): flag
        case .date, .data: nil
        case .array(let elements):
            elements.reduce([Any]?([])) { list, element in jsonForm(element).flatMap { form in list.map { $0 + [form] } } }
        case .dictionary(let members):
            members.reduce([String: Any]?([:])) { object, member in
                jsonForm(member.value).flatMap { form in object.map { $0.merging([member.key: form]) { $1 } } }
            }
        }
    }

    /// Text as one line a terminal shows as it is: control characters (C0, DEL and C1) and
    /// the marks that reorder text escaped, so that a key or a schema's words cannot move the
    /// cursor, recolour the terminal or disguise what follows.
    static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var escaped = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                escaped += scalar.value < 0x80 ? String(String(scalar).debugDescription.dropFirst().dropLast()) : "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

/// The mount's directory events (inotify): what wakes a watch when a key changes, made here
/// or shown from elsewhere.
struct MountEvents {
    private let descriptor: Int32

    init(_ mountpoint: String) throws {
        descriptor = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard descriptor >= 0 else { throw CommandFailure("cannot watch \(mountpoint): \(String(cString: strerror(errno)))") }
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_MODIFY)
        guard inotify_add_watch(descriptor, mountpoint, mask) >= 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(descriptor)
            throw CommandFailure("cannot watch \(mountpoint): \(reason)")
        }
    }

    /// Waits until the mount raises an event or `milliseconds` pass, then takes every event
    /// queued: one look at the store serves them all.
    func wait(milliseconds: Int32) {
        var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&request, 1, milliseconds) > 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while buffer.withUnsafeMutableBytes({ read(descriptor, $0.baseAddress, $0.count) }) > 0 {}
    }

    func close() { Glibc.close(descriptor) }
}
