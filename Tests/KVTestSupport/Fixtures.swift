import Foundation
import FuseKit
import KVSFS
import KVStore
import Logging

/// A fresh directory under /tmp, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "kvsfs-test") {
        var template = Array("/tmp/\(label)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public func subdirectory(_ name: String) -> String {
        let sub = (path as NSString).appendingPathComponent(name)
        try? FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        // Whatever the umask: a data directory that group or others may write is refused.
        _ = chmod(sub, 0o755)
        return sub
    }

    /// A new directory `name` inside, mode 0700 whatever the umask: for a daemon's mountpoint
    /// and data directory.
    public func privateSubdirectory(_ name: String) throws -> String {
        let sub = (path as NSString).appendingPathComponent(name)
        guard mkdir(sub, 0o700) == 0, chmod(sub, 0o700) == 0 else {
            throw DaemonError(description: "cannot create \(sub): \(String(cString: strerror(errno)))")
        }
        return sub
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Runs `body` with a fresh temporary directory, removed afterwards whatever happens.
public func withTemporaryDirectory<T>(_ body: (TemporaryDirectory) throws -> T) rethrows -> T {
    let directory = TemporaryDirectory()
    defer { directory.remove() }
    return try body(directory)
}

/// Runs async `body` with a fresh temporary directory, removed afterwards whatever happens.
public func withTemporaryDirectory<T>(_ body: (TemporaryDirectory) async throws -> T) async rethrows -> T {
    let directory = TemporaryDirectory()
    defer { directory.remove() }
    return try await body(directory)
}

/// A store in a temporary directory.
public func makeStore(in directory: TemporaryDirectory, limits: QuotaLimits? = nil) throws -> KeyValueStore {
    try KeyValueStore(path: (directory.path as NSString).appendingPathComponent("test.sqlite"), limits: limits)
}

/// A kvsfs file system mounted in this process, on a thread of its own.
public final class InProcessMount: @unchecked Sendable {
    public let mountpoint: String
    public let store: KeyValueStore
    private let mount: FuseMount
    private let finished = DispatchSemaphore(value: 0)

    public init(store: KeyValueStore, mountpoint: String, configuration: MountConfiguration = MountConfiguration(),
                sync: (any MountSynchronizer)? = nil, applier: (any ChangeShowing)? = nil) throws {
        self.mountpoint = mountpoint
        self.store = store
        let fileSystem = KeyValueFileSystem(store: store, configuration: configuration, sync: sync, applier: applier, logger: .silent)
        mount = try FuseMount(fileSystem: fileSystem, mountpoint: mountpoint, options: ["fsname=kvsfs:test", "subtype=kvsfs"])
        let thread = Thread { [mount, finished] in
            mount.run()
            finished.signal()
        }
        thread.start()
    }

    /// Unmounts and waits for the session to end.
    public func unmount() {
        mount.unmount()
        finished.wait()
    }

    public func path(_ name: String) -> String { (mountpoint as NSString).appendingPathComponent(name) }
}

/// Mounts a fresh store, runs `body`, and unmounts and removes everything whatever happens.
public func withMountedStore<T>(limits: QuotaLimits? = nil, configuration: MountConfiguration = MountConfiguration(),
                                _ body: (InProcessMount) throws -> T) throws -> T {
    let directory = TemporaryDirectory("kvsfs-mount")
    defer { directory.remove() }
    let store = try makeStore(in: directory, limits: limits)
    let mount = try InProcessMount(store: store, mountpoint: directory.subdirectory("mnt"), configuration: configuration)
    defer { mount.unmount() }
    return try body(mount)
}
