import Foundation
import KVStore
import Synchronization

/// Takes remote changes into the local store. Returns the keys whose value changed; throws
/// when a change could not be taken in, so that the caller fetches and applies it again.
public protocol ExternalChangeApplying: Sendable {
    func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String]
}

/// Applies straight to the store: for a store that is not mounted (and in tests).
public struct StoreApplier: ExternalChangeApplying {
    let store: KeyValueStore

    public init(store: KeyValueStore) {
        self.store = store
    }

    public func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        try store.applyExternal(changes, mode: mode)
    }
}

/// Applies remote changes through the mount's own path, from a thread of its own, so that the
/// kernel raises IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE and IN_DELETE for them as for any
/// writer. While a change's file is written, `changeBeingApplied(byThread:)` names it for the
/// requests of that thread (FUSE gives each request the kernel id of the calling thread): the
/// file system commits that write as the remote change itself (with its stamp, not uploaded
/// again) and skips the local quota checks.
///
/// Invariant: one thread applies, one change at a time, so a thread id and the change in
/// flight are all it takes to recognise the applier's requests.
///
/// A change the mount cannot show as a file operation (a key hidden by an editor's save in
/// progress, say) goes straight to the store, without an inotify event.
public final class MountApplier: ExternalChangeApplying, @unchecked Sendable {
    private let mountpoint: String
    private let fileName: @Sendable (String) -> String
    private let store: KeyValueStore
    private let jobs = JobQueue()
    private let applying = ChangeInFlight()
    /// The mount's root while a batch is applied (-1 otherwise). Files are reached relative to
    /// it; it is not held between batches, which would make `fusermount3 -u` fail with EBUSY.
    private var root: Int32 = -1

    /// `fileName` maps a key to its file name in the mount.
    public init(mountpoint: String, fileName: @escaping @Sendable (String) -> String, store: KeyValueStore) {
        self.mountpoint = mountpoint
        self.fileName = fileName
        self.store = store
        let thread = Thread { [jobs, applying] in
            applying.startedOn(thread: currentThreadID())
            jobs.serve()
        }
        thread.name = "kvsfs-applier"
        thread.start()
    }

    /// The change the thread `thread` is writing through the mount, and how it is to be taken
    /// in; nil when `thread` is not the applier's or it is between changes.
    public func changeBeingApplied(byThread thread: Int32) -> (change: StampedChange, mode: ExternalApplyMode)? {
        applying.change(ofThread: thread)
    }

    public func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        try await withCheckedThrowingContinuation { continuation in
            jobs.enqueue { continuation.resume(with: Result { try self.applyNow(changes, mode: mode) }) }
        }
    }

    /// Applies every change it can; the first store failure is thrown after the rest were
    /// tried (each applied change is in the store, and applying one again changes nothing).
    private func applyNow(_ changes: [StampedChange], mode: ExternalApplyMode) throws -> [String] {
        root = openMountRoot()
        defer {
            if root >= 0 { close(root) }
            root = -1
        }
        var changed = [String]()
        var failure: StoreError?
        for change in changes {
            if mode == .merge, !store.accepts(change) { continue }
            let before = store.entry(forKey: change.key)?.xml
            applying.begin(change, mode: mode)
            let name = fileName(change.key)
            if root >= 0, let value = change.value {
                writeFile(name, Array(value))
            } else if root >= 0, before != nil {
                unlinkat(root, name, 0)
            }
            applying.end()
            if store.allChanges(forKey: change.key)?.stamp != change.stamp {
                do {
                    try store.applyExternal([change], mode: mode)
                } catch {
                    failure = failure ?? error
                }
            }
            if store.entry(forKey: change.key)?.xml != before { changed.append(change.key) }
        }
        if let failure { throw failure }
        return changed
    }

    /// Opens the mount's root, or returns -1 when `mountpoint` is no longer a mount's root
    /// (after an unmount): nothing is ever written to the directory underneath.
    private func openMountRoot() -> Int32 {
        let descriptor = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return -1 }
        var info = stat()
        var parent = stat()
        // A FUSE mount's root is inode 1, on another device than the directory above it.
        guard fstat(descriptor, &info) == 0, info.st_ino == 1,
              fstatat(descriptor, "..", &parent, 0) == 0, parent.st_dev != info.st_dev else {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    private func writeFile(_ name: String, _ bytes: [UInt8]) {
        let descriptor = openat(root, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { return }
        var written = 0
        bytes.withUnsafeBytes { buffer in
            while written < buffer.count {
                let count = write(descriptor, buffer.baseAddress! + written, buffer.count - written)
                if count <= 0 { break }
                written += count
            }
        }
        close(descriptor)
    }
}

/// The applying thread's kernel id (0 until it has started), and the change it is writing.
private final class ChangeInFlight: Sendable {
    private let state = Mutex<(thread: Int32, change: StampedChange?, mode: ExternalApplyMode)>((0, nil, .merge))

    func startedOn(thread: Int32) {
        state.withLock { $0.thread = thread }
    }

    func begin(_ change: StampedChange, mode: ExternalApplyMode) {
        state.withLock {
            $0.change = change
            $0.mode = mode
        }
    }

    func end() {
        state.withLock { $0.change = nil }
    }

    func change(ofThread thread: Int32) -> (change: StampedChange, mode: ExternalApplyMode)? {
        state.withLock { state in
            guard state.thread != 0, state.thread == thread, let change = state.change else { return nil }
            return (change, state.mode)
        }
    }
}

/// Work for one thread, in order.
private final class JobQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []

    func enqueue(_ job: @escaping () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    func serve() -> Never {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}

/// The kernel's id of the calling thread (what FUSE reports as a request's pid), read from
/// /proc/thread-self, which links to "PID/task/TID".
func currentThreadID() -> Int32 {
    var buffer = [CChar](repeating: 0, count: 64)
    let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard length > 0 else { return getpid() }
    let link = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return link.split(separator: "/").last.flatMap { Int32($0) } ?? getpid()
}
