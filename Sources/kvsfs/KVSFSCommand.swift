import ArgumentParser
import KVSFS

/// The root command. Synchronous on purpose: `mount` runs the FUSE loop on the main thread,
/// where libfuse's SIGINT/SIGTERM handler can interrupt it (an async root would leave the
/// main thread to Dispatch and the loop on a pool thread that signals never reach).
@main
struct KVSFSCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvsfs",
        abstract: "Mount a key-value store as a directory: one file per key, property lists as contents.",
        discussion: "See kvsfs(1) for formats, quotas, errors and the editor-file rule.",
        version: "0.1.0",
        subcommands: [Mount.self, Get.self, Set.self, Delete.self, Sync.self, Status.self, Events.self, Watch.self, Schema.self, Export.self, Import.self, History.self, Revert.self, Conflicts.self, Resolve.self, Serve.self, Account.self, Token.self]
    )

    /// `kvsfs STORE MOUNTPOINT ...` is the mount(8) form (`MountHelper`); every other command
    /// line names a subcommand. `kvsfs mount`'s `-o` options are the mount(8) form's, rewritten
    /// through its table before parsing.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        // The mount's own child that shows remote changes through it, started by the daemon.
        if arguments.count == 2, arguments[0] == ApplierProcess.commandName {
            ApplierProcess.serve(mountpoint: arguments[1])
        }
        if arguments.first == Mount._commandName {
            do {
                main([arguments[0]] + (try MountOptions.expanding(Array(arguments.dropFirst()))))
            } catch {
                exit(withError: error)
            }
            return
        }
        if let first = arguments.first, !first.hasPrefix("-"), arguments.count >= 2, first != "help",
           !configuration.subcommands.contains(where: { $0._commandName == first }) {
            MountHelper.main(arguments)
            return
        }
        main(nil)
    }
}

/// Options naming a store on this machine.
struct StoreOptions: ParsableArguments {
    @Option(name: .customLong("store"), help: "The store to mount.")
    var storeID = "default"

    @Option(name: .customLong("data-dir"), help: "Where stores live (default: $XDG_DATA_HOME/kvsfs, else ~/.local/share/kvsfs).")
    var dataDirectory: String?

    func validate() throws {
        if !isValidStoreID(storeID) {
            throw ValidationError("invalid store name '\(storeID)': use letters, digits, '.', '_' and '-'")
        }
    }
}
