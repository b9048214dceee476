import Dispatch
import FoundationEssentials
import FuseKit
import Glibc
import KVStore
import Synchronization

/// The one door for every change the kernel did not make: remote changes (`apply`), an
/// import, a settled conflict or a reload of registered defaults (`show`). The store takes
/// each change once; then
/// each key whose value changed is shown through the mount's own path, from a process of its
/// own (`ApplierProcess`), as a program would: its file written (open with O_TRUNC, write,
/// close) or unlinked. So the kernel raises IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE and
/// IN_DELETE for them as for any writer, on this mount as on every other, and drops what it
/// cached of the old value.
///
/// While a key's file is written, `shownChange(for:)` names the change for the requests of
/// the applier's process (FUSE gives each request the kernel id of the calling thread, which
/// for that single-threaded process is its pid): the file system takes the write as showing
/// that change, which the store already holds, writes nothing to the store, and skips the
/// local quota checks and the read-only rule.
///
/// Invariant: one queue shows, one change at a time, through one process, so a process id and
/// the change in flight are all it takes to recognise the applier's requests. No thread of
/// the daemon ever waits on its own mount: a daemon killed in the middle ends at once.
///
/// A change the mount cannot show as a file operation (a key hidden by an editor's save in
/// progress, say) is in the store all the same, without an inotify event.
public final class MountApplier: ExternalChangeApplying, ChangeShowing, @unchecked Sendable {
    private let mountpoint: String
    private let store: KeyValueStore
    private let command: ApplierProcess.Command
    /// Where batches are shown, one at a time, in order.
    private let queue = DispatchQueue(label: "kvsfs-applier")
    private let applying = ChangeInFlight()
    /// The process that writes through the mount, started at the first batch and again after
    /// it ended; used on `queue` only.
    private var process: ApplierProcess?
    /// The mount this applier shows changes in, once it is made (`mounted()`): until then, and
    /// on any other mount that shows at the mountpoint, nothing is written.
    private let mount = Mutex<MountTable.Mount?>(nil)

    /// The process that shows changes is `executable` run with `arguments`, the mountpoint
    /// appended (`ApplierProcess.serve`).
    public init(mountpoint: String, store: KeyValueStore,
                executable: String = "/proc/self/exe", arguments: [String] = [ApplierProcess.commandName]) {
        self.mountpoint = mountpoint
        self.store = store
        self.command = ApplierProcess.Command(executable: executable, arguments: arguments)
    }

    /// Pins the mount made on the mountpoint just now as the one to show changes in. Called
    /// once the mount exists, before anything is shown.
    public func mounted() {
        let made = MountTable.top(at: mountpoint)
        mount.withLock { $0 = made }
    }

    /// The change the request of `context` is showing, and whether its key had no value
    /// before; nil when the request is not the applier's or it is between changes.
    public func shownChange(for context: RequestContext) -> ShownChange? {
        applying.change(ofThread: context.threadID)
    }

    /// Takes a batch of remote changes into the store in one transaction, then shows each key
    /// whose value changed. A store failure is thrown before anything is shown.
    public func apply(_ changes: [StampedChange], mode: ExternalApplyMode) async throws -> [String] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try self.applyNow(changes, mode: mode) }) }
        }
    }

    /// Shows changes the mount already holds but the kernel did not make: ones the store took
    /// (an import, a settled conflict: each key's latest change) or what a file without a
    /// value shows (a registered default, `ShownChange.showsDefault`). `newKeys` had no file
    /// before (theirs are created); the others' are written or unlinked. Returns, once done, the
    /// keys it could not show (the mount unmounted, no process, a step refused), for the caller
    /// to tell the kernel some other way. Never call it while holding the namespace lock: the
    /// mount serves the writes it makes.
    public func show(_ changes: [StampedChange], newKeys: Swift.Set<String>) -> Swift.Set<String> {
        queue.sync {
            guard begin() else { return Swift.Set(changes.map(\.key)) }
            defer { end() }
            var unshown = Swift.Set<String>()
            for change in changes.sorted(by: { $0.key < $1.key }) where !showNow(change, keyIsNew: newKeys.contains(change.key)) {
                unshown.insert(change.key)
            }
            return unshown
        }
    }

    /// Ends the applier's process; a later batch starts another.
    public func stop() {
        queue.async { [self] in
            process?.stop()
            process = nil
        }
    }

    private func applyNow(_ changes: [StampedChange], mode: ExternalApplyMode) throws -> [String] {
        let taken = mode == .merge ? changes.filter(store.accepts) : changes
        guard !taken.isEmpty else { return [] }
        // The root is opened before the store takes the batch: the keys the store held until
        // now are what the mount knows of, and each change is shown against that.
        let shown = begin()
        defer { if shown { end() } }
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
            _ = showNow(change, keyIsNew: before[key] == .some(nil))
        }
        return changed
    }

    /// Opens the pinned mount's root in the process; false when it cannot be shown in.
    private func begin() -> Bool {
        guard let mount = mount.withLock({ $0 }) else { return false }
        return perform(.begin(mount: mount)) == 0
    }

    /// Closes the root, if a process still holds it: one gone mid-batch is not started again
    /// just for this.
    private func end() {
        guard let process else { return }
        do {
            _ = try process.perform(.end)
        } catch {
            process.stop()
            self.process = nil
        }
    }

    /// Has the process write or unlink the key's file while `change` is named as the one in
    /// flight; whether it was shown. A key that had no value and has none now has no file to
    /// show. A step the mount refused (its errno) is not shown: the caller tells the kernel
    /// otherwise.
    private func showNow(_ change: StampedChange, keyIsNew: Bool) -> Bool {
        let name = KeyFileName.fileName(forKey: change.key)
        let step: ApplierProcess.Step
        if let value = change.value {
            step = .write(name: name, bytes: Array(value))
        } else if !keyIsNew {
            step = .unlink(name: name)
        } else {
            return true
        }
        guard let process else { return false }
        applying.begin(ShownChange(change: change, keyIsNew: keyIsNew), process: process.pid)
        defer { applying.end() }
        do {
            return try process.perform(step) == 0
        } catch {
            // Gone mid-batch: the rest of the batch is in the store, not shown.
            process.stop()
            self.process = nil
            return false
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

/// What the file system asks of whoever shows changes it did not make (`MountApplier`).
public protocol ChangeShowing: Sendable {
    /// The change the request of `context` shows; nil for every request but the applier's.
    func shownChange(for context: RequestContext) -> ShownChange?
    /// Shows changes the mount holds but the kernel did not make (the store's, or a registered
    /// default's); returns the keys it could not show.
    func show(_ changes: [StampedChange], newKeys: Swift.Set<String>) -> Swift.Set<String>
}

/// A change the applier is showing through the mount, which the mount already holds: one the
/// store holds, or what a file without a value shows (a registered default, stamped with
/// `ShownChange.unstamped`, or its removal).
public struct ShownChange: Sendable, Equatable {
    /// The stamp of a shown change the store does not hold: no device's.
    public static let unstamped = ChangeStamp(time: 0, counter: 0, device: "")

    /// Whether it shows what a file without a value shows (a registered default), decided when
    /// it was shown and checked again by the step: a value written since wins.
    public var showsDefault: Bool { change.stamp == Self.unstamped }

    public let change: StampedChange
    /// Whether the key had no value before the change: the store takes the change before it
    /// is shown, and the kernel raises IN_CREATE only for a file it creates, so the applier's
    /// look-up of such a key must find nothing.
    public let keyIsNew: Bool

    public init(change: StampedChange, keyIsNew: Bool) {
        self.change = change
        self.keyIsNew = keyIsNew
    }
}

/// The change the applier's process is showing, if any, and that process's id.
private final class ChangeInFlight: Sendable {
    private enum InFlight {
        case idle
        case showing(ShownChange, by: pid_t)
    }

    private let state = Mutex(InFlight.idle)

    func begin(_ shown: ShownChange, process: pid_t) {
        state.withLock { $0 = .showing(shown, by: process) }
    }

    func end() {
        state.withLock { $0 = .idle }
    }

    func change(ofThread thread: Int32) -> ShownChange? {
        state.withLock { state in
            guard case .showing(let shown, let process) = state, process == thread else { return nil }
            return shown
        }
    }
}
