import Testing

extension Trait where Self == TimeLimitTrait {
    /// The time limit of a test that must not hang: it guards against a test that would never
    /// end, and says nothing of speed (benchmarks do).
    ///
    /// Why so long: the suite's tests run side by side, on a pool of threads as wide as the
    /// machine's cores, and many block a thread while a mount, a server or a tool works. A test
    /// started early may wait on a thread for most of the suite's length (about 3 minutes on 2
    /// cores), and a time limit counts that wait as the test's own time.
    public static var hangGuard: Self { .timeLimit(.minutes(10)) }
}
