import ArgumentParser
import Foundation
import FuseKit
import KVCloud
import KVSFS
import KVStore
import KVSync
import Logging

struct Mount: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mount a store on MOUNTPOINT and serve it in the foreground until unmounted.",
        discussion: MountOptions.spellings)

    @Argument(help: "An existing, empty directory.")
    var mountpoint: String

    /// Never set by parsing: `KVSFSCommand.main` has rewritten each `-o` into the options it
    /// stands for (`MountOptions.expanding`); declared for `--help` and completion.
    @Option(name: .short, help: ArgumentHelp("Mount options, comma-separated, as the mount(8) form takes them (see below).", valueName: "opt[,opt...]"))
    var o: [String] = []

    @Flag(name: .short, help: "Accepted for mount(8)'s sake: kvsfs mount always serves in the foreground.")
    var f = false

    @OptionGroup var store: StoreOptions

    @Option(help: "The form files show values in: xml or binary.")
    var format: String = "xml"

    @Option(name: .customLong("quota-total"), help: "Byte limit for all values together (kept for the store).")
    var totalBytes: Int?

    @Option(name: .customLong("quota-value"), help: "Byte limit for one value (kept for the store).")
    var valueBytes: Int?

    @Option(name: .customLong("quota-keys"), help: "Limit on the number of keys (kept for the store).")
    var keys: Int?

    @Option(name: .customLong("quota-key-length"), help: "Limit on a key name, in bytes of UTF-8, at most \(KeyFileName.longestKeyBytes) (kept for the store).")
    var keyNameBytes: Int?

    @Flag(name: .customLong("allow-other"), help: "Let other users use the mount.")
    var allowOther = false

    @Flag(name: .customLong("read-only"), help: "Refuse every change made through the mount (EROFS); changes from the remote, kvsfs sync --replace-with-remote included, are applied.")
    var readOnly = false

    @Option(help: "The remote to sync with: file:///path/cloud.sqlite, https://host:port[/account] (http:// on loopback), or none (default: cloud.sqlite in the data directory).")
    var remote: String?

    @Option(name: .customLong("token-file"), help: "A file holding the sync server's token (else $KVSFS_TOKEN).")
    var tokenFile: String?

    @Option(name: .customLong("tls-ca"), help: "Trust the CA certificate(s) in this PEM file for an https remote, besides the system's.")
    var tlsCA: String?

    @Option(name: .customLong("history-versions"), help: "Versions of each key the file remote keeps (kept for the store; default 16).")
    var historyVersions: Int?

    @Option(name: .customLong("history-days"), help: "Days the file remote keeps a removed key's history (kept for the store; default 30).")
    var historyDays: Int?

    @Option(name: .customLong("defaults"), help: "A property list whose root dictionary registers a default value for each of its keys: shown while the key has no value, never synced, reloaded on SIGHUP.",
            completion: .file(extensions: ["plist"]))
    var defaultsFile: String?

    @Option(name: .customLong("device-name"), help: "The name this device's changes show beside its id in conflicts and history (kept for the store; default the host name at the first mount).")
    var deviceName: String?

    @OptionGroup var log: LogOptions

    func validate() throws {
        // Only a -o inside a group of short flags (-fo) reaches the parser.
        if !o.isEmpty { throw ValidationError("give -o as an argument of its own: -o OPT[,OPT...]") }
        guard ValueFormat(rawValue: format) != nil else { throw ValidationError("--format must be xml or binary") }
        for (name, value) in [("--quota-total", totalBytes), ("--quota-value", valueBytes), ("--quota-keys", keys), ("--quota-key-length", keyNameBytes)] {
            if let value, value < 1 { throw ValidationError("\(name) must be a positive number") }
        }
        if let keyNameBytes, keyNameBytes > KeyFileName.longestKeyBytes {
            throw ValidationError("--quota-key-length can be at most \(KeyFileName.longestKeyBytes), so that every key has a file name")
        }
        if let deviceName, !DeviceName.isValid(deviceName) {
            do {
                try DeviceName.check(deviceName)
            } catch {
                throw ValidationError("--device-name \(deviceName.debugDescription): \(error)")
            }
        }
        if let remote, remote != "none", RemoteLocation.filePath(remote) == nil, !RemoteLocation.isServer(remote) {
            throw ValidationError("--remote must be file:///absolute/path, https://host:port, http://127.0.0.1:port or none")
        }
        if !requestedHistory.isEmpty {
            if remote == "none" { throw ValidationError("--history-versions and --history-days need a remote: history is kept by the remote") }
            if let remote, RemoteLocation.filePath(remote) == nil {
                throw ValidationError("--history-versions and --history-days set the file remote's history; a server's is set with kvsfs account history")
            }
            if let violation = requestedHistory.violation { throw ValidationError(violation) }
        }
    }

    func run() throws {
        log.bootstrap()
        Readiness.takeStarterPipe()
        do {
            try mountAndServe()
        } catch {
            Readiness.failed(String(describing: error))
            throw error
        }
    }

    private func mountAndServe() throws {
        let path = URL(fileURLWithPath: mountpoint).standardizedFileURL.path
        let logger = Logger(label: "kvsfs")
        // SQLite frees a few tens of KiB per commit; glibc's default trim threshold hands that back to
        // the kernel (madvise) on worker-thread arenas and faults it in again on the next request.
        SystemCalls.keepFreedMemory()

        let named = store.dataDirectory.map { URL(fileURLWithPath: $0) } ?? StoreLocation.defaultDataDirectory()
        do {
            try FileManager.default.createDirectory(at: named, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CommandFailure("cannot create the data directory \(named.path): \(error.localizedDescription)")
        }
        // The directory as checked is the one used from here on: a link in its path that
        // changes later leads nowhere new.
        let dataDirectory = URL(fileURLWithPath: try OwnFiles.trustedDataDirectory(named.path))
        let location = try StoreLocation(dataDirectory: dataDirectory, storeID: store.storeID)
        // Read before the store is opened: a token file that is refused changes nothing.
        let serverToken = try self.remote.map { RemoteLocation.isServer($0) } == true ? token() : nil
        let lock = try StuckDaemon.lock(location, logger: logger)
        // Checked once the store is this process's: a mount its earlier daemon left behind
        // answers by now, or has gone.
        try MountpointCheck.check(path, logger: logger)
        let keyValueStore = try openStore(location, dataDirectory: dataDirectory)
        for change in keyValueStore.quarantined {
            logger.error("a committed change to \(change.key.debugDescription) (\(change.stamp)) was refused by the database and kept in \(location.databasePath).quarantine")
        }
        let ownName = try keyValueStore.nameDevice(deviceName)
        let newLimits = requestedLimits(over: keyValueStore.limits)
        if let newLimits { try keyValueStore.setLimits(newLimits) }
        let defaults = defaultsFile.map(DefaultsFile.init)
        let registered: RegisteredDefaults?
        do {
            registered = try defaults?.load(limits: keyValueStore.limits)
        } catch {
            throw CommandFailure("invalid defaults file \(defaults!.path): \(error)")
        }

        let remote = try makeRemote(dataDirectory: dataDirectory, limits: newLimits, token: serverToken)
        logger.info("\(startLine(store: keyValueStore, deviceName: ownName, dataDirectory: dataDirectory, mountpoint: path, remote: remote))")
        // The one door for changes the kernel did not make: remote ones, an import, a resolve.
        let applier = MountApplier(mountpoint: path, store: keyValueStore)
        let sync = try remote.map { remote in
            try MountSync(store: keyValueStore, remote: remote, remoteStore: store.storeID, applier: applier,
                          eventLogPath: dataDirectory.appendingPathComponent("\(store.storeID).events.jsonl").path, logger: logger)
        }
        let fileSystem = KeyValueFileSystem(
            store: keyValueStore,
            configuration: MountConfiguration(format: ValueFormat(rawValue: format)!, readOnly: readOnly, location: location,
                                              registersDefaults: defaults != nil, allowOther: allowOther),
            sync: sync, applier: applier, logger: logger)
        // A store that syncs may get a schema, whose defaults then take the place of the file's:
        // shown through the applier, as a writer's creates and unlinks, which the kernel's
        // cache of names follows.
        let defaultsChoice = DefaultsChoice(fileSystem: fileSystem, file: registered, logger: logger)
        defaultsChoice.start()
        var options = ["fsname=kvsfs:\(store.storeID)", "subtype=kvsfs"]
        // Only the mounting user reaches the mount unless --allow-other; then the kernel checks
        // permissions (0644 files, 0755 directory, owned by the mounting user).
        if allowOther { options += ["allow_other", "default_permissions"] }
        if ProcessInfo.processInfo.environment["KVSFS_FUSE_DEBUG"] != nil { options.append("debug") }
        let mount: FuseMount
        do {
            mount = try FuseMount(fileSystem: fileSystem, mountpoint: path, options: options)
        } catch {
            throw CommandFailure(error.description)
        }
        mount.handleSignals()
        applier.mounted()
        do {
            try StuckDaemon.note(lock, mountpoint: path)
        } catch {
            logger.warning("\(error); should this daemon be killed while it waits on its mount, the next kvsfs mount cannot end it")
        }
        fileSystem.attach(kernelCache: mount)
        if let defaults { try HangupReload.install { defaults.reload(into: defaultsChoice, logger: logger) } }
        sync?.start()
        // Acts on the whole store (sync, export, import, ...) come through the control socket,
        // which only the mounting user (or root) may use: no file operation, which any user of
        // an allow_other mount may make, changes more than a key. A mount without one still
        // serves its files.
        let control: ControlSocket?
        do {
            control = try ControlSocket(address: ControlAddress(dataDirectory: dataDirectory.path, storeID: store.storeID),
                                        fileSystem: fileSystem, history: remote.map { ($0, store.storeID) }, sync: sync, mountpoint: path, logger: logger)
        } catch {
            logger.warning("\(error); kvsfs sync, export, import, history and revert will not reach this mount")
            control = nil
        }
        control?.start()
        MountProbe.whenAnswering(path) { Readiness.ready() }
        let status = mount.run()
        control?.stop()
        fileSystem.attach(kernelCache: nil)
        Readiness.stopping()
        sync?.stop()
        applier.stop()
        do {
            try keyValueStore.makeDurable()
        } catch {
            // Unmounted all the same: what is committed is in the journal, which the next mount
            // replays; only its way to the disk's own copy is what failed.
            throw CommandFailure("unmounted, but the store could not be made durable: \(error); every acknowledged write is kept "
                + "in the store's files and taken in at the next mount, but one not saved with fsync may be lost if the machine stops before then")
        }
        withExtendedLifetime(lock) {}
        if status != 0 { throw CommandFailure("the FUSE session ended with status \(status)") }
        logger.info("unmounted cleanly: every acknowledged write is committed")
    }

    /// Opens the store, replaying its journal. A disk without room for the replay is said in
    /// one line: nothing is lost, the journal holds every acknowledged write until a replay
    /// succeeds.
    private func openStore(_ location: StoreLocation, dataDirectory: URL) throws -> KeyValueStore {
        let opened: StoreError
        do {
            return try KeyValueStore(path: location.databasePath)
        } catch {
            opened = error
        }
        guard case .diskFull(_, let shortage) = opened else { throw opened }
        throw CommandFailure("cannot open the store '\(store.storeID)' in \(dataDirectory.path): \(Self.noRoom(shortage, in: dataDirectory.path)); free some space and mount again")
    }

    /// Why a disk had no room, with what it has left when it says.
    private static func noRoom(_ shortage: DiskShortage, in directory: String) -> String {
        if shortage == .userQuota { return "your disk quota on its file system is spent" }
        guard let free = DiskRoom.freeBytes(at: directory) else { return "the disk is full" }
        return "the disk is full (\(counted(free, "byte")) free)"
    }

    /// What the mount says as it starts: the store, where it lives and what it holds, the
    /// remote, the format and the quotas, so that a store kept from before is noticed.
    private func startLine(store keyValueStore: KeyValueStore, deviceName: String, dataDirectory: URL, mountpoint: String,
                           remote: (any ChangeLog)?) -> String {
        let usage = keyValueStore.usage
        let kept = usage.keys == 0 ? "no keys yet" : "\(counted(usage.keys, "key")) (\(counted(usage.bytes, "byte"))) kept from before"
        let limits = keyValueStore.limits
        return "mounting store '\(store.storeID)' of \(dataDirectory.path) on \(mountpoint)\(readOnly ? " read-only" : ""): \(kept); "
            + "device \(DeviceName.shown(keyValueStore.deviceID, named: deviceName)); "
            + "remote \(remote?.description ?? "none"); values shown as \(format); "
            + "quotas: \(counted(limits.totalBytes, "byte")) in all, \(limits.valueBytes) per value, "
            + "\(counted(limits.keys, "key")), key names of \(limits.keyNameBytes) bytes"
    }

    /// The change log of the remote `--remote` names, which keeps this mount's store under its
    /// store id; nil for none.
    private func makeRemote(dataDirectory: URL, limits: QuotaLimits?, token: String?) throws -> (any ChangeLog)? {
        let url = remote ?? "file://" + dataDirectory.appendingPathComponent("cloud.sqlite").path
        if url == "none" { return nil }
        if let path = RemoteLocation.filePath(url) {
            // The file remote belongs to the same user: --quota-* set its limits too.
            return EmbeddedChangeLog.file(path: path, store: store.storeID, limits: limits, history: requestedHistory)
        }
        let id = store.storeID
        guard let token else { throw CommandFailure("a sync server needs a token: give --token-file FILE or set KVSFS_TOKEN") }
        guard let tlsCA else { return HTTPChangeLog(url: url, token: token, identityStore: id) }
        try OwnFiles.checkRegularFile(tlsCA, what: "the CA certificate")
        do {
            let client = try HTTPChangeLog.client(trusting: tlsCA)
            return HTTPChangeLog(url: url, token: token, client: client, identityStore: id)
        } catch let error as CloudError {
            throw CommandFailure(error.description)
        }
    }

    /// The server token, from --token-file or $KVSFS_TOKEN (never from the command line,
    /// where other users could read it).
    private func token() throws -> String {
        if let tokenFile { return try OwnFiles.readToken(tokenFile) }
        if let token = ProcessInfo.processInfo.environment["KVSFS_TOKEN"], !token.isEmpty { return token }
        throw CommandFailure("a sync server needs a token: give --token-file FILE or set KVSFS_TOKEN")
    }

    /// The parts of the history policy --history-* ask for.
    private var requestedHistory: HistoryPolicyChange {
        HistoryPolicyChange(versions: historyVersions, retentionDays: historyDays)
    }

    private func requestedLimits(over current: QuotaLimits) -> QuotaLimits? {
        guard totalBytes != nil || valueBytes != nil || keys != nil || keyNameBytes != nil else { return nil }
        var limits = current
        if let totalBytes { limits.totalBytes = totalBytes }
        if let valueBytes { limits.valueBytes = valueBytes }
        if let keys { limits.keys = keys }
        if let keyNameBytes { limits.keyNameBytes = keyNameBytes }
        return limits
    }
}

/// Finds out when a mount answers requests: the daemon is ready only then.
enum MountProbe {
    /// Calls `ready` from a thread of its own once `path` answers stat(2) as a mount (on another
    /// device than its parent): the call goes through the kernel to this process's own
    /// session, so it returns only once the session serves. Gives up, without calling, when
    /// the mount goes away first.
    static func whenAnswering(_ path: String, ready: @escaping @Sendable () -> Void) {
        let thread = Thread {
            var parent = stat()
            guard stat((path as NSString).deletingLastPathComponent, &parent) == 0 else { return }
            for _ in 0..<2000 {
                var info = stat()
                if stat(path, &info) == 0, info.st_dev != parent.st_dev {
                    ready()
                    return
                }
                if errno == ENOTCONN { return }
                usleep(5000)
            }
        }
        thread.name = "kvsfs-ready"
        thread.start()
    }
}

/// The checks made before mounting, so that a bad mountpoint leaves nothing mounted.
enum MountpointCheck {
    /// How many dead mounts, one over the other, a mountpoint may be freed of.
    static let deadMountsFreed = 8

    static func check(_ path: String, logger: Logger, deadMountsLeft: Int = deadMountsFreed) throws {
        // statfs always asks the file system (stat may be answered from the kernel's cache of a
        // dead mount's root): ENOTCONN means a FUSE mount whose daemon is gone.
        var space = statvfs()
        var dead = statvfs(path, &space) != 0 && errno == ENOTCONN
        var info = stat()
        if !dead, stat(path, &info) != 0 {
            let code = errno
            dead = code == ENOTCONN
            if code == ENOENT { throw CommandFailure("mountpoint \(path) does not exist: create it with 'mkdir -p \(path)'") }
            if !dead { throw CommandFailure("cannot use mountpoint \(path): \(String(cString: strerror(code)))") }
        }
        if dead {
            guard deadMountsLeft > 0 else { throw CommandFailure("\(path) holds more than \(deadMountsFreed) dead mounts: unmount them with 'fusermount3 -u \(path)' first") }
            try detachDeadMount(path, logger: logger)
            return try check(path, logger: logger, deadMountsLeft: deadMountsLeft - 1)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw CommandFailure("mountpoint \(path) is not a directory") }
        if isMountpoint(path) { throw CommandFailure("\(path) is already a mount point: unmount it first") }
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        if !entries.isEmpty { throw CommandFailure("mountpoint \(path) is not empty (\(entries.count == 1 ? "1 entry" : "\(entries.count) entries")): mount on an empty directory") }
    }

    /// Whether something is mounted on `path`.
    static func isMountpoint(_ path: String) -> Bool {
        MountTable.top(at: path) != nil
    }

    /// Unmounts (lazily) a kvsfs mount on `path` whose daemon is gone, and says so; refuses
    /// any other file system's.
    private static func detachDeadMount(_ path: String, logger: Logger) throws {
        guard ControlClient.isKVSFSMount(path) else {
            throw CommandFailure("\(path) is a mount whose daemon has gone away: unmount it with 'fusermount3 -u \(path)' first")
        }
        if umount2(path, Int32(MNT_DETACH)) != 0 {
            let unmount = Process()
            unmount.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
            unmount.arguments = ["-u", "-z", path]
            let failure = CommandFailure("\(path) is a kvsfs mount whose daemon has gone away, and it could not be unmounted: run 'fusermount3 -u \(path)' first")
            do {
                try unmount.run()
            } catch {
                throw failure
            }
            unmount.waitUntilExit()
            guard unmount.terminationReason == .exit, unmount.terminationStatus == 0 else { throw failure }
        }
        logger.warning("\(path) was a kvsfs mount whose daemon had gone away; unmounted it")
    }

}

