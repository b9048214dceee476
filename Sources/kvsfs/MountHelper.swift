import ArgumentParser
import Foundation
import Glibc
import KVStore

/// `kvsfs STORE MOUNTPOINT [-o OPTIONS]`: what mount.fuse3 runs for `mount -t fuse.kvsfs STORE
/// MOUNTPOINT -o OPTIONS` and for an fstab line `STORE MOUNTPOINT fuse.kvsfs OPTIONS 0 0`.
///
/// Invariant: it returns 0 only once the mount answers requests, with the daemon serving it
/// in the background; anything that fails before then is its exit status and one line on
/// stderr, and nothing stays mounted.
struct MountHelper: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kvsfs STORE MOUNTPOINT",
        abstract: "Mount store STORE on MOUNTPOINT in the background, as mount(8) does (see MOUNT(8) AND FSTAB in kvsfs(1)).",
        discussion: MountOptions.spellings)

    @Argument(help: "The store's id.")
    var store: String

    @Argument(help: "An existing, empty directory.")
    var mountpoint: String

    @Option(name: .short, help: "Mount options, comma-separated (see kvsfs(1)).")
    var o: [String] = []

    @Flag(name: .short, help: "Stay in the foreground.")
    var f = false

    /// How long the daemon may take to answer before the mount is given up.
    static let startTimeout: Duration = .seconds(60)

    func run() throws {
        let options = try MountOptions(store: store, mountpoint: mountpoint, options: o.joined(separator: ","))
        let mount: Mount
        do {
            mount = try Mount.parse(options.arguments)
        } catch {
            throw CommandFailure(Mount.message(for: error).split(separator: "\n").first.map(String.init) ?? "invalid mount options")
        }
        if f || options.foreground {
            try mount.run()
            return
        }
        let dataDirectory = options.dataDirectory.map { URL(fileURLWithPath: $0) } ?? StoreLocation.defaultDataDirectory()
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // Checked before the daemon's log is opened there: a link another user planted in the
        // directory must not take the log (it is also opened with O_NOFOLLOW).
        _ = try OwnFiles.trustedDataDirectory(dataDirectory.path)
        let log = dataDirectory.appendingPathComponent("\(store).log").path
        let daemon = try StartingDaemon.spawn(["kvsfs", "mount"] + options.arguments, log: log)
        try daemon.awaitReady(within: Self.startTimeout)
    }
}

/// The `-o` options of the mount(8) form and of `kvsfs mount`, as `kvsfs mount` arguments:
/// the one table of their spellings. Every `kvsfs mount` option has its spelling here; the
/// generic options mount(8) and fstab pass along are taken and ignored; anything else is
/// refused by name.
struct MountOptions {
    /// `ro` or `rw`, whichever a list names last: as mount(8) reads them, a later one undoes an
    /// earlier one, so `-o ro -o rw` mounts read-write.
    enum Access {
        case readOnly
        case readWrite
    }

    /// The arguments the options stand for, but the access (`access`).
    private(set) var options: [String]
    private(set) var access: Access?
    private(set) var foreground = false
    private(set) var dataDirectory: String?

    /// The `kvsfs mount` arguments: the options, `--read-only` first when the list asks for it.
    var arguments: [String] { (access == .readOnly ? ["--read-only"] : []) + options }

    /// Options with a value, and the `kvsfs mount` option each stands for.
    static let valued: [String: String] = [
        "remote": "--remote", "data_dir": "--data-dir", "token_file": "--token-file", "tls_ca": "--tls-ca",
        "format": "--format", "quota_total": "--quota-total", "quota_value": "--quota-value",
        "quota_keys": "--quota-keys", "quota_key_length": "--quota-key-length", "defaults": "--defaults",
        "history_versions": "--history-versions", "history_days": "--history-days", "log_level": "--log-level",
        "device_name": "--device-name",
    ]
    /// Options without a value, and the `kvsfs mount` flag each stands for.
    static let flags: [String: String] = ["allow_other": "--allow-other", "ro": "--read-only", "debug": "-d"]
    /// What mount(8), fstab and mount.fuse3 pass along that means nothing more here: a FUSE
    /// mount is always nodev and nosuid. (`rw` is the default, and undoes an earlier `ro`.)
    static let ignored: Swift.Set<String> = [
        "defaults", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime",
        "strictatime", "diratime", "nodiratime", "auto", "noauto", "user", "nouser", "users", "owner", "group",
        "_netdev", "nofail", "sync", "async",
    ]

    /// The mount(8) form's arguments: `--store STORE MOUNTPOINT` and what `options` stand for.
    init(store: String, mountpoint: String, options: String) throws {
        try self.init(options: options)
        self.options = ["--store", store, mountpoint] + self.options
    }

    /// The `kvsfs mount` arguments a comma-separated list of options stands for.
    init(options list: String) throws {
        options = []
        for option in list.split(separator: ",", omittingEmptySubsequences: true).map(String.init) {
            let (name, value) = option.firstIndex(of: "=").map { (String(option[..<$0]), String(option[option.index(after: $0)...])) }
                ?? (option, nil)
            if name == "ro" || name == "rw", value == nil {
                access = name == "ro" ? .readOnly : .readWrite
            } else if let flag = Self.flags[name], value == nil {
                options.append(flag)
            } else if let long = Self.valued[name], let value, !value.isEmpty {
                options += [long, value]
                if name == "data_dir" { dataDirectory = value }
            } else if name == "foreground", value == nil {
                foreground = true
            } else if Self.ignored.contains(name) && (value == nil || Self.valued[name] == nil) || name.hasPrefix("x-") || name == "comment" {
                // `defaults` alone is fstab's placeholder; `defaults=FILE` is the option above.
                continue
            } else {
                throw CommandFailure("unknown mount option '\(option)'\(Self.valued[name] != nil ? ": it needs a value" : "")")
            }
        }
    }

    /// `kvsfs mount`'s arguments with each `-o LIST` (or `-oLIST`) replaced by the long options
    /// it stands for, before they are parsed; everything else, `-f` included, is left as it
    /// is: the value of a long option (a path may begin with -o) and all after `--`.
    /// `foreground` is taken and means nothing more: `kvsfs mount` always serves in the
    /// foreground.
    static func expanding(_ arguments: [String]) throws -> [String] {
        let takingValues = Swift.Set(valued.values).union(["--store"])
        var expanded = [String]()
        // Where `--read-only` stands in `expanded`, given or from an `ro`: a later `rw` takes
        // it out again, as mount(8) lets the last of the two win.
        var readOnlyAt: [Int] = []
        func take(_ list: String) throws {
            let options = try MountOptions(options: list)
            if options.access != nil {
                for index in readOnlyAt.reversed() { expanded.remove(at: index) }
                readOnlyAt = []
            }
            if options.access == .readOnly { readOnlyAt.append(expanded.count) }
            expanded += options.arguments
        }
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            if argument == "--" {
                return expanded + [argument] + remaining
            } else if takingValues.contains(argument) {
                expanded.append(argument)
                if let value = remaining.popFirst() { expanded.append(value) }
            } else if argument == "-o" {
                guard let list = remaining.popFirst() else { throw CommandFailure("-o needs mount options, e.g. -o ro,quota_keys=3") }
                try take(list)
            } else if argument.hasPrefix("-o"), argument.count > 2 {
                // getopt's attached form, as in -oro,quota_keys=3: no kvsfs mount option begins with -o.
                try take(String(argument.dropFirst(2)))
            } else {
                if argument == flags["ro"] { readOnlyAt.append(expanded.count) }
                expanded.append(argument)
            }
        }
        return expanded
    }

    /// The table as `--help` shows it: each `-o` option beside the `kvsfs mount` option it
    /// stands for.
    static var spellings: String {
        let rows = flags.map { ($0.key, $0.value) } + valued.map { ("\($0.key)=VALUE", "\($0.value) VALUE") }
            + [("foreground", "(kvsfs mount always serves in the foreground)")]
        let width = rows.map(\.0.count).max() ?? 0
        let lines = rows.sorted { $0.0 < $1.0 }.map { $0.0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.1 }
        return """
            kvsfs mount MOUNTPOINT -o OPTIONS and the mount(8) form kvsfs STORE MOUNTPOINT -o OPTIONS take the same \
            options, comma-separated, each standing for a kvsfs mount option; rw undoes an earlier ro (the last of the \
            two wins, as in mount(8), --read-only too); mount(8)'s generic options (nosuid, _netdev, x-*, ...) are \
            accepted and ignored, anything else is refused:

            \(lines.joined(separator: "\n"))

            kvsfs mount serves in the foreground (-f is accepted and changes nothing); the mount(8) form serves in \
            the background once the mount answers, unless -f or foreground is given. See MOUNT(8) AND FSTAB in kvsfs(1).
            """
    }
}
