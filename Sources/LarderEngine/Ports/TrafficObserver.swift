public import LarderCore

/// Where answers and upstream exchanges are reported besides the counters (the metrics).
public protocol TrafficObserver: Sendable {
    /// One answer: its outcome (nil for a failure, then `errorCode`), the request's namespace,
    /// the event loop that received the request (`RequestIdentity.loop`).
    func answered(outcome: CacheOutcome?, coalesced: Bool, errorCode: String?, namespace: String, loop: Int)
    /// One upstream exchange: `upstream` names it (a named upstream, or "fetch" for a URL),
    /// `status` its status (nil on failure, then `errorCode`), `seconds` its duration.
    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double)
}
