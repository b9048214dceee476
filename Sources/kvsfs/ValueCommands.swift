import ArgumentParser
import Foundation
import FuseKit
import KVStore

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print a key's value, or a member inside it: a scalar plainly, a container as an XML property list.",
        discussion: "The key path names a member as `plutil -extract` does: dictionary keys and array indexes joined by dots, e.g. servers.0.port.")

    @Argument(help: "A key's file in a kvsfs mount.")
    var path: String

    @Argument(help: "A member inside the value, e.g. servers.0.port (an array index is a decimal number).")
    var keyPath: String?

    @Flag(help: "Print the value (or the member) as JSON, as `plutil -convert json` does (a date or data value has no JSON form).")
    var json = false

    @Flag(help: "Print what the store's schema says of the key instead: its rule and description (user.kvsfs.schema).")
    var describe = false

    func validate() throws {
        if describe, json || keyPath != nil { throw ValidationError("--describe prints the key's rule: give it with the key's path alone") }
    }

    func run() throws {
        let file = try KeyFile(path)
        if describe {
            // The schema's words are its author's: each line shown as it is, escapes and all.
            print(try Self.description(of: file.path).split(separator: "\n", omittingEmptySubsequences: false)
                .map { Watch.printable(String($0)) }.joined(separator: "\n"))
            return
        }
        let bytes = try ValueFile.read(file.path)
        var value: PropertyListValue
        do {
            value = try PropertyListCodec.decode(bytes)
        } catch {
            throw CommandFailure("\(path): \(error)")
        }
        if let keyPath {
            do {
                value = try value.member(at: PropertyListKeyPath(keyPath))
            } catch {
                throw CommandFailure("\(path): \(error)")
            }
        }
        guard json else {
            print(try ValueText.plain(value), terminator: "")
            return
        }
        do {
            try Export.writeStandardOutput(try PropertyListCodec.encodeJSON(value))
        } catch StoreError.invalidPropertyList(let reason) {
            throw CommandFailure("\(path): \(reason)")
        }
    }
}

extension Get {
    /// What the store's schema says of the key at `path`, from its `user.kvsfs.schema`.
    static func description(of path: String) throws -> String {
        var buffer = [UInt8](repeating: 0, count: 65536)
        let length = buffer.withUnsafeMutableBytes { SystemCalls.extendedAttribute(of: path, named: "user.kvsfs.schema", into: $0) }
        guard length >= 0 else {
            let code = errno
            if code == ENODATA { return "no rule of the store's schema names this key" }
            throw CommandFailure("cannot read the rule of \(path): \(explain(code))")
        }
        return String(decoding: buffer[..<length], as: UTF8.self)
    }
}

struct Set: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a typed value to a key, in the manner of `defaults write`.",
        discussion: """
            Give exactly one of the value options, e.g. `kvsfs set ~/kv/volume -int 3`. The members of -array, -dict, \
            -array-add and -dict-add (everything after the option) are strings, or typed as `defaults` types them: \
            `kvsfs set ~/kv/server -dict port -int 8080 name -string x` (-string, -int/-integer, -real/-float, \
            -bool/-boolean, -date, -data; -data is base64, where defaults takes hex). -array-add and -dict-add read \
            the key's array or dictionary, add to it and write it whole: a change made between the read and the write \
            is replaced, as with `defaults`. With --if-version V, the value is written only while the key's latest \
            version on the remote is still V (as `kvsfs history` prints it; absent: the remote holds no value of it), \
            as the remote decides: refused, nothing changes and one line says where the key stands.
            """)

    @Argument(help: "A key's file in a kvsfs mount.")
    var path: String

    @Option(name: .customLong("string", withSingleDash: true), completion: .custom { words, _, prefix in ChoiceCompletion.offer(.string, words, prefix) })
    var string: String?
    @Option(name: .customLong("int", withSingleDash: true), help: "-9223372036854775808 to 18446744073709551615.",
            completion: .custom { words, _, prefix in ChoiceCompletion.offer(.integer, words, prefix) })
    var integer: IntegerArgument?
    @Option(name: .customLong("real", withSingleDash: true), completion: .custom { words, _, prefix in ChoiceCompletion.offer(.real, words, prefix) })
    var real: Double?
    @Option(name: .customLong("bool", withSingleDash: true), help: "true, false, yes, no, 1 or 0.") var boolean: String?
    @Option(name: .customLong("date", withSingleDash: true), help: "ISO 8601, e.g. 2026-11-22T10:00:00Z.") var date: String?
    @Option(name: .customLong("data", withSingleDash: true), help: "Base64.") var data: String?
    @Option(name: .customLong("array", withSingleDash: true), parsing: .remaining,
            help: ArgumentHelp("Members: strings, or typed, e.g. -int 3.", valueName: "member")) var array: [String] = []
    @Option(name: .customLong("dict", withSingleDash: true), parsing: .remaining,
            help: ArgumentHelp("Key and value pairs, a value a string or typed, e.g. port -int 8080.", valueName: "key-value")) var dictionary: [String] = []
    @Option(name: .customLong("array-add", withSingleDash: true), parsing: .remaining,
            help: ArgumentHelp("Members to append to the key's array (a new array if the key has no value).", valueName: "member"))
    var arrayAdditions: [String] = []
    @Option(name: .customLong("dict-add", withSingleDash: true), parsing: .remaining,
            help: ArgumentHelp("Key and value pairs to add to the key's dictionary, replacing members of those keys (a new dictionary if the key has no value).",
                               valueName: "key-value"))
    var dictionaryAdditions: [String] = []
    @Option(name: .customLong("plist", withSingleDash: true), help: "A property-list file in any format; - for standard input.") var plist: String?

    @Flag(name: .customLong("empty-array", withSingleDash: true), help: "An empty array.") var emptyArray = false
    @Flag(name: .customLong("empty-dict", withSingleDash: true), help: "An empty dictionary.") var emptyDictionary = false

    @Option(name: .customLong("if-version"), help: ArgumentHelp(
        "Write only while the key's latest version on the remote is this one (kvsfs history), or absent: it holds no value.",
        valueName: "version|absent"))
    var ifVersion: VersionCondition?

    func validate() throws {
        let given = [string != nil, integer != nil, real != nil, boolean != nil, date != nil, data != nil,
                     !array.isEmpty || emptyArray, !dictionary.isEmpty || emptyDictionary, plist != nil,
                     !arrayAdditions.isEmpty, !dictionaryAdditions.isEmpty].filter { $0 }.count
        if given != 1 {
            throw ValidationError("give exactly one value option (-string, -int, -real, -bool, -date, -data, -array, -dict, -array-add, -dict-add, -plist)")
        }
    }

    func run() throws {
        let key = try KeyFile(path)
        let value: PropertyListValue
        if !arrayAdditions.isEmpty {
            let members = try DefaultsArguments.arrayMembers(arrayAdditions, option: "-array-add")
            value = try addition(to: key) { current in
                guard case .array(let existing) = current ?? .array([]) else { return nil }
                return .array(existing + members)
            }
        } else if !dictionaryAdditions.isEmpty {
            let members = try DefaultsArguments.dictionaryMembers(dictionaryAdditions, option: "-dict-add")
            value = try addition(to: key) { current in
                guard case .dictionary(let existing) = current ?? .dictionary([:]) else { return nil }
                return .dictionary(existing.merging(members) { $1 })
            }
        } else {
            value = try self.value()
        }
        if let ifVersion {
            try ifVersion.change(key, body: try PropertyListCodec.encodeXML(value))
            return
        }
        try ValueFile.write(try PropertyListCodec.encodeXML(value), to: key.path, key: key)
    }

    /// The key's value with members added by `add`, which answers nil when the value is not of
    /// the container type it adds to (then nothing is written). The key is read once here and
    /// written once by the caller: a change made in between is replaced, as with `defaults`.
    private func addition(to key: KeyFile, _ add: (PropertyListValue?) -> PropertyListValue?) throws -> PropertyListValue {
        let current: PropertyListValue?
        if let bytes = try ValueFile.readIfPresent(key.path) {
            do {
                current = try PropertyListCodec.decode(bytes)
            } catch {
                throw CommandFailure("\(path): \(error)")
            }
        } else {
            current = nil
        }
        guard let added = add(current) else {
            let (option, container) = arrayAdditions.isEmpty ? ("-dict-add", "a dictionary") : ("-array-add", "an array")
            throw CommandFailure("\(path) holds \(current?.type.withArticle ?? "no value"), not \(container): \(option) adds to \(container); nothing was written")
        }
        return added
    }

    private func value() throws -> PropertyListValue {
        if let string { return .string(string) }
        if let integer { return integer.value }
        if let real { return .real(real) }
        if let boolean { return try DefaultsArguments.value(.boolean, boolean, option: "-bool") }
        if let date { return try DefaultsArguments.value(.date, date, option: "-date") }
        if let data { return try DefaultsArguments.value(.data, data, option: "-data") }
        if !array.isEmpty || emptyArray { return .array(try DefaultsArguments.arrayMembers(array, option: "-array")) }
        if !dictionary.isEmpty || emptyDictionary { return .dictionary(try DefaultsArguments.dictionaryMembers(dictionary, option: "-dict")) }
        let bytes: [UInt8]
        if plist == "-" {
            bytes = [UInt8](FileHandle.standardInput.readDataToEndOfFile())
        } else {
            bytes = try ValueFile.read(plist!)
        }
        do {
            return try PropertyListCodec.decode(bytes)
        } catch {
            throw CommandFailure("\(plist!): \(error)")
        }
    }
}

/// An integer of the property-list range, −2^63…2^64−1, as `-int` takes it.
struct IntegerArgument: ExpressibleByArgument {
    let value: PropertyListValue

    init?(argument: String) {
        if let signed = Int(argument) {
            value = .integer(signed)
        } else if let unsigned = UInt64(argument) {
            value = .unsignedInteger(unsigned)
        } else {
            return nil
        }
    }
}

struct Delete: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Remove a key.",
        discussion: """
            With --if-version V, the key is removed only while its latest version on the remote is still V (as \
            `kvsfs history` prints it), as the remote decides: refused, nothing changes and one line says where the key stands.
            """)

    @Argument(help: "A file in a mount.")
    var path: String

    @Option(name: .customLong("if-version"), help: ArgumentHelp(
        "Remove only while the key's latest version on the remote is this one (kvsfs history), or absent: it holds no value.",
        valueName: "version|absent"))
    var ifVersion: VersionCondition?

    func run() throws {
        let key = try KeyFile(path)
        if let ifVersion {
            try ifVersion.change(key, body: nil)
            return
        }
        if unlink(key.path) != 0 { throw CommandFailure("cannot delete \(path): \(explain(errno))") }
    }
}

/// `--if-version V` of `kvsfs set` and `kvsfs delete`: a version as `kvsfs history` prints it
/// (1 or more), or `absent`.
struct VersionCondition: ExpressibleByArgument {
    let condition: ChangeCondition

    init?(argument: String) {
        if argument == "absent" {
            condition = .absent
        } else if let version = Int64(argument), version >= 1 {
            condition = .version(version)
        } else {
            return nil
        }
    }

    static var defaultCompletionKind: CompletionKind { .list(["absent"]) }

    /// Makes the change of `key` through its mount on this condition: `body` its new value as a
    /// property list, nil to remove it. The remote's refusal is the command's one line.
    func change(_ key: KeyFile, body: [UInt8]?) throws {
        let request = ControlRequest(command: .conditionalChange, key: key.name, remove: body == nil ? true : nil, condition: condition)
        _ = try ControlClient.send(request, body: body ?? [], to: key.mountpoint)
    }
}

/// Reads and writes whole value files with plain system calls, so that every errno the
/// mount gives (at write, fsync or close) reaches the user.
enum ValueFile {
    static func read(_ path: String) throws -> [UInt8] {
        guard let bytes = try readIfPresent(path) else { throw CommandFailure("cannot read \(path): \(explain(ENOENT))") }
        return bytes
    }

    /// The bytes of `path`, or nil when no file has that name.
    static func readIfPresent(_ path: String) throws -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw CommandFailure("cannot read \(path): \(explain(errno))")
        }
        defer { close(fd) }
        do {
            return try readToEnd(fd)
        } catch {
            throw CommandFailure("cannot read \(path): \(explain(error.code))")
        }
    }

    /// Why `readToEnd` stopped: the errno of the read that failed.
    struct ReadFailure: Error {
        let code: Int32
    }

    /// The bytes of `fd` up to its end, or up to the first read that takes them past `limit`.
    static func readToEnd(_ fd: Int32, stoppingPast limit: Int = .max) throws(ReadFailure) -> [UInt8] {
        var bytes = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        while bytes.count <= limit {
            let count = Glibc.read(fd, &chunk, chunk.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw ReadFailure(code: errno)
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }

    /// Writes `bytes` as the whole of `path`. When the mount refuses them as invalid and they
    /// are `key`'s value, the store's schema is asked why, so that the line names the rule.
    static func write(_ bytes: [UInt8], to path: String, key: KeyFile? = nil) throws {
        func failure(_ code: Int32) -> CommandFailure {
            if code == EINVAL, let key, let words = SchemaExplanation.violation(of: bytes, at: key) {
                return CommandFailure("cannot write \(path): \(words)")
            }
            return CommandFailure("cannot write \(path): \(explain(code))")
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw failure(errno) }
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                close(fd)
                throw failure(code)
            }
            offset += count
        }
        if fsync(fd) != 0 {
            let code = errno
            close(fd)
            throw failure(code)
        }
        if close(fd) != 0 { throw failure(errno) }
    }
}

/// How `kvsfs get` prints values.
enum ValueText {
    static func plain(_ value: PropertyListValue) throws -> String {
        switch value {
        case .string(let s): return s + "\n"
        case .integer(let i): return "\(i)\n"
        case .unsignedInteger(let u): return "\(u)\n"
        case .real(let d): return "\(d)\n"
        case .boolean(let b): return b ? "true\n" : "false\n"
        case .date(let d): return ISO8601DateFormatter().string(from: d) + "\n"
        case .data(let d): return d.base64EncodedString() + "\n"
        case .array, .dictionary: return String(decoding: try PropertyListCodec.encodeXML(value), as: UTF8.self)
        }
    }
}
