// The engine's view of the origins. LarderCurl implements it; engine tests script it.

public import LarderCore

/// Sends requests upstream. Completions arrive on a thread of the upstream's (a driver's), not
/// necessarily the caller's.
public protocol Upstream: Sendable {
    func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void)
}
