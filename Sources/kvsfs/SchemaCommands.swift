import ArgumentParser
import Foundation
import Glibc
import KVStore

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a store's schema, and check values against it (kvsfs(1), SCHEMA).",
        subcommands: [Show.self, Check.self])

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the store's schema as it was set, as the mount holds it.",
            discussion: "Exits with status 1, saying so, when the store has none; kvsfs status gives its version.")

        @Argument(help: "A kvsfs mount.")
        var mountpoint: String

        func run() throws {
            let listing = try SchemaListing.ask(mountpoint, request: ControlRequest(command: .schema))
            guard let text = listing.text else { throw CommandFailure("\(mountpoint): the store has no schema") }
            try Export.writeStandardOutput(text)
        }
    }

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the keys whose values break the store's schema, or the schema in FILE.",
            discussion: """
                One line a key: the key, the value's type and the rule it breaks. Exits with status 0 when every value \
                conforms, 1 when some do not (or FILE is not a schema: the line says where and why). With FILE, the \
                mount's values are checked against it and nothing is set: what setting it would find.
                """)

        @Argument(help: "A kvsfs mount.")
        var mountpoint: String

        @Argument(help: "A schema to check the values against instead of the store's (- for standard input).")
        var file: String?

        func run() throws {
            var request = ControlRequest(command: .schema)
            var body: [UInt8]?
            if let file {
                let text = try SchemaText.read(file)
                do {
                    _ = try KeySchema(decoding: text)
                } catch {
                    throw CommandFailure("\(file): \(error)")
                }
                request = ControlRequest(command: .checkSchema)
                body = text
            }
            let listing = try SchemaListing.ask(mountpoint, request: request, body: body)
            if file == nil, listing.text == nil {
                print("the store has no schema: every value conforms")
                return
            }
            if file == nil, let reason = listing.unreadable {
                throw CommandFailure("\(mountpoint): the store's schema (version \(listing.version)) cannot be read here: \(reason)")
            }
            for violation in listing.violations { print(Watch.printable(violation)) }
            let what = file.map { "the schema in \($0)" } ?? "the store's schema (version \(listing.version))"
            guard listing.violations.isEmpty else {
                let count = listing.violations.count
                throw CommandFailure("\(count) of \(listing.keys) key\(listing.keys == 1 ? "" : "s") break\(count == 1 ? "s" : "") \(what)")
            }
            print("all \(listing.keys) key\(listing.keys == 1 ? "" : "s") conform to \(what)")
        }
    }
}

/// A schema's text from a file or standard input, within the bound on a schema.
enum SchemaText {
    static func read(_ file: String) throws -> [UInt8] {
        let fd = file == "-" ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CommandFailure("cannot read \(file): \(explain(errno))") }
        defer { if file != "-" { close(fd) } }
        let bytes: [UInt8]
        do {
            bytes = try ValueFile.readToEnd(fd, stoppingPast: SchemaLimits.bytes)
        } catch {
            throw CommandFailure("cannot read \(file): \(explain(error.code))")
        }
        guard bytes.count <= SchemaLimits.bytes else {
            throw CommandFailure("\(file): a schema is at most \(SchemaLimits.bytes) bytes")
        }
        return bytes
    }
}

/// The answer to `schema` and `checkSchema`: the schema the mount holds, and the values that
/// break it (or the one sent).
struct SchemaListing: Codable {
    var version: Int64
    var text: [UInt8]?
    /// Why this kvsfs cannot read the schema held, when it cannot.
    var unreadable: String?
    /// Each value that breaks it, in words, by key.
    var violations: [String]
    /// How many keys hold values.
    var keys: Int

    static func ask(_ mountpoint: String, request: ControlRequest, body: [UInt8]? = nil) throws -> SchemaListing {
        let answer = try ControlClient.send(request, body: body, to: mountpoint)
        do {
            return try JSONDecoder().decode(SchemaListing.self, from: Data(answer))
        } catch {
            throw CommandFailure("the mount at \(mountpoint) gave an answer that is not one")
        }
    }
}

/// What shell completion offers after `kvsfs set PATH -string` (or `-int`, `-real`): the
/// choices the store's schema lists for the key, of that type. Asked of the mount through its
/// control socket; anything that fails offers nothing, as a completion must never print an
/// error.
enum ChoiceCompletion {
    static func offer(_ type: ValueType, _ words: [String], _ prefix: String) -> [String] {
        // The key's file is the first word after `set` that is not an option.
        guard let set = words.firstIndex(of: "set"),
              let path = words[(set + 1)...].first(where: { !$0.hasPrefix("-") }),
              let file = try? KeyFile(path),
              let listing = try? SchemaListing.ask(file.mountpoint, request: ControlRequest(command: .schema)),
              let text = listing.text,
              let schema = try? KeySchema(decoding: text) else { return [] }
        let choices = schema.rules(for: file.name).compactMap(\.choices).flatMap { $0 }
        return choices.compactMap { choice -> String? in
            switch (type, choice) {
            case (.string, .string(let text)): text
            case (.integer, .integer(let number)): String(number)
            case (.integer, .unsignedInteger(let number)): String(number)
            case (.real, .real(let number)): String(number)
            default: nil
            }
        }.filter { $0.hasPrefix(prefix) }
    }
}
