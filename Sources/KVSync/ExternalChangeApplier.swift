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

/// Takes a batch of remote changes into the store as one transaction, then shows each change
/// through the mount's own path, from a thread of its own, so that the kernel raises
/// IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE and IN_DELETE for them as for any writer. A crash
/// leaves all of a batch in the store or none of it; a reader of the mount may see some keys
/// of the batch with their new values before the others' files are shown.
///
/// While a change's file is written, `changeBeingApplied(byThread:)` names it for the
/// requests of that thread (FUSE gives each request the kernel id of the calling thread): the
/// file system takes that write as the remote change itself, which the store already holds,
/// and skips the local quota checks. The change is named with the merge rule, so that taking
/// it in again changes nothing, and with whether its key is new, so that the file is created.
///
/// Invariant: one thread applies, one change at a time, so a thread id and the change in
/// flight are all it takes to recognise the applier's requests.
///
/// A change the mount cannot show as a file operation (a key hidden by an editor's save in
/// progress, say) is in the store all the same, without an inotify event.
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

    /// The change the thread `thread` is writing through the mount, how it is to be taken in,
    /// and whether its key had no value before; nil when `thread` is not the applier's or it
    /// is between changes.
    public func changeBeingApplied(byThread thread: Int32) -> (change: StampedChange, mode: ExternalApplyMode, keyIsNew: Bool)? {
        applying.change(ofThread: thread)
    }

    public func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        try await withCheckedThrowingContinuation { continuation in
            jobs.enqueue { continuation.resume(with: Result { try self.applyNow(changes, mode: mode) }) }
        }
    }

    /// Takes `changes` into the store in one transaction, then shows each key whose value
    /// changed through the mount. A store failure is thrown before anything is shown.
    private func applyNow(_ changes: [StampedChange], mode: ExternalApplyMode) throws -> [String] {
        let taken = mode == .merge ? changes.filter(store.accepts) : changes
        guard !taken.isEmpty else { return [] }
        // Opened first: opening lists the directory, which gives the keys in the store nodes.
        root = openMountRoot()
        defer {
            if root >= 0 { close(root) }
            root = -1
        }
        var before = [String: [UInt8]?]()
        for change in taken where before[change.key] == nil { before[change.key] = .some(store.entry(forKey: change.key)?.xml) }
        try store.applyExternal(taken, mode: mode)
        let changed = before.filter { key, old in store.entry(forKey: key)?.xml != old }.map(\.key)
        guard root >= 0 else { return changed }
        var takenStamps = [String: Swift.Set<ChangeStamp>]()
        for change in taken { takenStamps[change.key, default: []].insert(change.stamp) }
        for key in changed.sorted() {
            // The change the store holds now: the batch's latest for the key, unless a local
            // write came since, which the mount has shown already.
            guard let change = store.allChanges(forKey: key), takenStamps[key]?.contains(change.stamp) == true else { continue }
            let keyIsNew = before[key] == .some(nil)
            applying.begin(change, mode: .merge, keyIsNew: keyIsNew)
            let name = fileName(key)
            if let value = change.value {
                writeFile(name, Array(value))
            } else if !keyIsNew {
                unlinkat(root, name, 0)
            }
            applying.end()
        }
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
    private struct InFlight {
        var thread: Int32 = 0
        var change: StampedChange?
        var mode = ExternalApplyMode.merge
        var keyIsNew = false
    }

    private let state = Mutex(InFlight())

    func startedOn(thread: Int32) {
        state.withLock { $0.thread = thread }
    }

    func begin(_ change: StampedChange, mode: ExternalApplyMode, keyIsNew: Bool) {
        state.withLock {
            $0.change = change
            $0.mode = mode
            $0.keyIsNew = keyIsNew
        }
    }

    func end() {
        state.withLock { $0.change = nil }
    }

    func change(ofThread thread: Int32) -> (change: StampedChange, mode: ExternalApplyMode, keyIsNew: Bool)? {
        state.withLock { state in
            guard state.thread != 0, state.thread == thread, let change = state.change else { return nil }
            return (change, state.mode, state.keyIsNew)
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
