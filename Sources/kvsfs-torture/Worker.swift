import Synchronization

/// Set just before the daemon is sent SIGKILL: a call that fails after it is the kill's doing.
final class KillSwitch: Sendable {
    private let killed = Atomic<Bool>(false)
    var isSet: Bool { killed.load(ordering: .acquiring) }
    func set() { killed.store(true, ordering: .releasing) }
}

/// A step whose outcome is unknown: the one a thread had started when the daemon died.
struct InFlight {
    let operation: String
    /// What each key the step touches holds once it has happened (nil: no such key). Empty for
    /// a step that changes only the mount's memory (an editor's scratch file).
    let after: [String: [UInt8]?]
}

/// One thread's part of the workload, on key names no other thread uses.
///
/// Operations are made of steps (system calls that succeed or fail together); the model
/// takes a step's change only once every call of it returned success, so it holds exactly
/// what was acknowledged, and `inFlight` the step that had not yet been.
final class Worker: @unchecked Sendable {
    let thread: Int
    let cycle: Int
    private let mountpoint: String
    private let killSwitch: KillSwitch
    /// The key names this thread uses: some plain, some with a space and a non-ASCII letter.
    private let names: [String]
    /// Key file name → the bytes it reads back as, for this thread's names.
    private(set) var model: [String: [UInt8]]
    private(set) var inFlight: InFlight?
    /// Steps that changed the store and returned success.
    private(set) var acknowledged = 0
    /// Whole operations (a write, a rename, an unlink, an editor's save) that returned success.
    private(set) var operations = 0
    /// A call that failed while the daemon was alive: the workload expects none.
    private(set) var unexpected: (operation: String, failure: CallFailure)?
    /// The call that failed once the daemon had been killed.
    private(set) var endedBy: CallFailure?
    private var generator: SplitMix
    private var sequence = 0

    init(thread: Int, cycle: Int, mountpoint: String, model: [String: [UInt8]], seed: UInt64, killSwitch: KillSwitch) {
        self.thread = thread
        self.cycle = cycle
        self.mountpoint = mountpoint
        self.model = model
        self.killSwitch = killSwitch
        generator = SplitMix(seed: seed)
        names = (0..<8).map { "t\(thread)-k\($0)" } + (8..<10).map { "t\(thread) é\($0)" }
    }

    /// Whether `name` is one of thread `thread`'s key names.
    static func owns(_ thread: Int, _ name: String) -> Bool {
        name.hasPrefix("t\(thread)-") || name.hasPrefix("t\(thread) ")
    }

    /// Runs operations until one fails (the daemon died) or the deadline passes.
    func run(until deadline: ContinuousClock.Instant) {
        for _ in 0..<1_000_000 where ContinuousClock.now < deadline {
            guard operate() else { return }
            operations += 1
        }
    }

    /// One operation, chosen at random; false when a step of it failed.
    private func operate() -> Bool {
        let existing = names.filter { model[$0] != nil }
        guard let source = existing.randomElement(using: &generator) else { return write(pick()) }
        switch Int.random(in: 0..<100, using: &generator) {
        case 0..<30: return write(pick())
        case 30..<45: return rename(source, to: pick(other: source))
        case 45..<52: return unlink(source)
        case 52..<57: return unlinkThroughBackup(source)
        case 87..<100: return backupSave(source)
        default:
            let key = pick()
            let scratch = [".\(key).swp", "\(key)~", sedScratchName()].randomElement(using: &generator)!
            return editorSave(key, scratch: scratch)
        }
    }

    /// Any of this thread's names, or any but `other`.
    private func pick(other: String? = nil) -> String {
        names.filter { $0 != other }.randomElement(using: &generator)!
    }

    /// A new value: mostly small, some of a few kilobytes.
    private func nextValue() -> (tag: String, bytes: [UInt8]) {
        sequence += 1
        let tag = "c\(cycle).t\(thread).\(sequence)"
        let size = switch Int.random(in: 0..<100, using: &generator) {
        case 0..<60: Int.random(in: 200..<400, using: &generator)
        case 60..<85: Int.random(in: 400..<1_500, using: &generator)
        default: Int.random(in: 2_000..<6_000, using: &generator)
        }
        return (tag, Value.make(tag: tag, size: size))
    }

    /// How many bytes each write() of a value carries.
    private func nextChunk() -> Int { [512, 4096, 1 << 20].randomElement(using: &generator)! }

    /// `sed -i`'s temporary file name: `sed` and six letters or digits.
    private func sedScratchName() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return "sedt\(thread)" + String((0..<4).map { _ in letters.randomElement(using: &generator)! })
    }

    private func path(_ name: String) -> String { mountpoint + "/" + name }

    /// Runs one step: `change` goes into the model once `calls` all returned success.
    private func step(_ operation: String, _ change: [String: [UInt8]?], _ calls: () -> CallFailure?) -> Bool {
        inFlight = InFlight(operation: operation, after: change)
        if let failure = calls() {
            if killSwitch.isSet { endedBy = failure } else { unexpected = (operation, failure) }
            return false
        }
        for (key, value) in change { model[key] = value }
        if !change.isEmpty { acknowledged += 1 }
        inFlight = nil
        return true
    }

    /// open(O_TRUNC), write, close.
    private func write(_ key: String) -> Bool {
        let (tag, value) = nextValue()
        let chunk = nextChunk()
        return step("write \(key) = \(tag)", [key: value]) { MountCalls.write(value, to: path(key), chunk: chunk) }
    }

    /// A key renamed onto another key, or onto a name no key has.
    private func rename(_ source: String, to target: String) -> Bool {
        step("rename \(source) -> \(target)", [source: .none, target: model[source]]) {
            MountCalls.rename(path(source), to: path(target))
        }
    }

    private func unlink(_ key: String) -> Bool {
        step("unlink \(key)", [key: .none]) { MountCalls.unlink(path(key)) }
    }

    /// The key renamed to its backup name, which is then removed: the key goes with it.
    private func unlinkThroughBackup(_ key: String) -> Bool {
        step("rename \(key) -> \(key)~", [:]) { MountCalls.rename(path(key), to: path(key + "~")) }
            && step("unlink \(key)~ (deletes \(key))", [key: .none]) { MountCalls.unlink(path(key + "~")) }
    }

    /// The new value written to a scratch file (in the mount's memory only), then renamed over
    /// the key, as `sed -i` and many editors save.
    private func editorSave(_ key: String, scratch: String) -> Bool {
        let (tag, value) = nextValue()
        let chunk = nextChunk()
        return step("write \(scratch) = \(tag)", [:]) { MountCalls.write(value, to: path(scratch), chunk: chunk) }
            && step("rename \(scratch) -> \(key) (= \(tag))", [key: value]) { MountCalls.rename(path(scratch), to: path(key)) }
    }

    /// vim's save with a backup: the key renamed to `key~` (it stays in the store, hidden), the
    /// new value written to the key's name, the backup removed (which must not delete the key).
    private func backupSave(_ key: String) -> Bool {
        let (tag, value) = nextValue()
        let chunk = nextChunk()
        return step("rename \(key) -> \(key)~", [:]) { MountCalls.rename(path(key), to: path(key + "~")) }
            && step("write \(key) = \(tag) (backup \(key)~ held)", [key: value]) { MountCalls.write(value, to: path(key), chunk: chunk) }
            && step("unlink \(key)~ (after saving \(key))", [:]) { MountCalls.unlink(path(key + "~")) }
    }
}
