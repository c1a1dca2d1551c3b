// Coalescing: a miss that finds a flight under way for its key waits on it (FlightTable), and
// when the flight lands each waiter gets the stored response, its stale entry, or a fetch of
// its own. Across instances, a shared store's leases (SharedFlights) do the same.

import LarderCore

extension FetchEngine {
    /// Claims the cross-instance lead for `run`'s flight; true when this instance leads (send
    /// upstream now). Otherwise the flight waits until the leader is done, then answers from the
    /// stored entry, or tries to lead itself (the leader died, or stored nothing usable).
    func claimShared(_ run: RunningMiss, using shared: any SharedFlights, attempt: Int = 1) -> Bool {
        let prepared = run.prepared
        let lease = Double(prepared.request.timeoutMs) / 1000 + 2
        return shared.claim(prepared.derived.key, forSeconds: lease) { [self] in
            let options = prepared.request.cache
            let now = clock.now()
            if let found = freshlyStored(prepared) {
                store.recordHit(found.key, at: now)
                let answer = serve(found, outcome: .hit, options: options, now: now, coalesced: true)
                return land(run.flight, with: .stored(found)) { run.answer(answer) }
            }
            if attempt < 3, !claimShared(run, using: shared, attempt: attempt + 1) {
                return
            }
            sendUpstream(run)
        }
    }

    /// The stored entry that answers `prepared` as a fresh hit right now, if one does (another
    /// flight, here or on another instance, just stored it).
    func freshlyStored(_ prepared: PreparedFetch) -> StoredEntry? {
        let options = prepared.request.cache
        guard let found = variant(for: prepared), found.freshness.version == options.version, Self.satisfies(found, prepared.request),
            case .serve(true) = CacheRules.lookup(
                policy: options.policy, method: prepared.request.method, ttl: options.ttl,
                version: options.version, entry: found.freshness, now: clock.now(),
                stale: options.staleWindows, directives: prepared.request.directives)
        else { return nil }
        return found
    }

    /// Refreshes `prepared`'s entry once, however many requests ask meanwhile: a refresh is a
    /// flight, and a flight already under way for the key is the refresh.
    func refreshInBackground(_ prepared: PreparedFetch) {
        let key = FlightKey(key: prepared.derived.key, version: prepared.request.cache.version)
        guard let flight = flights.lead(key) else { return }
        sendUpstream(RunningMiss(prepared, outcome: .miss, fallback: variant(for: prepared), forward: .stale, flight: flight) { _ in })
    }

    /// How the leading request of a flight ended, for the requests waiting on it.
    enum Landing {
        case stored(StoredEntry) // shareable: every waiter gets it
        // Storable, but the store did not keep it (Redis refused a first-time entry while full,
        // or the write failed): waiters still get it, reported as not stored, rather than each
        // going to the origin when the store is under pressure.
        case unstored(StoredEntry)
        case notShareable // private or not storable: each waiter fetches on its own
        case failed(LarderError) // the upstream failed: every waiter gets its stale entry if allowed, else the error
    }

    /// Ends `flight`: removes it, answers the leading request (`answerLeader`), then wakes the
    /// requests that waited on it. Called after the store committed, and the flight is removed
    /// before anyone is answered, so a request sent after an answer never joins a finished flight.
    func land(_ flight: FlightToken?, with landing: Landing, answerLeader: () -> Void) {
        // Other instances waiting on this key may read the stored entry now.
        if let flight { sharedFlights?.release(flight.key.key) }
        let waiters = flight.map(flights.land) ?? []
        answerLeader()
        guard !waiters.isEmpty else { return }
        let now = clock.now()
        for waiter in waiters {
            let options = waiter.prepared.request.cache
            switch landing {
            case .failed(let error):
                let fallback = variant(for: waiter.prepared).flatMap { $0.freshness.version == options.version ? $0 : nil }
                waiter.reply(
                    staleOnError(fallback, request: waiter.prepared.request, error: error.code.rawValue)
                        ?? .failed(error))
            case .stored(let entry) where acceptsShared(entry, waiter: waiter.prepared, now: now):
                waiter.reply(serve(entry, outcome: .hit, options: options, now: now, coalesced: true))
            case .unstored(let entry) where acceptsShared(entry, waiter: waiter.prepared, now: now):
                waiter.reply(serve(entry, outcome: .hit, options: options, now: now, coalesced: true, stored: false))
            case .stored, .unstored, .notShareable:
                // Not for this waiter (another variant, or its own directives reject it), or not
                // shareable at all: it asks on its own.
                if let immediate = fetch(waiter.prepared, mayCoalesce: false, cancellation: nil, reply: waiter.reply) {
                    waiter.reply(immediate)
                }
            }
        }
    }

    /// Whether a waiter may take the response its flight stored: the same variant (§4.1), and
    /// nothing in its own request directives (§5.2.1) rules it out.
    private func acceptsShared(_ entry: StoredEntry, waiter: PreparedFetch, now: Double) -> Bool {
        guard entry.matches(waiter.request.headers, keys: keys), Self.satisfies(entry, waiter.request) else { return false }
        let directives = waiter.request.directives
        let ttl = waiter.request.cache.ttl
        if directives.noCache { return false }
        if let maxAge = directives.maxAge, entry.freshness.age(now: now, ttl: ttl) > maxAge { return false }
        if let minFresh = directives.minFresh, entry.freshness.remaining(now: now, ttl: ttl) < minFresh { return false }
        return true
    }
}
