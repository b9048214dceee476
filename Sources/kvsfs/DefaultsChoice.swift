import KVSFS
import KVStore
import Logging
import Synchronization

/// Which defaults a mount shows: its store's schema's when the store has one this kvsfs reads,
/// else the `--defaults` file's (kept, for when the schema goes). Chosen again whenever either
/// changes: a new schema synced, or the file reloaded on SIGHUP.
final class DefaultsChoice: Sendable {
    private let fileSystem: KeyValueFileSystem
    private let logger: Logger
    /// The file's defaults as last loaded; nil without `--defaults`.
    private let file: Mutex<RegisteredDefaults?>

    init(fileSystem: KeyValueFileSystem, file: RegisteredDefaults?, logger: Logger) {
        self.fileSystem = fileSystem
        self.file = Mutex(file)
        self.logger = logger
    }

    /// Shows the defaults chosen now, and again after every schema the store takes.
    func start() {
        fileSystem.store.observeSchema { [self] _ in apply() }
        apply()
    }

    /// The file's defaults, reloaded: shown unless the schema gives the defaults.
    func takeFile(_ defaults: RegisteredDefaults) {
        file.withLock { $0 = defaults }
        apply()
    }

    /// The store's limits, which a defaults file is checked against.
    var limits: QuotaLimits { fileSystem.store.limits }

    /// Whether the store's schema gives the defaults now.
    var schemaGives: Bool { fileSystem.store.schema.rules != nil }

    private func apply() {
        let store = fileSystem.store
        guard let rules = store.schema.rules else {
            fileSystem.registerDefaults(file.withLock { $0 } ?? RegisteredDefaults())
            return
        }
        let (defaults, skipped) = RegisteredDefaults.fromSchema(rules.defaults, limits: store.limits)
        for (key, reason) in skipped.sorted(by: { $0.key < $1.key }) {
            logger.warning("the schema's default of \(key.debugDescription) is not shown: \(reason)")
        }
        fileSystem.registerDefaults(defaults)
    }
}
