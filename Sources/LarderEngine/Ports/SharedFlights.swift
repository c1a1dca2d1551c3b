public import LarderCore

/// Several instances coalescing one key's misses into one upstream request (a shared store's
/// leases). The engine asks before it sends a request upstream for a key it leads locally.
public protocol SharedFlights: Sendable {
    /// Tries to lead `key` across instances for at most `seconds`; false when another instance
    /// leads. Then `wake` is called once, when that leader is done or its lease has lapsed
    /// (never when this instance leads).
    func claim(_ key: CacheKey, forSeconds seconds: Double, wake: @escaping @Sendable () -> Void) -> Bool
    /// This instance's lead on `key` (if it has one) is over: release it and wake the others.
    func release(_ key: CacheKey)
}
