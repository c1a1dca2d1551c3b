// Whether an instance should be sent traffic (GET /readyz), judged from its store's health.
//
// A degraded store (writes failing on a full disk, a shared store out of reach) still lets
// Larder answer correctly, uncached; but another instance whose store works does better, so
// the instance is not ready while its store is degraded *and failing now*: it counted a failure
// within the last `failingWindow` seconds. The second condition is what lets it come back. A
// degraded store is only found healthy again by an operation that succeeds (SQLite lets a save
// through as a probe every 2 s; Redis is tried again by the next operation), and an instance
// taken out of rotation gets no requests to try one: without new failures it is ready again
// after the window, the traffic it then gets finds out whether the store works, and each new
// failure takes it out once more.

public struct Readiness: Sendable, Equatable {
    /// How long after the store's last failure a degraded store keeps the instance unready.
    public static let failingWindow: Double = 30

    /// The store's failure count when last looked at, and when it was last seen to grow.
    private var failures: Int?
    private var lastFailureAt: Double?

    public init() {}

    /// Whether the instance is ready at `now` (seconds), given whether its store is healthy and
    /// how many store operations failed since start. Called on every probe.
    public mutating func isReady(storageHealthy: Bool, failures: Int, now: Double) -> Bool {
        if let seen = self.failures, failures > seen {
            lastFailureAt = now
        } else if self.failures == nil, failures > 0 {
            // Failures from before the first probe count as failing now: nothing says when.
            lastFailureAt = now
        }
        self.failures = failures
        guard !storageHealthy, let lastFailureAt else { return true }
        return now - lastFailureAt >= Self.failingWindow
    }
}
