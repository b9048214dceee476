import KVCloud
import Synchronization

/// The engine's background work: the loop that runs rounds, the watcher that wakes it for
/// remote changes, and the ticker that wakes it when nothing else has. Every wait is on the
/// engine's clock.
extension SyncEngine {
    /// Starts syncing in the background: at once, then on every local change, every remote
    /// change, and every `keepAliveInterval`.
    public func start() {
        // Weak: the store the engine holds keeps the observer.
        store.observeLocalChanges { [weak self] in
            guard let self else { return }
            localChangeWaiting.store(true, ordering: .relaxed)
            wake.signal()
        }
        let loop = Task.detached { [self] in await runLoop() }
        let watcher = Task.detached { [self] in await watchRemote() }
        let ticker = Task.detached { [self] in await tick() }
        tasks.withLock { $0 = [loop, watcher, ticker] }
    }

    public func stop() {
        for task in tasks.withLock({ $0 }) { task.cancel() }
        wake.signal()
    }

    /// Stops, and returns once a round in flight has ended: nothing this engine started
    /// touches the store or the remote after.
    public func stopAndWait() async {
        stop()
        for task in tasks.withLock({ $0 }) { await task.value }
    }

    /// Asks for a round without waiting for it: it starts at once, or, while changes come
    /// faster than rounds, once the interval since the last one has passed (`pause`).
    public func requestSync() {
        wake.signal()
    }

    /// Runs a round, then waits for a wake-up and for the pause the round calls for (`pause`).
    /// A round that fails is retried after the remote's retry-after if it gave one, else after
    /// a backoff that grows with each failure in a row.
    private func runLoop() async {
        var backoff = Backoff()
        while !Task.isCancelled {
            let roundStart = clock.elapsed
            // A change made from here on may miss this round's push: the next round's pause
            // lets others join it.
            localChangeWaiting.store(false, ordering: .relaxed)
            let traffic: RoundTraffic
            do {
                traffic = try await round()
                backoff.reset()
            } catch {
                let delay = (error as? CloudError)?.retryAfter ?? nextWait(of: &backoff)
                do { try await clock.sleep(for: delay) } catch { return }
                continue
            }
            await wake.wait()
            let localChange = localChangeWaiting.load(ordering: .relaxed)
            let wait = pause(after: traffic, sinceItBegan: clock.elapsed - roundStart, localChange: localChange)
            guard wait > .zero else { continue }
            do { try await clock.sleep(for: wait) } catch { return }
        }
    }

    /// How long the loop waits, once woken, before the next round.
    ///
    /// A round that moved at most one change (pushed or taken in) leaves the mount idle: the
    /// next round starts at once, so that a single change, as people make them, reaches the
    /// remote and the other mounts without waiting. (An editor's save is one change of the
    /// store already: its scratch files never reach it.) A round that moved more means changes
    /// come faster than rounds, a burst or a stream: the next round starts no sooner than the
    /// minimum interval (the burst interval after a push of `burstSize` or more) after that one
    /// began, and, when a local change woke it, not before the debounce has let others join
    /// that change; so that each round carries many changes.
    func pause(after traffic: RoundTraffic, sinceItBegan elapsed: Duration, localChange: Bool) -> Duration {
        guard traffic.pushed + traffic.fetched > 1 else { return .zero }
        let interval = traffic.pushed >= burstSize ? burstInterval : minimumInterval
        return max(localChange ? debounce : .zero, interval - elapsed)
    }

    /// Wakes the loop when the remote has changes after the position fetched up to, then lets
    /// the loop fetch them before looking again.
    private func watchRemote() async {
        // Nothing is asked before a round has looked at the remote's identity: the stored
        // position may be another account's (a mount moved with --remote), which the remote
        // would take for another history.
        await state.wait { $0.lastSync != nil }
        var backoff = Backoff()
        while !Task.isCancelled {
            do {
                if knownPosition.value == nil {
                    let stored = try storedPosition() ?? .start
                    knownPosition.update { $0 = $0 ?? stored }
                }
                let seen = knownPosition.value ?? .start
                let changed = try await remote.waitForChanges(in: remoteStore, after: seen.cursor, mark: seen.mark, timeout: .seconds(10))
                // A log's wait answers false when the task is cancelled: the engine is stopping.
                try Task.checkCancellation()
                if changed {
                    // A round moved the position meanwhile (our own push, say): look again from there.
                    guard knownPosition.value == seen else { continue }
                    wake.signal()
                    // The round records the position it fetched up to; one that fails leaves
                    // it where it was, and the watcher looks again after a second.
                    await clock.wait(upTo: .seconds(1)) { [knownPosition] in
                        await knownPosition.wait { $0 != seen }
                    }
                }
                backoff.reset()
            } catch {
                // The round reports what the remote answers; a watcher that cannot reach it
                // (or whose stream ended) only notes the gap, and looks again later. Another
                // history: the round that this starts finds it too, and resynchronises.
                noteGap(after: error)
                if (error as? CloudError)?.isHistoryMismatch == true { wake.signal() }
                do { try await clock.sleep(for: nextWait(of: &backoff)) } catch { return }
            }
        }
    }

    /// Wakes the loop every `keepAliveInterval`, so that a change the watcher missed is
    /// fetched and the account is checked even when nothing happens.
    private func tick() async {
        while true {
            do { try await clock.sleep(for: keepAliveInterval) } catch { return }
            wake.signal()
        }
    }

    private func nextWait(of backoff: inout Backoff) -> Duration {
        jitter.withLock { backoff.next(using: &$0) }
    }
}
