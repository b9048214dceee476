import FuseKit
import Glibc

/// A modification time set with utimensat (`touch -d`, `rsync -a`, `cp -a`, `tar`), kept to
/// the nanosecond while the content it was set on stands. Nothing of it is stored or synced:
/// it lives in the mount's memory and is gone at unmount, when files show again when their
/// value last changed.
///
/// Invariant: a set time is shown only for the content it was set on. A key's is tied to the
/// value's canonical bytes, so any change of the value, through whatever door (a write here, a
/// remote change, an import), ends it without being told. One set while a writer holds bytes
/// not yet committed (`cp -a` sets it before close) belongs to those bytes: their commit ties
/// it to the value they make; a write after it, a refused commit or a release without a commit
/// ends it.
struct SetTime {
    enum Standing {
        /// Set on a key's value: shown while the key holds these bytes (compared by identity
        /// first, as the value's buffer is shared).
        case value([UInt8])
        /// Set on bytes not in the store: a writer's not yet committed, or a file held only in
        /// memory (a scratch file, a placeholder).
        case uncommitted
    }

    let time: TimeStamp
    var standing: Standing
}

extension Node {
    /// The set time to show for a key holding `xml` (nil when the value is gone): cheap when the
    /// value is the one it was set on (one identity comparison). A value equal in bytes but
    /// another buffer (a move, a remote change of the same value) keeps the time, and is
    /// remembered so that the next comparison is by identity again; any other value drops it.
    func shownSetTime(holding xml: [UInt8]?) -> TimeStamp? {
        guard let set = setTime else { return nil }
        guard case .value(let anchor) = set.standing else { return set.time }
        guard let xml, anchor == xml else {
            setTime = nil
            return nil
        }
        setTime = SetTime(time: set.time, standing: .value(xml))
        return set.time
    }

    /// A write or truncation changed a handle's bytes: a time set on uncommitted bytes before it
    /// no longer holds. One set on a key's value holds until the value changes (writing an equal
    /// value changes nothing).
    func contentChanged() {
        if case .uncommitted = setTime?.standing { setTime = nil }
    }
}

extension KeyValueFileSystem {
    /// A SETATTR's modification time: kept for keys, placeholders and scratch files; a file
    /// showing a registered default shows when it was registered, and a removed one nothing.
    func setModificationTime(_ change: AttributeChanges.TimeChange, of node: Node, in ns: Namespace) {
        let time = timeStamp(of: change)
        switch node.kind {
        case .key(let key):
            let pending = ns.handles.values.contains { $0.node === node && $0.state.holdsUncommittedBytes }
            if !pending, let entry = store.entry(forKey: key) {
                node.setTime = SetTime(time: time, standing: .value(entry.xml))
            } else {
                node.setTime = SetTime(time: time, standing: .uncommitted)
            }
        case .placeholder, .editorFile:
            node.setTime = SetTime(time: time, standing: .uncommitted)
        case .registeredDefault, .removed:
            break
        }
    }

    /// A commit of a node's bytes succeeded: a time set on them belongs to the value they made.
    func committedSetTime(of node: Node) {
        guard case .uncommitted = node.setTime?.standing, case .key(let key) = node.kind else { return }
        if let entry = store.entry(forKey: key), let time = node.setTime?.time {
            node.setTime = SetTime(time: time, standing: .value(entry.xml))
        } else {
            node.setTime = nil
        }
    }

    /// The bytes a time was set on were refused or dropped: it must not stay on what follows.
    func droppedSetTime(of node: Node) {
        if case .uncommitted = node.setTime?.standing { node.setTime = nil }
    }

    private func timeStamp(of change: AttributeChanges.TimeChange) -> TimeStamp {
        switch change {
        case .to(let time):
            return time
        case .now:
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return TimeStamp(seconds: now.tv_sec, nanoseconds: now.tv_nsec)
        }
    }
}
