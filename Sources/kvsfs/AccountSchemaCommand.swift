import ArgumentParser
import Foundation
import KVCloud
import KVServer
import KVStore

extension Account {
    /// `kvsfs account schema ACCOUNT/STORE [FILE]`: a store's schema on the server's database,
    /// printed, set or removed by its operator; how a store only read-only tokens reach gets
    /// one.
    struct SchemaSetting: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "schema",
            abstract: "Print, set or remove the schema a store's pushes are judged against.",
            discussion: """
                Without FILE, prints "version N" and the store's schema as it was set (version 0 and nothing \
                when it never had one). With FILE (- for standard input), sets the schema to the property list \
                in it, and prints the new version; --remove removes it. A schema the store cannot read is refused \
                with the reason, and nothing changes. From then on, every change pushed to the store whose value \
                breaks the schema is refused; values stored before stay. A store not made yet is made.
                """)

        @Argument(help: "ACCOUNT/STORE.")
        var store: String

        @Argument(help: ArgumentHelp("The schema: a property list in any format kvsfs reads (- for standard input).",
                                     valueName: "file"))
        var file: String?

        @Flag(help: "Remove the store's schema.")
        var remove = false

        @Option(name: .customLong("if-version"), help: "Only while the store's schema is at this version (0: it never had one).")
        var ifVersion: Int64?

        @OptionGroup var database: DatabaseOptions

        func validate() throws {
            _ = try Account.addressed(store)
            if remove, file != nil { throw ValidationError("give FILE or --remove, not both") }
            if ifVersion != nil, !remove, file == nil { throw ValidationError("--if-version goes with FILE or --remove") }
            if let ifVersion, ifVersion < 0 { throw ValidationError("--if-version is a version, 0 or more") }
        }

        func run() throws {
            let (account, stored) = try Account.addressed(store)
            let text: [UInt8]? = try file.map(SchemaText.read)
            let change = remove || text != nil
            let ifVersion = ifVersion
            let schema = try Account.withStore(database, account: account) { storage throws(CloudError) -> RemoteSchema in
                if change { return try await storage.setSchema(text, of: stored, ifVersion: ifVersion) }
                return try await storage.schema(of: stored)
            }
            var output = Array("version \(schema.version)\n".utf8)
            if !change, let shown = schema.text {
                // As set, bytes and all (a binary property list too).
                output += shown
                if shown.last != UInt8(ascii: "\n") { output.append(UInt8(ascii: "\n")) }
            }
            FileHandle.standardOutput.write(Data(output))
        }
    }
}
