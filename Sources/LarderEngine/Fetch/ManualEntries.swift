// Responses written by hand (PUT /cache/entries): an operator seeds the cache before a launch,
// or an app saves a response it obtained some other way (YTKNetwork's
// saveJsonResponseToCacheFile). The entry is made exactly as a fetched response would be, so a
// later request with the same spec finds it.

public import LarderCore

extension FetchEngine {
    /// Stores `response` as the answer to `prepared`, under the same rules as a fetched one
    /// (`cache.ttl`, else the response's own freshness); calls back with the key, or why not.
    public func write(
        _ response: UpstreamResponse, for prepared: PreparedFetch,
        completion: @escaping @Sendable (Result<CacheKey, LarderError>) -> Void
    ) {
        let prepared = namespaces.resolving(prepared)
        let request = prepared.request
        var response = response
        response.headers = HopByHop.removingFraming(from: response.headers)
        let options = request.cache
        guard CacheRules.isCacheable(method: request.method, ttl: options.ttl), options.policy != .noStore else {
            return completion(
                .failure(
                    .invalid(
                        "request",
                        "a \(request.method.rawValue) request with this policy is never stored; "
                            + "GET or HEAD, or a ttl, is needed")))
        }
        let now = clock.now()
        let kind =
            request.shared
            ? BodyKind.binary
            : BodyKind.classify(contentType: response.headers.first(named: "content-type"), body: response.body)
        var inputs = storeInputs(
            request, partitioned: prepared.derived.partitioned, status: response.status,
            headers: response.headers, bodySize: response.body.count, sentAt: now, arrivedAt: now)
        // The policy is `protocol` for the decision: the caller asks to store, whatever policy
        // later requests read with. No request went anywhere: no directives, no credentials sent.
        inputs.policy = .useProtocol
        inputs.directives = RequestDirectives()
        inputs.sharedWithCredentials = false
        let decision = CacheRules.store(inputs)
        guard case .store(let stored) = decision else {
            if case .refuse(let reason) = decision {
                return completion(
                    .failure(
                        .invalid(
                            "response",
                            "not storable (\(reason.rawValue)); give cache.ttl to store it for that long")))
            }
            return
        }
        var entry = entry(storing: response, for: request, derived: prepared.derived, kind: kind, stored: stored, at: now)
        entry.keepRequested = true
        let primaryKey = entry.primaryKey
        save(entry) { saved in
            completion(saved ? .success(primaryKey) : .failure(LarderError(.storageFailed, "the entry could not be stored")))
        }
    }
}
