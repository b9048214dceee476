import ArgumentParser
import Foundation
import Glibc
import KVStore

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a store's schema, and check values against it (kvsfs(1), SCHEMA).",
        subcommands: [SetSchema.self, Show.self, Check.self])

    struct SetSchema: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Set the store's schema from FILE on its remote, for every mount of the store.",
            discussion: """
                The remote keeps it with a new version; this mount holds it at once, every other mount at its next \
                sync round. Values that break it stay (kvsfs schema check lists them); the next write of such a key \
                must conform. Needs a token that may write the store: on a read-only store the server's administrator \
                sets it (kvsfs account schema). --if-version sets it only while the store's schema is still at that \
                version (0: the store has none), as kvsfs status prints it.
                """)

        @Argument(help: "A kvsfs mount.")
        var mountpoint: String

        @Argument(help: "The schema, a property list in any format (- for standard input).")
        var file: String?

        @Flag(help: "Remove the store's schema instead.")
        var remove = false

        @Option(name: .customLong("if-version"), help: ArgumentHelp("Only while the store's schema is still at this version.", valueName: "version"))
        var ifVersion: Int64?

        func validate() throws {
            if remove == (file != nil) { throw ValidationError("give a schema FILE, or --remove") }
            if let ifVersion, ifVersion < 0 { throw ValidationError("--if-version takes a version of 0 or more") }
        }

        func run() throws {
            var text: [UInt8] = []
            if let file {
                text = try SchemaText.read(file)
                do {
                    _ = try KeySchema(decoding: text)
                } catch {
                    throw CommandFailure("\(file): \(error)")
                }
            }
            let listing = try SchemaListing.ask(mountpoint, request: ControlRequest(command: .setSchema, remove: remove, ifVersion: ifVersion), body: text)
            guard listing.text != nil else {
                print("the store's schema is removed (version \(listing.version))")
                return
            }
            let count = listing.violations.count
            print("the store's schema is now version \(listing.version)"
                + (count == 0 ? "; every value conforms" : "; \(count) of \(listing.keys) keys hold values that break it (kvsfs schema check lists them)"))
        }
    }

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
            var body: [UInt8] = []
            if let file {
                let text = try SchemaText.read(file)
                do {
                    _ = try KeySchema(decoding: text)
                } catch {
                    throw CommandFailure("\(file): \(error)")
                }
                body = text
            }
            let listing = try SchemaListing.ask(mountpoint, request: ControlRequest(command: .checkSchema), body: body)
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
        }.filter { $0.hasPrefix(prefix) && isPlainWord($0) }
    }

    /// Whether a shell takes `choice` as one word as it is: the completion scripts hand the
    /// words to `compgen -W`, which would expand `$(...)` in a choice the schema's author wrote.
    static func isPlainWord(_ choice: String) -> Bool {
        !choice.isEmpty && choice.unicodeScalars.allSatisfy { scalar in
            scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "._:/@%+=,-".unicodeScalars.contains(scalar)
        }
    }
}

/// Why the mount refused a value as invalid, when the reason is the store's schema: asked
/// after the refusal, of the schema the mount holds, so that `kvsfs set` and `revert` name the
/// rule instead of the errno's general words.
enum SchemaExplanation {
    /// The violation `bytes` make as `key`'s value; nil when the schema cannot be asked (a
    /// mount of another user's) or does not refuse them.
    static func violation(of bytes: [UInt8], at key: KeyFile) -> String? {
        guard let listing = try? SchemaListing.ask(key.mountpoint, request: ControlRequest(command: .schema)),
              let text = listing.text,
              let schema = try? KeySchema(decoding: text),
              let value = try? PropertyListCodec.decode(bytes) else { return nil }
        return schema.violation(key: key.name, value: value)?.description
    }
}
