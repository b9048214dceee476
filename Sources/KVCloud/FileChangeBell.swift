import Dispatch
import Glibc
import Synchronization

/// Rings when any of some files is written (inotify `IN_MODIFY`): for the file remote, its
/// SQLite database and write-ahead log, which every commit of every process that shares it
/// writes. Waiting on it costs nothing while nobody writes, where looking at the remote's
/// cursor every few milliseconds kept an idle mount busy.
///
/// A bell whose file went away (deleted, or its file system unmounted) says so in `isBroken`;
/// the owner makes a new one. A bell is made for one waiter, before it looks at what the files
/// hold, so that a write after that look rings it.
package final class FileChangeBell: @unchecked Sendable {
    // @unchecked: `source` is set once in init and only cancelled after; the rest is Sendable.
    private let signal = WakeSignal()
    private final class Flag: Sendable {
        let isSet = Atomic<Bool>(false)
    }
    private let broken = Flag()
    private let source: any DispatchSourceRead

    /// Nil when inotify cannot watch the first of `paths` (which must exist); paths after the
    /// first are watched when they exist.
    package init?(paths: [String]) {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return nil }
        guard let first = paths.first, inotify_add_watch(descriptor, first, UInt32(IN_MODIFY)) >= 0 else {
            close(descriptor)
            return nil
        }
        for path in paths.dropFirst() { _ = inotify_add_watch(descriptor, path, UInt32(IN_MODIFY)) }
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: DispatchQueue.global())
        source.setEventHandler { [signal, broken] in
            if Self.drain(descriptor) { broken.isSet.store(true, ordering: .relaxed) }
            signal.signal()
        }
        source.setCancelHandler { close(descriptor) }
        source.resume()
    }

    deinit { source.cancel() }

    package var isBroken: Bool { broken.isSet.load(ordering: .relaxed) }

    /// Returns when a watched file was written since the bell was made or the last wait
    /// returned (true), or after `timeout` on `clock`, or once the task is cancelled (false).
    /// One waiter at a time.
    package func wait<C: Clock>(upTo timeout: Duration, on clock: C) async -> Bool where C.Duration == Duration {
        let quiet = Flag()
        let timer = Task { [signal] in
            try? await clock.sleep(for: timeout)
            if !Task.isCancelled {
                quiet.isSet.store(true, ordering: .relaxed)
                signal.signal()
            }
        }
        await withTaskCancellationHandler {
            await signal.wait()
        } onCancel: { [signal] in
            quiet.isSet.store(true, ordering: .relaxed)
            signal.signal()
        }
        timer.cancel()
        return !quiet.isSet.load(ordering: .relaxed)
    }

    /// Reads every queued event; true if a watch ended (`IN_IGNORED`).
    private static func drain(_ descriptor: Int32) -> Bool {
        var ended = false
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else { return ended }
            var offset = 0
            while offset + MemoryLayout<inotify_event>.size <= count {
                let event = buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self) }
                if event.mask & UInt32(IN_IGNORED) != 0 { ended = true }
                offset += MemoryLayout<inotify_event>.size + Int(event.len)
            }
        }
    }
}
