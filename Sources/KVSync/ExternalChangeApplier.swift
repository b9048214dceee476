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
/// through the mount's own path, from a process of its own (`ApplierProcess`), so that the
/// kernel raises IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE and IN_DELETE for them as for any
/// writer. A crash leaves all of a batch in the store or none of it; a reader of the mount may
/// see some keys of the batch with their new values before the others' files are shown.
///
/// While a change's file is written, `changeBeingApplied(byThread:)` names it for the
/// requests of the applier's process (FUSE gives each request the kernel id of the calling
/// thread, which for that single-threaded process is its pid): the file system takes that
/// write as the remote change itself, which the store already holds, and skips the local
/// quota checks. The change is named with the merge rule, so that taking it in again changes
/// nothing, and with whether its key is new, so that the file is created.
///
/// Invariant: one thread of the daemon applies, one change at a time, through one process,
/// so a process id and the change in flight are all it takes to recognise the applier's
/// requests. No thread of the daemon ever waits on its own mount.
///
/// A change the mount cannot show as a file operation (a key hidden by an editor's save in
/// progress, say) is in the store all the same, without an inotify event.
public final class MountApplier: ExternalChangeApplying, @unchecked Sendable {
    private let mountpoint: String
    private let fileName: @Sendable (String) -> String
    private let store: KeyValueStore
    private let command: ApplierProcess.Command
    private let jobs = JobQueue()
    private let applying = ChangeInFlight()
    /// The process that writes through the mount, started at the first batch and again after
    /// it ended; used from the applying thread only.
    private var process: ApplierProcess?

    /// `fileName` maps a key to its file name in the mount; the process that shows changes is
    /// `executable` run with `arguments`, the mountpoint appended (`ApplierProcess.serve`).
    public init(mountpoint: String, fileName: @escaping @Sendable (String) -> String, store: KeyValueStore,
                executable: String = "/proc/self/exe", arguments: [String] = [ApplierProcess.commandName]) {
        self.mountpoint = mountpoint
        self.fileName = fileName
        self.store = store
        self.command = ApplierProcess.Command(executable: executable, arguments: arguments)
        let thread = Thread { [jobs] in jobs.serve() }
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

    /// Ends the applier's process; a later batch starts another.
    public func stop() {
        jobs.enqueue { [self] in
            process?.stop()
            process = nil
        }
    }

    /// Takes `changes` into the store in one transaction, then shows each key whose value
    /// changed through the mount. A store failure is thrown before anything is shown.
    private func applyNow(_ changes: [StampedChange], mode: ExternalApplyMode) throws -> [String] {
        let taken = mode == .merge ? changes.filter(store.accepts) : changes
        guard !taken.isEmpty else { return [] }
        // The root is opened first: opening lists the directory, which gives the keys in the
        // store nodes.
        let shown = perform(.begin) == 0
        defer { if shown { _ = perform(.end) } }
        var before = [String: [UInt8]?]()
        for change in taken where before[change.key] == nil { before[change.key] = .some(store.entry(forKey: change.key)?.xml) }
        try store.applyExternal(taken, mode: mode)
        let changed = before.filter { key, old in store.entry(forKey: key)?.xml != old }.map(\.key)
        guard shown else { return changed }
        var takenStamps = [String: Swift.Set<ChangeStamp>]()
        for change in taken { takenStamps[change.key, default: []].insert(change.stamp) }
        for key in changed.sorted() {
            // The change the store holds now: the batch's latest for the key, unless a local
            // write came since, which the mount has shown already.
            guard let change = store.allChanges(forKey: key), takenStamps[key]?.contains(change.stamp) == true else { continue }
            let keyIsNew = before[key] == .some(nil)
            let name = fileName(key)
            if let value = change.value {
                show(change, keyIsNew: keyIsNew, by: .write(name: name, bytes: Array(value)))
            } else if !keyIsNew {
                show(change, keyIsNew: keyIsNew, by: .unlink(name: name))
            }
        }
        return changed
    }

    /// Has the process take `step` while `change` is named as the one in flight.
    private func show(_ change: StampedChange, keyIsNew: Bool, by step: ApplierProcess.Step) {
        guard let process else { return }
        applying.begin(change, mode: .merge, keyIsNew: keyIsNew, process: process.pid)
        defer { applying.end() }
        do {
            _ = try process.perform(step)
        } catch {
            // Gone mid-batch: the rest of the batch is in the store without its events.
            process.stop()
            self.process = nil
        }
    }

    /// Has the process take `step`, starting one if there is none; its errno, or ENOENT when
    /// no process could take it.
    private func perform(_ step: ApplierProcess.Step) -> Int32 {
        for _ in 0..<2 {
            do {
                if process == nil { process = try ApplierProcess.spawn(command, mountpoint: mountpoint) }
                return try process!.perform(step)
            } catch {
                process?.stop()
                process = nil
            }
        }
        return ENOENT
    }
}

/// The change the applier's process is writing, and that process's id.
private final class ChangeInFlight: Sendable {
    private struct InFlight {
        var thread: Int32 = 0
        var change: StampedChange?
        var mode = ExternalApplyMode.merge
        var keyIsNew = false
    }

    private let state = Mutex(InFlight())

    func begin(_ change: StampedChange, mode: ExternalApplyMode, keyIsNew: Bool, process: pid_t) {
        state.withLock {
            $0.thread = process
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
