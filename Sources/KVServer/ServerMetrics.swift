import Foundation
import Hummingbird
import Prometheus
import Synchronization

/// The server's Prometheus metrics (`GET /metrics`): requests by status, pushes, the
/// transactions that committed them and the changes in them, waiting long polls (connected
/// watchers), and how long after it was made a change reached the server (by its stamp, so
/// client clocks count).
public final class ServerMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    let pushes: Counter
    let pushCommits: Counter
    /// The storage's count of push transactions that `pushCommits` shows so far.
    private let shownCommits = Mutex(0)
    let accepted: Counter
    let refused: Counter
    let watchers: Gauge
    let changeDelay: DurationHistogram

    public init() {
        pushes = registry.makeCounter(name: "kvsfs_pushes_total", help: "Push requests served.")
        pushCommits = registry.makeCounter(
            name: "kvsfs_push_commits_total",
            help: "Transactions pushes were committed in (each flushed to disk before its pushes are answered): pushes arriving together share one.")
        accepted = registry.makeCounter(name: "kvsfs_changes_accepted_total", help: "Pushed changes accepted.")
        refused = registry.makeCounter(name: "kvsfs_changes_refused_total", help: "Pushed changes refused: for a quota or a rule, or because the server cannot read its row for the key.")
        watchers = registry.makeGauge(name: "kvsfs_watchers", help: "Long polls waiting for a change.")
        changeDelay = registry.makeDurationHistogram(
            name: "kvsfs_change_delay_seconds",
            buckets: [.milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
                      .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5), .seconds(30)],
            help: "From a change's stamp to its acceptance by the server.")
    }

    /// Brings `kvsfs_push_commits_total` up to `total`, the storage's own count (it counts
    /// what it commits; the metric is read only when scraped).
    func showPushCommits(_ total: Int) {
        shownCommits.withLock { shown in
            guard total > shown else { return }
            pushCommits.increment(by: Int64(total - shown))
            shown = total
        }
    }

    func countRequest(status: HTTPResponse.Status) {
        registry.makeCounter(name: "kvsfs_requests_total", labels: [("status", String(status.code))], help: "HTTP requests by status.")
            .increment()
    }
}

/// Counts every answered request by its status.
struct MetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            let response = try await next(request, context)
            metrics.countRequest(status: response.status)
            return response
        } catch let error as HTTPResponseError {
            metrics.countRequest(status: error.status)
            throw error
        } catch {
            metrics.countRequest(status: .internalServerError)
            throw error
        }
    }
}

/// Per-token request limits: a bucket of `burst` requests refilled at `rate` per second.
/// A request over the limit is answered 429 with Retry-After.
public final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }
    private let buckets = Mutex<[String: Bucket]>([:])
    let rate: Double
    let burst: Double

    /// `rate` requests per second per token (0: no limit), bursts of twice that.
    public init(rate: Double) {
        self.rate = rate
        burst = max(1, rate * 2)
    }

    /// Nil when the request may go on, else how long to wait.
    func admit(_ key: String, now: ContinuousClock.Instant = .now) -> Duration? {
        guard rate > 0 else { return nil }
        return buckets.withLock { buckets in
            var bucket = buckets[key] ?? Bucket(tokens: burst, updated: now)
            let elapsed = bucket.updated.duration(to: now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(burst, bucket.tokens + seconds * rate)
            bucket.updated = now
            defer { buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return .seconds((1 - bucket.tokens) / rate)
        }
    }
}
