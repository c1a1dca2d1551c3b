// The /fetch pipeline: derive the key → look up → decide → (fetch → decide to store → store)
// → render the envelope.
//
// Threading: `fetch` runs on the thread that handles the HTTP request. When the answer comes
// from the cache it is returned directly (no suspension, no hop). Otherwise `fetch` returns nil,
// the request goes to the upstream adapter, and `reply` is called from the thread that completes
// the transfer (one of the adapter's drivers: an HTTP event loop's thread, or a thread of its
// own; a large body is handled on a global queue instead) as soon as the response is complete
// and handed to the store (which commits it afterwards, off the request's path). No lock is
// taken on the hit path beyond what the store needs.

import Dispatch
public import LarderCore
import LarderSync
public import Logging

public final class FetchEngine: Sendable {
    public struct Limits: Sendable {
        /// Largest upstream body accepted, in bytes (larger → `upstream_too_large`).
        public var maxUpstreamBodyBytes: Int = 64 << 20
        /// Largest body stored, in bytes (larger is served but not stored).
        public var maxStoredBodyBytes: Int = 64 << 20
        /// Seconds past freshness a stored response may answer when the upstream fails, by the
        /// deployment's choice (`--stale-on-error`); 0 = only what stale-if-error allows.
        public var staleOnError: Double = 0
        /// After a range of a representation at most this large, it is fetched whole (0: never).
        public var rangeFetchOver: Int = 0
        /// Query parameters whose values are kept out of stored URLs (`--redact-query`).
        public var redaction = QueryRedaction()
        /// This instance's CDN-Loop token (RFC 8586), added to every upstream request; nil: none.
        public var loopToken: String?
        /// Response fields whose values tag a stored entry (lower-case; CacheTags).
        public var tagHeaders: [String] = CacheTags.defaultHeaderNames
        /// The targeted Cache-Control fields read, in order (`--targeted-cache-control`).
        public var targetedFields: [String] = CacheRules.defaultTargetedFields
        /// Negative-caching lifetimes by status (`--negative-ttl`); a named upstream's and a
        /// request's replace them status by status.
        public var negativeTTL = NegativeTTL()
        /// Seconds a key whose answer could not be stored is remembered, its misses then sent
        /// upstream at once instead of coalescing (`--uncacheable-memory`; 0: off).
        public var uncacheableMemory: Double = 120
        /// Which stored bodies are compressed at rest (`--compress-min-bytes`, `--compress-types`).
        public var compression = CompressionRules()
        /// When namespaces' compression dictionaries are trained (`--compress-dictionary-samples`).
        public var dictionaries = DictionaryTraining()
        public init() {}
    }

    // Internal, not private: the extensions in the files beside this one and the range fetcher
    // work with them.
    let store: any CacheStore
    let upstream: any Upstream
    let keys: CacheKeyBuilder
    let clock: Clock
    /// The limits in force; a reload replaces them (`setLimits`). Read on the miss path only.
    var limits: Limits { currentLimits.withLock { $0 } }
    private let currentLimits: Locked<Limits>
    let logger: Logger
    /// Answers since start, by outcome and error (GET /cache/stats).
    public let traffic: TrafficCounters
    /// Coalescing across instances (a shared store's leases); nil for one instance.
    let sharedFlights: (any SharedFlights)?
    /// Compresses stored bodies and makes them whole again; nil: bodies are stored as they
    /// came, and a compressed one found is as if nothing were stored.
    let bodyCodec: (any BodyCodec)?
    /// Each namespace's compression dictionaries; nil without a codec or a store to keep them.
    public let dictionaries: BodyDictionaries?
    /// Bodies stored compressed, and the bytes that saved (what the store did not have to keep).
    let compressionCounts = Locked((stored: 0, savedBytes: 0))
    /// Query parameters whose values stored URLs leave out (`--redact-query`).
    public var redaction: QueryRedaction { limits.redaction }
    /// Each namespace's current version, used by requests that name none.
    public let namespaces: NamespaceVersions
    /// Concurrent misses on one key wait on the first one's upstream request.
    let flights = FlightTable<FlightKey, Waiter>()
    /// Keys whose last answer was uncacheable (UncacheableMemory), and the misses sent straight
    /// upstream because of it. Touched on misses only.
    let uncacheable = Locked((memory: UncacheableMemory<CacheKey>(capacity: FetchEngine.uncacheableKeys), passes: 0))
    /// The No-Vary-Search rules of stored responses, by path.
    let noVarySearch = NoVarySearchRules()
    /// Keys remembered as uncacheable at most.
    public static let uncacheableKeys = 10_000

    /// Requests coalesce when they share the key and the version (the version decides whether
    /// a stored entry may be served, so it is part of what is being waited for).
    struct FlightKey: Hashable, Sendable {
        let key: CacheKey
        let version: Int64
    }

    /// A request waiting on another's flight.
    struct Waiter: Sendable {
        let prepared: PreparedFetch
        let reply: @Sendable (CacheAnswer) -> Void
    }

    typealias FlightToken = FlightTable<FlightKey, Waiter>.Token

    public init(
        store: any CacheStore, upstream: any Upstream, keys: CacheKeyBuilder, clock: Clock,
        limits: Limits = Limits(), sharedFlights: (any SharedFlights)? = nil, bodyCodec: (any BodyCodec)? = nil,
        dictionaryStore: (any DictionaryStore)? = nil, logger: Logger
    ) {
        self.store = store
        self.bodyCodec = bodyCodec
        if let bodyCodec, let dictionaryStore {
            self.dictionaries = BodyDictionaries(codec: bodyCodec, store: dictionaryStore, logger: logger)
        } else {
            self.dictionaries = nil
        }
        self.sharedFlights = sharedFlights
        self.upstream = upstream
        self.keys = keys
        self.clock = clock
        self.currentLimits = Locked(limits)
        self.logger = logger
        self.traffic = TrafficCounters(startedAt: clock.now())
        self.namespaces = NamespaceVersions(store.namespaceVersions())
    }

    /// Replaces the limits for the requests that follow (a reload).
    public func setLimits(_ limits: Limits) {
        currentLimits.withLock { $0 = limits }
    }

    /// Derives the key once; a prepared request can be answered any number of times.
    public func prepare(_ request: FetchRequest, for identity: RequestIdentity? = nil) -> PreparedFetch {
        PreparedFetch(request: request, derived: keys.derive(for: request), identity: identity)
    }

    /// Answers `request`. Returns the reply when the cache can answer at once; otherwise
    /// returns nil and calls `reply` exactly once, later, from another thread.
    public func fetch(
        _ request: FetchRequest,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        fetch(prepare(request), reply: reply)
    }

    /// `lookup`, then `send` for a miss.
    public func fetch(
        _ prepared: PreparedFetch,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        switch lookup(prepared) {
        case .answered(let answer): return answer
        case .miss(let miss): return send(miss, reply: reply)
        }
    }

    /// As `fetch`, and `cancellation` abandons the request: it is answered `cancelled` at once,
    /// and its upstream transfer is aborted (the connection to the origin closed) unless other
    /// requests wait on it (coalesced), in which case it goes on for them.
    public func fetch(
        _ prepared: PreparedFetch, cancellation: Cancellation,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        if cancellation.isCancelled { return .failed(Self.cancelledError) }
        switch lookup(prepared) {
        case .answered(let answer): return answer
        case .miss(let miss): return send(miss, cancellation: cancellation, reply: reply)
        }
    }

    static let cancelledError = LarderError(.cancelled, "the request was cancelled")

    /// What the cache makes of a request before it goes upstream: the answer it gives at once
    /// (counted here; a stale one may start a background refresh), or a miss for `send`. The
    /// caller builds its reply only for a miss, so a hit allocates no reply or counting closure
    /// (Varnish's order: hash, look up, and build the backend request only in `vcl_miss`).
    public func lookup(_ prepared: PreparedFetch) -> Lookup {
        let found = look(namespaces.resolving(prepared))
        if case .answered(let answer) = found {
            traffic.count(answer, namespace: prepared.request.cache.namespace, loop: prepared.identity?.loop ?? 0)
        }
        return found
    }

    /// Sends a miss on: returns the answer when one can be given at once (a flight that just
    /// landed, a stored part); otherwise nil, and `reply` is called exactly once, later, from
    /// another thread. With `cancellation`, as `fetch(_:cancellation:reply:)`.
    public func send(
        _ miss: Miss, cancellation: Cancellation? = nil,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        if let cancellation, cancellation.isCancelled { return .failed(Self.cancelledError) }
        let (counted, count) = counting(miss.prepared, reply)
        return count(send(miss, mayCoalesce: true, cancellation: cancellation, reply: counted))
    }

    /// `reply` counting its answer in `traffic`, and the same for an answer given at once.
    private func counting(_ prepared: PreparedFetch, _ reply: @escaping @Sendable (CacheAnswer) -> Void)
        -> (@Sendable (CacheAnswer) -> Void, (CacheAnswer?) -> CacheAnswer?)
    {
        let traffic = self.traffic
        let namespace = prepared.request.cache.namespace
        let loop = prepared.identity?.loop ?? 0
        return (
            { answer in
                traffic.count(answer, namespace: namespace, loop: loop)
                reply(answer)
            },
            { immediate in
                if let immediate { traffic.count(immediate, namespace: namespace, loop: loop) }
                return immediate
            }
        )
    }

    /// Lookup and send without counting (the callers count): coalesced waiters that ask again
    /// on their own, and the cache-only probes.
    func fetch(
        _ prepared: PreparedFetch, mayCoalesce: Bool, cancellation: Cancellation?,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        switch look(namespaces.resolving(prepared)) {
        case .answered(let answer): return answer
        case .miss(let miss): return send(miss, mayCoalesce: mayCoalesce, cancellation: cancellation, reply: reply)
        }
    }

    /// The lookup and the decision (RFC 9111 §4): serve what is stored, fail a cache-only
    /// request, or a miss. `prepared`'s namespace version is resolved.
    private func look(_ given: PreparedFetch) -> Lookup {
        // With a No-Vary-Search rule for its path, the key leaves out what the rule ignores.
        let prepared = noVarySearch.isEmpty ? given : reducedByNoVarySearch(given)
        let request = prepared.request
        let derived = prepared.derived
        let options = request.cache
        let cacheable = CacheRules.isCacheable(method: request.method, ttl: options.ttl)
        let readsCache = cacheable && options.policy != .noStore && options.policy != .reload
        // A stored entry the caller's validators reject is, for this caller, not there.
        var rows = StoredRows()
        let seenLandings = flights.landings
        let lookupSpan = prepared.identity?.span.recordedChild("cache lookup")
        let found = readsCache ? variant(for: prepared, rows: &rows).flatMap { Self.satisfies($0, request) ? $0 : nil } : nil
        lookupSpan?.end(["larder.cache.key": .string(derived.key.hex), "larder.cache.found": .bool(found != nil)])
        // An entry under another version is never served, not even stale on error.
        let entry = found?.freshness.version == options.version ? found : nil
        let now = clock.now()
        let decision = CacheRules.lookup(
            policy: options.policy, method: request.method, ttl: options.ttl,
            version: options.version, entry: found?.freshness, now: now,
            stale: options.staleWindows, directives: request.directives)
        switch decision {
        case .serve(let fresh):
            guard let entry else { preconditionFailure("serve decided without an entry") }
            store.recordHit(entry.key, at: now)
            return .answered(serve(entry, outcome: fresh ? .hit : .stale, options: options, now: now))
        case .serveStaleAndRefresh:
            guard let entry else { preconditionFailure("serve decided without an entry") }
            store.recordHit(entry.key, at: now)
            refreshInBackground(prepared)
            return .answered(serve(entry, outcome: .stale, options: options, now: now))
        case .failNotCached:
            return .answered(.failed(LarderError(.notCached, "nothing usable is stored for this request and the policy is cache-only")))
        case .fetch:
            // Nothing whole is stored but a part is (RFC 9111 §3.4): ask only for the rest.
            let partOnly = rows.hasPart && found == nil && request.shared && request.method == .get
            let outcome: CacheOutcome = (options.policy == .noStore || !cacheable) ? .bypass : .miss
            let forward = ForwardReason.of(
                cacheable: cacheable, policy: options.policy, partOnly: partOnly,
                entryFresh: entry.map { $0.freshness.isFresh(now: now, ttl: options.ttl) }, foundOtherVersion: entry == nil && found != nil,
                otherVariants: rows.hasWhole)
            return .miss(
                Miss(
                    prepared: prepared, outcome: outcome, fallback: entry, partOnly: partOnly, forward: forward, seenLandings: seenLandings)
            )
        }
    }

    /// The miss path: coalescing with other requests for the key (here and, with a shared
    /// store, on other instances), then the upstream request.
    private func send(
        _ miss: Miss, mayCoalesce: Bool, cancellation: Cancellation?,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        let prepared = miss.prepared
        if miss.partOnly { return ranges.fetch(prepared, range: nil, reply: reply) }
        let options = prepared.request.cache
        let outcome = miss.outcome
        // Coalescing: concurrent misses on one key wait for the first one's upstream request
        // (not for reload, which asks for a fetch of its own, nor for bypass).
        var leading: FlightToken?
        var mayHaveLanded = false
        if mayCoalesce, outcome == .miss, options.policy != .reload, !passesStraight(prepared.derived.key) {
            let key = FlightKey(key: prepared.derived.key, version: options.version)
            // A waiter that may give up answers through a miss of its own, so that the first of
            // its flight's landing and its cancellation answers it, and only that one.
            let waiting = cancellation.map {
                RunningMiss(
                    prepared, outcome: outcome, fallback: miss.fallback, forward: miss.forward, flight: nil, cancellation: $0,
                    leading: false, reply: reply)
            }
            let waiter = Waiter(prepared: prepared, reply: waiting.map { $0.answer } ?? reply)
            switch flights.join(key, as: waiter, seenLandings: miss.seenLandings) {
            case .waiting(let waiter):
                // A cancelled waiter leaves the flight; the flight goes on for the others.
                if let cancellation, let waiting {
                    // Weakly, as for a leader (sendUpstream): a waiter answered is over.
                    cancellation.onCancel { [self, weak waiting] in
                        waiting?.giveUp { if $0 == .leaveFlight { flights.leave(key, waiter: waiter) } }
                    }
                }
                return nil
            case .leading(let token, let landedSince):
                leading = token
                mayHaveLanded = landedSince
            }
        }
        let run = RunningMiss(
            prepared, outcome: outcome, fallback: miss.fallback, forward: miss.forward, flight: leading, cancellation: cancellation,
            reply: reply)
        if let leading {
            // A flight for this key may have landed between the lookup and taking the lead (its
            // entry is stored before its flight ends): answer from that entry.
            if mayHaveLanded, let landed = freshlyStored(prepared) {
                let now = clock.now()
                store.recordHit(landed.key, at: now)
                let answer = serve(landed, outcome: .hit, options: options, now: now, coalesced: true)
                land(leading, with: .stored(landed)) { run.answer(answer) }
                return nil
            }
            // Across instances: one leads, the others wait for its entry (a shared store).
            if let shared = sharedFlights, !claimShared(run, using: shared) {
                return nil
            }
        }
        sendUpstream(run)
        return nil
    }

    /// Partial content (RFC 9111 §3.4): range requests no stored whole response answers, and
    /// plain GETs that find only a stored part.
    public var ranges: RangeFetcher { RangeFetcher(engine: self, rangeFetchOver: limits.rangeFetchOver) }

    /// `prepared` keyed without the query parameters its path's No-Vary-Search rule ignores
    /// (itself when there is none, or it has none of them).
    private func reducedByNoVarySearch(_ prepared: PreparedFetch) -> PreparedFetch {
        let request = prepared.request
        // Rules are learned from GET responses only, and their scope names the method.
        guard request.method == .get, let rule = noVarySearch.rule(for: NoVarySearchRules.scope(of: request))
        else { return prepared }
        let derived = keys.derive(for: request, dropping: rule.ignores)
        guard derived.key != prepared.derived.key else { return prepared }
        return PreparedFetch(request: request, derived: derived, identity: prepared.identity)
    }

    /// Learns the No-Vary-Search rule a stored response to `prepared` declares, or that it
    /// declares none, and gives the key to store it under: without the parameters it ignores.
    func keyForStoring(_ prepared: PreparedFetch, response: UpstreamResponse) -> CacheKeyBuilder.Derived {
        let request = prepared.request
        guard request.method == .get else { return prepared.derived }
        let rule = NoVarySearch(response.headers.values(NoVarySearch.field))
        guard rule != nil || !noVarySearch.isEmpty else { return prepared.derived }
        let ended = noVarySearch.learn(rule, for: NoVarySearchRules.scope(of: request))
        if let rule { return keys.derive(for: request, dropping: rule.ignores) }
        // Without a rule, the request's own key: the lookup reduced it under the rule this
        // response ends.
        return ended ? keys.derive(for: request) : prepared.derived
    }

    /// Requests that joined another request's upstream fetch instead of sending their own.
    public var coalescedCount: Int { flights.joinedCount }

    /// Misses sent upstream at once because their key's last answer was uncacheable, and the
    /// keys remembered so (GET /metrics).
    public var uncacheableFigures: (passes: Int, keys: Int) { uncacheable.withLock { ($0.passes, $0.memory.count) } }

    /// Whether `key`'s last answer was uncacheable, so its miss goes upstream without waiting on
    /// another's (counted).
    private func passesStraight(_ key: CacheKey) -> Bool {
        let now = clock.now()
        return uncacheable.withLock { state in
            guard state.memory.count > 0, state.memory.contains(key, now: now) else { return false }
            state.passes += 1
            return true
        }
    }
}
