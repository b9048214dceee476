/// Exponential backoff with equal jitter (half the ceiling fixed, half random): waits grow
/// from `initial` to at most `maximum`.
struct Backoff {
    let initial: Duration
    let maximum: Duration
    private var failures = 0

    init(initial: Duration = .milliseconds(50), maximum: Duration = .seconds(30)) {
        self.initial = initial
        self.maximum = maximum
    }

    mutating func reset() { failures = 0 }

    /// The wait before the next attempt: random in [ceiling/2, ceiling], the ceiling doubling
    /// with each failure.
    mutating func next<G: RandomNumberGenerator>(using generator: inout G) -> Duration {
        let ceiling = min(maximum, initial * (1 << min(failures, 20)))
        failures += 1
        let fraction = Double.random(in: 0.5...1, using: &generator)
        return ceiling * fraction
    }
}
