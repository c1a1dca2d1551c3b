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
public import Logging
import LarderSync

/// What the engine answers with: a response (from the cache or the upstream) and how it was
/// obtained, or a failure. The routes render it: /fetch as the JSON envelope, /proxy as is.
public enum CacheAnswer: Sendable {
    case served(ServedResponse)
    case failed(LarderError)

    public var outcome: CacheOutcome? {
        if case .served(let response) = self { return response.report.outcome }
        return nil
    }
}

public struct ServedResponse: Sendable {
    public var status: Int
    /// Headers as a JSON object (names lower-cased, repeated fields joined, no hop-by-hop).
    /// Left empty for the proxy's fresh upstream responses (shared requests), which send `headers`.
    public var headersJSON: [UInt8]
    /// The header fields: the upstream's own when the response came from it just now (Set-Cookie
    /// included), the stored ones otherwise.
    public var headers: [HeaderField]
    public var body: [UInt8]
    public var bodyKind: BodyKind
    public var report: CacheReport
    /// Duration of the upstream exchange; nil when answered from the cache.
    public var upstreamMs: Double?
    /// The stored entry's validators and dates, for answering conditional requests.
    public var etag: String?
    public var lastModified: String?
    /// For the proxy, a body the store keeps in a file, opened to be sent as is (sendfile);
    /// `body` is then empty and the body's length is the descriptor's size.
    public var openedBody: OwnedDescriptor? = nil

    /// The body's length, wherever it is.
    public var bodyLength: Int { openedBody?.size ?? body.count }
}

/// A validated request with its cache key derived.
/// (A class: prepared requests are remembered and handed around on every hit, and a reference
/// costs one retain where the struct's many fields cost one each.)
public final class PreparedFetch: Sendable {
    public let request: FetchRequest
    public let derived: CacheKeyBuilder.Derived

    public init(request: FetchRequest, derived: CacheKeyBuilder.Derived) {
        self.request = request
        self.derived = derived
    }
}

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
        public init() {}
    }

    // Internal, not private: the range fetcher (RangeFetcher.swift) works with them.
    let store: any CacheStore
    let upstream: any Upstream
    let keys: CacheKeyBuilder
    let clock: Clock
    let limits: Limits
    let logger: Logger
    /// Answers since start, by outcome and error (GET /cache/stats).
    public let traffic: TrafficCounters
    /// Coalescing across instances (a shared store's leases); nil for one instance.
    let sharedFlights: (any SharedFlights)?
    /// Query parameters whose values stored URLs leave out (`--redact-query`).
    public var redaction: QueryRedaction { limits.redaction }
    /// Each namespace's current version, used by requests that name none.
    public let namespaces: NamespaceVersions
    /// Concurrent misses on one key wait on the first one's upstream request.
    let flights = FlightTable<FlightKey, Waiter>()

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

    public init(store: any CacheStore, upstream: any Upstream, keys: CacheKeyBuilder, clock: Clock,
                limits: Limits = Limits(), sharedFlights: (any SharedFlights)? = nil, logger: Logger) {
        self.store = store
        self.sharedFlights = sharedFlights
        self.upstream = upstream
        self.keys = keys
        self.clock = clock
        self.limits = limits
        self.logger = logger
        self.traffic = TrafficCounters(startedAt: clock.now())
        self.namespaces = NamespaceVersions(store.namespaceVersions())
    }

    /// Derives the key once; a prepared request can be answered any number of times.
    public func prepare(_ request: FetchRequest) -> PreparedFetch {
        PreparedFetch(request: request, derived: keys.derive(for: request))
    }

    /// Answers `request`. Returns the reply when the cache can answer at once; otherwise
    /// returns nil and calls `reply` exactly once, later, from another thread.
    public func fetch(_ request: FetchRequest,
                      reply: @escaping @Sendable (CacheAnswer) -> Void) -> CacheAnswer? {
        fetch(prepare(request), reply: reply)
    }

    public func fetch(_ prepared: PreparedFetch,
                      reply: @escaping @Sendable (CacheAnswer) -> Void) -> CacheAnswer? {
        let (counted, count) = counting(prepared, reply)
        return count(fetch(prepared, mayCoalesce: true, cancellation: nil, reply: counted))
    }

    /// As `fetch`, and `cancellation` abandons the request: it is answered `cancelled` at once,
    /// and its upstream transfer is aborted (the connection to the origin closed) unless other
    /// requests wait on it (coalesced), in which case it goes on for them.
    public func fetch(_ prepared: PreparedFetch, cancellation: Cancellation,
                      reply: @escaping @Sendable (CacheAnswer) -> Void) -> CacheAnswer? {
        if cancellation.isCancelled { return .failed(Self.cancelledError) }
        let (counted, count) = counting(prepared, reply)
        return count(fetch(prepared, mayCoalesce: true, cancellation: cancellation, reply: ReplyOnce(counted).callAsFunction))
    }

    static let cancelledError = LarderError(.cancelled, "the request was cancelled")

    /// `reply` counting its answer in `traffic`, and the same for an answer given at once.
    private func counting(_ prepared: PreparedFetch, _ reply: @escaping @Sendable (CacheAnswer) -> Void)
        -> (@Sendable (CacheAnswer) -> Void, (CacheAnswer?) -> CacheAnswer?) {
        let traffic = self.traffic
        let namespace = prepared.request.cache.namespace
        return ({ answer in
            traffic.count(answer, namespace: namespace)
            reply(answer)
        }, { immediate in
            if let immediate { traffic.count(immediate, namespace: namespace) }
            return immediate
        })
    }

    private func fetch(_ prepared: PreparedFetch, mayCoalesce: Bool, cancellation: Cancellation?,
                       reply: @escaping @Sendable (CacheAnswer) -> Void) -> CacheAnswer? {
        let prepared = namespaces.resolving(prepared)
        let request = prepared.request
        let derived = prepared.derived
        let options = request.cache
        let cacheable = CacheRules.isCacheable(method: request.method, ttl: options.ttl)
        let readsCache = cacheable && options.policy != .noStore && options.policy != .reload
        // A stored entry the caller's validators reject is, for this caller, not there.
        var hasPart = false
        let found = readsCache ? variant(for: prepared, hasPart: &hasPart).flatMap { Self.satisfies($0, request) ? $0 : nil } : nil
        // An entry under another version is never served, not even stale on error.
        let entry = found?.freshness.version == options.version ? found : nil
        let now = clock.now()
        let decision = CacheRules.lookup(policy: options.policy, method: request.method, ttl: options.ttl,
                                         version: options.version, entry: found?.freshness, now: now,
                                         stale: options.staleWindows, directives: request.directives)
        switch decision {
        case .serve(let fresh):
            guard let entry else { preconditionFailure("serve decided without an entry") }
            store.recordHit(entry.key, at: now)
            return serve(entry, outcome: fresh ? .hit : .stale, options: options, now: now)
        case .serveStaleAndRefresh:
            guard let entry else { preconditionFailure("serve decided without an entry") }
            store.recordHit(entry.key, at: now)
            refreshInBackground(prepared)
            return serve(entry, outcome: .stale, options: options, now: now)
        case .failNotCached:
            return .failed(LarderError(.notCached, "nothing usable is stored for this request and the policy is cache-only"))
        case .fetch:
            // Nothing whole is stored but a part is (RFC 9111 §3.4): ask only for the rest.
            if hasPart, found == nil, request.shared, request.method == .get {
                return ranges.fetch(prepared, range: nil, reply: reply)
            }
        }

        let outcome: CacheOutcome = (options.policy == .noStore || !cacheable) ? .bypass : .miss
        // Coalescing: concurrent misses on one key wait for the first one's upstream request
        // (not for reload, which asks for a fetch of its own, nor for bypass).
        var leading: FlightToken?
        if mayCoalesce, outcome == .miss, options.policy != .reload {
            let key = FlightKey(key: derived.key, version: options.version)
            switch flights.join(key, as: Waiter(prepared: prepared, reply: reply)) {
            case .waiting(let waiter):
                // A cancelled waiter leaves the flight; the flight goes on for the others.
                cancellation?.onCancel { [self] in
                    flights.leave(key, waiter: waiter)
                    reply(.failed(Self.cancelledError))
                }
                return nil
            case .leading(let token):
                leading = token
            }
            // A flight for this key may have landed between the lookup above and taking the
            // lead (its entry is stored before its flight ends): answer from that entry.
            if let landed = freshlyStored(prepared), let leading {
                store.recordHit(landed.key, at: now)
                let answer = serve(landed, outcome: .hit, options: options, now: now, coalesced: true)
                land(leading, with: .stored(landed)) { reply(answer) }
                return nil
            }
            // Across instances: one leads, the others wait for its entry (a shared store).
            if let shared = sharedFlights, let leading, !claimShared(prepared, outcome: outcome, fallback: entry, flight: leading,
                                                                      cancellation: cancellation, reply: reply, using: shared) {
                return nil
            }
        }
        sendUpstream(prepared, outcome: outcome, fallback: entry, flight: leading, cancellation: cancellation, reply: reply)
        return nil
    }

    /// Claims the cross-instance lead for `flight`'s key; true when this instance leads (send
    /// upstream now). Otherwise the flight waits until the leader is done, then answers from the
    /// stored entry, or tries to lead itself (the leader died, or stored nothing usable).
    private func claimShared(_ prepared: PreparedFetch, outcome: CacheOutcome, fallback: StoredEntry?, flight: FlightToken,
                             cancellation: Cancellation?, reply: @escaping @Sendable (CacheAnswer) -> Void,
                             using shared: any SharedFlights, attempt: Int = 1) -> Bool {
        let lease = Double(prepared.request.timeoutMs) / 1000 + 2
        return shared.claim(prepared.derived.key, forSeconds: lease) { [self] in
            let options = prepared.request.cache
            let now = clock.now()
            if let found = freshlyStored(prepared) {
                store.recordHit(found.key, at: now)
                let answer = serve(found, outcome: .hit, options: options, now: now, coalesced: true)
                return land(flight, with: .stored(found)) { reply(answer) }
            }
            if attempt < 3, !claimShared(prepared, outcome: outcome, fallback: fallback, flight: flight, cancellation: cancellation,
                                         reply: reply, using: shared, attempt: attempt + 1) {
                return
            }
            sendUpstream(prepared, outcome: outcome, fallback: fallback, flight: flight, cancellation: cancellation, reply: reply)
        }
    }

    /// The stored entry that answers `prepared` as a fresh hit right now, if one does (another
    /// flight, here or on another instance, just stored it).
    private func freshlyStored(_ prepared: PreparedFetch) -> StoredEntry? {
        let options = prepared.request.cache
        guard let found = variant(for: prepared), found.freshness.version == options.version, Self.satisfies(found, prepared.request),
              case .serve(true) = CacheRules.lookup(policy: options.policy, method: prepared.request.method, ttl: options.ttl,
                                                    version: options.version, entry: found.freshness, now: clock.now(),
                                                    stale: options.staleWindows, directives: prepared.request.directives)
        else { return nil }
        return found
    }

    private func serve(_ entry: StoredEntry, outcome: CacheOutcome, options: CacheOptions, now: Double,
                       upstreamError: String? = nil, coalesced: Bool = false) -> CacheAnswer {
        let report = CacheReport(outcome: outcome, key: entry.primaryKey, age: entry.freshness.age(now: now, ttl: options.ttl),
                                 ttl: entry.freshness.remaining(now: now, ttl: options.ttl),
                                 version: entry.freshness.version, stored: true, coalesced: coalesced,
                                 upstreamError: upstreamError)
        return .served(ServedResponse(status: entry.status, headersJSON: entry.headersJSON, headers: entry.headerFields, body: entry.body,
                                      bodyKind: entry.bodyKind, report: report, upstreamMs: nil, etag: entry.etag,
                                      lastModified: entry.lastModified, openedBody: entry.openedBody))
    }

    /// Sends the request upstream; stores and answers with the response. `fallback` is the
    /// stale entry that may answer instead of an upstream failure (stale-if-error).
    private func sendUpstream(_ prepared: PreparedFetch, outcome: CacheOutcome, fallback: StoredEntry?, flight: FlightToken?,
                              conditional: Bool = true, cancellation: Cancellation? = nil,
                              reply: @escaping @Sendable (CacheAnswer) -> Void) {
        let request = prepared.request
        let validating = conditional ? Self.revalidating(fallback, for: request) : nil
        var upstreamRequest = upstreamRequest(for: request, .whole(revalidating: validating))
        if let cancellation {
            // The leader's caller gave up: abort the transfer unless others wait on it. Removing
            // the flight under the lock means nobody can join it after that decision.
            let transfer = Cancellation()
            upstreamRequest.cancellation = transfer
            cancellation.onCancel { [self] in
                let abort = flight.map(flights.abandon) ?? true
                if abort { transfer.cancel() }
                reply(.failed(Self.cancelledError))
            }
        }
        let sentAt = clock.now()
        exchange(upstreamRequest, for: request) { [self] result in
            // Completions arrive on an upstream driver's thread, which runs other transfers too;
            // a large body's checks (UTF-8, JSON) and copies happen elsewhere, so they are not
            // held up behind them.
            if case .success(let response) = result, response.body.count > Self.offloadBodyBytes {
                DispatchQueue.global(qos: .userInitiated).async { [self] in
                    received(result, prepared: prepared, outcome: outcome, fallback: fallback, flight: flight,
                             validating: validating, sentAt: sentAt, reply: reply)
                }
            } else {
                received(result, prepared: prepared, outcome: outcome, fallback: fallback, flight: flight,
                         validating: validating, sentAt: sentAt, reply: reply)
            }
        }
    }

    /// What the engine asks the upstream for, besides the caller's own request.
    enum UpstreamAsk {
        /// The representation; with an entry, conditionally on its validators (RFC 9111 §4.3.1).
        case whole(revalidating: StoredEntry?)
        /// A byte range of a GET (RFC 9110 §14.2), the caller's Range and If-Range replaced by these.
        case range(String?, ifRange: String?)
    }

    /// The one way a request goes upstream: the caller's request with what `ask` adds, this
    /// instance's CDN-Loop token, the engine's limits, and how redirects are treated.
    func upstreamRequest(for request: FetchRequest, _ ask: UpstreamAsk) -> UpstreamRequest {
        var headers = request.headers
        var method = request.method
        var body = request.body
        switch ask {
        case .whole(let validating):
            if let etag = validating?.etag { headers.append(HeaderField("If-None-Match", etag)) }
            if let lastModified = validating?.lastModified { headers.append(HeaderField("If-Modified-Since", lastModified)) }
        case .range(let range, let ifRange):
            headers.removeAll { $0.name.caseInsensitiveEquals("range") || $0.name.caseInsensitiveEquals("if-range") }
            if let range { headers.append(HeaderField("Range", range)) }
            if let ifRange { headers.append(HeaderField("If-Range", ifRange)) }
            method = .get
            body = nil
        }
        // RFC 8586: say this instance handled the request, so that it can tell when the request
        // comes back to it (a named upstream pointing at Larder, directly or through other caches).
        if let token = limits.loopToken { headers.append(HeaderField("CDN-Loop", token)) }
        var upstreamRequest = UpstreamRequest(method: method, url: request.url, headers: headers, body: body,
                                              timeoutMs: request.timeoutMs, maxBodyBytes: limits.maxUpstreamBodyBytes)
        // /fetch follows redirects for its caller; the proxy passes them on.
        upstreamRequest.followRedirects = !request.shared
        upstreamRequest.originBoundHeaders = request.originBoundHeaders
        upstreamRequest.progress = request.progress
        // A resumed download sends a Range of its own, which would replace the one asked for.
        if case .whole = ask { upstreamRequest.resumable = request.resumable }
        return upstreamRequest
    }

    /// RFC 9111 §4.3.1: the stored entry to revalidate with its validators instead of
    /// re-downloading it; nil when there is none, or the caller sent its own conditions (then
    /// the answer is theirs).
    static func revalidating(_ fallback: StoredEntry?, for request: FetchRequest) -> StoredEntry? {
        guard let fallback, request.cache.policy == .useProtocol,
              request.headers.values("if-none-match").isEmpty, request.headers.values("if-modified-since").isEmpty,
              fallback.etag != nil || fallback.lastModified != nil else { return nil }
        return fallback
    }

    /// Sends `upstreamRequest`, counting the exchange under `request`'s upstream (a named one,
    /// or "fetch" for a URL) for the metrics.
    func exchange(_ upstreamRequest: UpstreamRequest, for request: FetchRequest,
                  completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        let namespace = request.cache.namespace
        let upstreamName = namespace.hasPrefix(FetchRequest.reservedNamespacePrefix)
            ? String(namespace.dropFirst(FetchRequest.reservedNamespacePrefix.count)) : "fetch"
        upstream.send(upstreamRequest) { [traffic] result in
            switch result {
            case .success(let response):
                traffic.exchanged(upstream: upstreamName, status: response.status, errorCode: nil,
                                  seconds: response.responseTime - response.requestTime)
            case .failure(let error):
                traffic.exchanged(upstream: upstreamName, status: nil, errorCode: error.code.rawValue, seconds: 0)
            }
            completion(result)
        }
    }

    /// Bodies larger than this are handled off the upstream's thread.
    static let offloadBodyBytes = 256 << 10

    private func received(_ result: Result<UpstreamResponse, LarderError>, prepared: PreparedFetch, outcome: CacheOutcome,
                          fallback: StoredEntry?, flight: FlightToken?, validating: StoredEntry?, sentAt: Double,
                          reply: @escaping @Sendable (CacheAnswer) -> Void) {
        let request = prepared.request
        if case .success(let response) = result, response.status == 304, let validating {
            return revalidated(prepared, entry: validating, notModified: response, sentAt: sentAt, flight: flight,
                               reply: reply)
        }
        switch result {
        case .failure(let error):
            let answer = staleOnError(fallback, request: request, error: error.code.rawValue) ?? .failed(error)
            land(flight, with: .failed(error)) { reply(answer) }
        case .success(let response):
            if CacheRules.isServerError(response.status),
               let stale = staleOnError(fallback, request: request,
                                        error: "upstream_status_\(response.status)") {
                land(flight, with: .failed(LarderError(.upstreamError, "upstream answered \(response.status)"))) { reply(stale) }
                return
            }
            complete(prepared, outcome: outcome, response: response, sentAt: sentAt,
                     flight: flight, reply: reply)
        }
    }

    /// A 304 confirmed `entry`: update its headers and freshness from the 304 (RFC 9111
    /// §4.3.4), store it, and serve the stored body. If the entry vanished meanwhile (purged,
    /// damaged), there is no body to serve: ask again without conditions.
    private func revalidated(_ prepared: PreparedFetch, entry: StoredEntry, notModified: UpstreamResponse, sentAt: Double,
                             flight: FlightToken?, reply: @escaping @Sendable (CacheAnswer) -> Void) {
        let options = prepared.request.cache
        guard let current = store.lookup(entry.primaryKey).first(where: { $0.key == entry.key }).flatMap({ withBody($0, forSending: false) }),
              current.freshness.version == options.version else {
            logger.debug("304 for an entry that is gone; fetching in full", metadata: ["key": "\(entry.key)"])
            return sendUpstream(prepared, outcome: .miss, fallback: nil, flight: flight,
                                conditional: false, reply: reply)
        }
        if let validation = prepared.request.validation, let failure = validation.failure(status: current.status, body: current.body) {
            return land(flight, with: .notShareable) { reply(.failed(LarderError(.validationFailed, failure))) }
        }
        let now = clock.now()
        let headers = ResponseHeaders.updated(current.headerFields, with: notModified.headers)
        let upstreamMs = (notModified.responseTime - notModified.requestTime) * 1000
        let decision = CacheRules.store(storeInputs(prepared.request, partitioned: prepared.derived.partitioned,
                                                    status: current.status, headers: headers, bodySize: current.body.count,
                                                    sentAt: sentAt, arrivedAt: now))
        guard case .store(let stored) = decision else {
            // The origin now forbids storing: serve what it confirmed, keep nothing.
            let report = CacheReport(outcome: .revalidated, key: entry.primaryKey, age: 0, ttl: nil, version: options.version, stored: false)
            let answer = CacheAnswer.served(ServedResponse(
                status: current.status, headersJSON: ResponseHeaders.renderJSON(headers, dropCookies: true), headers: headers,
                body: current.body, bodyKind: current.bodyKind, report: report, upstreamMs: upstreamMs,
                etag: headers.first(named: "etag"), lastModified: headers.first(named: "last-modified")))
            return land(flight, with: .notShareable) { reply(answer) }
        }
        var update = current
        update.headersJSON = ResponseHeaders.renderJSON(CacheRules.storableHeaders(headers, withholding: stored.withheldFields),
                                                        dropCookies: true)
        update.freshness = stored.entry(storedAt: now, version: options.version)
        update.etag = headers.first(named: "etag")
        update.lastModified = headers.first(named: "last-modified")
        let refreshed = update
        store.save(refreshed) { [self] saved in
            let report = CacheReport(outcome: .revalidated, key: entry.primaryKey, age: 0,
                                     ttl: saved ? refreshed.freshness.remaining(now: now, ttl: options.ttl) : nil,
                                     version: options.version, stored: saved)
            // This caller gets what the origin just confirmed, Set-Cookie included; what others
            // get later is the stored form.
            let answer = CacheAnswer.served(ServedResponse(
                status: refreshed.status, headersJSON: ResponseHeaders.renderJSON(headers, dropCookies: false), headers: headers, body: refreshed.body,
                bodyKind: refreshed.bodyKind, report: report, upstreamMs: upstreamMs, etag: refreshed.etag,
                lastModified: refreshed.lastModified))
            land(flight, with: saved ? .stored(refreshed) : .notShareable) { reply(answer) }
        }
    }

    /// The stale entry as the answer to a failed upstream request, when stale-if-error allows.
    private func staleOnError(_ entry: StoredEntry?, request: FetchRequest, error: String) -> CacheAnswer? {
        let now = clock.now()
        let options = request.cache
        guard let entry else { return nil }
        var byPolicy = false
        if !CacheRules.mayServeStaleOnError(entry.freshness, now: now, ttl: options.ttl, window: options.staleIfError,
                                            requested: request.directives.staleIfError) {
            // The deployment's own allowance (`--stale-on-error`, RFC 9111 §4.2.4: a cache
            // disconnected from the origin may serve stale), within the same prohibitions.
            let window = options.staleOnError ?? limits.staleOnError
            guard window > 0, CacheRules.mayServeStaleOnError(entry.freshness, now: now, ttl: options.ttl, window: window) else {
                return nil
            }
            byPolicy = true
        }
        store.recordHit(entry.key, at: now)
        guard case .served(var served) = serve(entry, outcome: .stale, options: options, now: now, upstreamError: error) else { return nil }
        served.report.staleOnErrorPolicy = byPolicy
        return .served(served)
    }

    /// Refreshes `prepared`'s entry once, however many requests ask meanwhile: a refresh is a
    /// flight, and a flight already under way for the key is the refresh.
    private func refreshInBackground(_ prepared: PreparedFetch) {
        let key = FlightKey(key: prepared.derived.key, version: prepared.request.cache.version)
        guard let flight = flights.lead(key) else { return }
        let fallback = variant(for: prepared)
        sendUpstream(prepared, outcome: .miss, fallback: fallback, flight: flight) { _ in }
    }

    func complete(_ prepared: PreparedFetch, outcome: CacheOutcome, response: UpstreamResponse, sentAt: Double,
                          flight: FlightToken?, reply: @escaping @Sendable (CacheAnswer) -> Void) {
        let request = prepared.request
        let derived = prepared.derived
        let options = request.cache
        // Ages are measured on the engine's clock (injected), durations on the upstream's.
        let arrivedAt = clock.now()
        let upstreamMs = (response.responseTime - response.requestTime) * 1000
        // The proxy passes bodies on as they are: only the /fetch envelope needs the kind.
        let kind = request.shared ? BodyKind.binary
            : BodyKind.classify(contentType: response.headers.first(named: "content-type"), body: response.body)
        let decision = CacheRules.store(storeInputs(request, partitioned: derived.partitioned, status: response.status,
                                                    headers: response.headers, bodySize: response.body.count,
                                                    sentAt: sentAt, arrivedAt: arrivedAt))
        // The /fetch envelope shows the headers as JSON; the proxy sends the fields as they are.
        let liveHeaders = request.shared ? [] : ResponseHeaders.renderJSON(response.headers, dropCookies: false)
        if let validation = request.validation, let failure = validation.failure(status: response.status, body: response.body) {
            // A failed validation is a failed request, and nothing of it is stored. What the
            // unsafe method changed at the origin still invalidates (RFC 9111 §4.4).
            let error = CacheAnswer.failed(LarderError(.validationFailed, failure))
            let stale = invalidatedURLs(request: request, response: response)
            guard !stale.isEmpty else { return land(flight, with: .notShareable) { reply(error) } }
            return store.invalidate(urlKeys: stale) { [self] _ in land(flight, with: .notShareable) { reply(error) } }
        }
        switch decision {
        case .refuse(let reason):
            logger.debug("not stored", metadata: ["key": "\(derived.key)", "rule": "\(reason.rawValue)"])
            let report = CacheReport(outcome: outcome, key: derived.key, age: 0, ttl: nil, version: options.version,
                                     stored: false, notStoredBecause: outcome == .bypass ? nil : reason)
            let served = ServedResponse(status: response.status, headersJSON: liveHeaders, headers: response.headers,
                                        body: response.body, bodyKind: kind, report: report, upstreamMs: upstreamMs,
                                        etag: response.headers.first(named: "etag"),
                                        lastModified: response.headers.first(named: "last-modified"))
            let stale = invalidatedURLs(request: request, response: response)
            guard !stale.isEmpty else {
                return land(flight, with: .notShareable) { reply(.served(served)) }
            }
            // The answer waits for the invalidation, so the caller's next read sees it.
            store.invalidate(urlKeys: stale) { [self] removed in
                if !removed.isEmpty { logger.debug("invalidated", metadata: ["entries": "\(removed.count)"]) }
                guard let asGet = postResponseAsGetEntry(request: request, response: response, kind: kind, arrivedAt: arrivedAt, sentAt: sentAt) else {
                    return land(flight, with: .notShareable) { reply(.served(served)) }
                }
                store.save(asGet) { [self] _ in land(flight, with: .notShareable) { reply(.served(served)) } }
            }
        case .store(let stored):
            let entry = self.entry(storing: response, for: request, derived: derived, kind: kind, stored: stored, at: arrivedAt)
            let freshness = entry.freshness
            store.save(entry) { [self] saved in
                let report = CacheReport(outcome: outcome, key: derived.key, age: freshness.age(now: arrivedAt, ttl: options.ttl),
                                         ttl: saved ? freshness.remaining(now: arrivedAt, ttl: options.ttl) : nil,
                                         version: options.version, stored: saved)
                let answer = CacheAnswer.served(ServedResponse(
                    status: response.status, headersJSON: liveHeaders, headers: response.headers, body: response.body,
                    bodyKind: kind, report: report, upstreamMs: upstreamMs, etag: entry.etag, lastModified: entry.lastModified))
                land(flight, with: saved ? .stored(entry) : .notShareable) { reply(answer) }
            }
        }
    }

    /// A shared cache's POST response that may answer later GETs (RFC 9110 §9.3.3), as the
    /// entry for that GET; nil when it may not, or when it varies (its variant would be keyed
    /// by the POST's fields).
    private func postResponseAsGetEntry(request: FetchRequest, response: UpstreamResponse, kind: BodyKind,
                                        arrivedAt: Double, sentAt: Double) -> StoredEntry? {
        guard request.shared, request.method == .post, Vary.names(in: response.headers)?.isEmpty == true,
              let location = response.headers.first(named: "content-location"),
              let target = request.url.resolving(location),
              CacheRules.postResponseAnswersGet(status: response.status, headers: response.headers,
                                                contentLocationIsTarget: target.keyString() == request.url.keyString(),
                                                receivedAt: arrivedAt)
        else { return nil }
        var get = request
        get.method = .get
        get.body = nil
        let derived = keys.derive(for: get)
        var inputs = storeInputs(get, partitioned: derived.partitioned, status: response.status, headers: response.headers,
                                 bodySize: response.body.count, sentAt: sentAt, arrivedAt: arrivedAt)
        // The POST's ttl is not the GET's: the response's own freshness decides (it has some).
        inputs.ttl = nil
        guard case .store(let stored) = CacheRules.store(inputs) else { return nil }
        return entry(storing: response, for: get, derived: derived, kind: kind, stored: stored, at: arrivedAt)
    }

    /// What `CacheRules.store` is asked about a response to `request`, everywhere the engine
    /// stores; a caller changes only what differs in its case, and says why.
    func storeInputs(_ request: FetchRequest, partitioned: Bool, status: Int, headers: [HeaderField], bodySize: Int,
                     sentAt: Double, arrivedAt: Double) -> StoreInputs {
        StoreInputs(policy: request.cache.policy, method: request.method, ttl: request.cache.ttl, partitioned: partitioned,
                    status: status, headers: headers, bodySize: bodySize, maxBodySize: limits.maxStoredBodyBytes,
                    requestTime: sentAt, responseTime: arrivedAt, directives: request.directives,
                    sharedWithCredentials: request.shared && request.hasCredentials, shared: request.shared)
    }

    /// The entry that keeps `response` for `request` under `derived`, stored at `time`: a
    /// varying response is one variant among others under the key (§4.1); fields the
    /// response withholds (`no-cache="…"`, `private="…"`) and cookies are left out.
    func entry(storing response: UpstreamResponse, for request: FetchRequest, derived: CacheKeyBuilder.Derived,
                       kind: BodyKind, stored: StoredFreshness, at time: Double) -> StoredEntry {
        let varyNames = Vary.names(in: response.headers) ?? []
        let fingerprint = varyNames.isEmpty ? nil : keys.variantFingerprint(names: varyNames, request: request.headers)
        let rowKey = fingerprint.map { CacheKey(hex: derived.key.hex + "." + $0.prefix(32)) } ?? derived.key
        let headers = ResponseHeaders.rendered(CacheRules.storableHeaders(response.headers, withholding: stored.withheldFields),
                                               dropCookies: true)
        // A URL whose query is already in key order is its own key string: built and redacted once.
        let url = limits.redaction.apply(request.url.absoluteString)
        let urlKey = request.url.isInKeyOrder ? url : limits.redaction.apply(request.url.keyString())
        var entry = StoredEntry(
            key: rowKey, primaryKey: derived.key, varyNames: varyNames, variantFingerprint: fingerprint,
            namespace: request.cache.namespace, method: request.method,
            url: url, urlKey: urlKey,
            status: response.status,
            headersJSON: headers.json,
            body: response.body, bodyKind: kind, freshness: stored.entry(storedAt: time, version: request.cache.version),
            sensitiveFingerprint: derived.sensitiveFingerprint,
            etag: response.headers.first(named: "etag"),
            lastModified: response.headers.first(named: "last-modified"), headerFields: headers.fields)
        entry.tags = CacheTags.merged(request.cache.tags, from: response.headers, headerNames: limits.tagHeaders)
        return entry
    }

    /// RFC 9111 §4.4: a non-error response to an unsafe method invalidates the stored
    /// responses for the target URI, and for Location and Content-Location when they are on
    /// the same origin (another origin's entries are not this request's to invalidate).
    /// (As stored: with the redacted query values.)
    func invalidatedURLs(request: FetchRequest, response: UpstreamResponse) -> [String] {
        guard !request.method.isSafe, (200...399).contains(response.status) else { return [] }
        var urls = [request.url.keyString()]
        for name in ["location", "content-location"] {
            if let reference = response.headers.values(name).first, let target = request.url.resolving(reference),
               target.isSameOrigin(as: request.url) {
                urls.append(target.keyString())
            }
        }
        return urls.map(limits.redaction.apply)
    }

    // MARK: - Coalescing

    /// How the leading request of a flight ended, for the requests waiting on it.
    private enum Landing {
        case stored(StoredEntry)   // shareable: every waiter gets it
        case notShareable          // private, not storable, or not stored: each waiter fetches on its own
        case failed(LarderError)   // the upstream failed: every waiter gets its stale entry if allowed, else the error
    }

    /// Ends `flight`: removes it, answers the leading request (`answerLeader`), then wakes the
    /// requests that waited on it. Called after the store committed, and the flight is removed
    /// before anyone is answered, so a request sent after an answer never joins a finished flight.
    private func land(_ flight: FlightToken?, with landing: Landing, answerLeader: () -> Void) {
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
                waiter.reply(staleOnError(fallback, request: waiter.prepared.request, error: error.code.rawValue)
                             ?? .failed(error))
            case .stored(let entry) where acceptsShared(entry, waiter: waiter.prepared, now: now):
                waiter.reply(serve(entry, outcome: .hit, options: options, now: now, coalesced: true))
            case .stored, .notShareable:
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

    /// The answer the cache alone can give `prepared` right now (a usable stored entry, or a
    /// HEAD from a stored GET), without ever going upstream; nil otherwise. For callers that
    /// answer hits before queueing the rest (batches).
    public func cachedAnswer(for prepared: PreparedFetch) -> CacheAnswer? {
        let request = prepared.request
        guard request.cache.policy != .noStore, request.cache.policy != .reload,
              CacheRules.isCacheable(method: request.method, ttl: request.cache.ttl) else { return nil }
        if request.method == .head { return storedGet(for: request) }
        var probe = request
        if request.cache.policy == .useProtocol {
            probe.directives.onlyIfCached = true
        } else {
            probe.cache.policy = .cacheOnly
        }
        let answer = fetch(PreparedFetch(request: probe, derived: prepared.derived), mayCoalesce: false, cancellation: nil) { _ in }
        guard let answer, case .served = answer else { return nil }
        traffic.count(answer, namespace: request.cache.namespace)
        return answer
    }

    /// Whether a stored entry passes the request's validators (always, without any).
    private static func satisfies(_ entry: StoredEntry, _ request: FetchRequest) -> Bool {
        guard let validation = request.validation else { return true }
        return validation.failure(status: entry.status, body: entry.body) == nil
    }

    /// RFC 9111 §4.3.5: a HEAD answered from a stored GET of the same resource and key, its
    /// body dropped unless `keepingBody` (the proxy's server sends only the header section of
    /// a HEAD response, with the body's length as Content-Length: RFC 9110 §8.6). Only looks:
    /// never sends a GET upstream for a HEAD. Nil when nothing usable is stored (or the policy
    /// does not read the cache).
    public func storedGet(for head: FetchRequest, keepingBody: Bool = false) -> CacheAnswer? {
        guard head.cache.policy != .noStore, head.cache.policy != .reload else { return nil }
        var get = head
        get.method = .get
        if head.cache.policy == .useProtocol {
            get.directives.onlyIfCached = true
        } else {
            get.cache.policy = .cacheOnly
        }
        guard case .served(var served)? = fetch(prepare(get), reply: { _ in }) else { return nil }
        if keepingBody { return .served(served) }
        served.body = []
        served.openedBody = nil
        served.bodyKind = .text
        return .served(served)
    }

    /// The stored response that may answer `prepared`: of the variants under its key, the one
    /// whose nominated request fields match (RFC 9111 §4.1).
    private func variant(for prepared: PreparedFetch) -> StoredEntry? {
        var hasPart = false
        return variant(for: prepared, hasPart: &hasPart)
    }

    /// As `variant(for:)`, and says whether a part (a stored 206) is among the rows.
    private func variant(for prepared: PreparedFetch, hasPart: inout Bool) -> StoredEntry? {
        let variants = store.lookup(prepared.derived.key)
        hasPart = variants.count > 1 || variants.first?.status == 206 ? variants.contains { $0.status == 206 } : false
        let chosen: StoredEntry?
        if variants.count == 1, variants[0].varyNames.isEmpty, variants[0].status != 206 {
            chosen = variants[0]
        } else {
            // A stored part (206, RFC 9111 §3.4) is never a whole response: RangeFetcher serves it.
            chosen = variants.first { $0.status != 206 && $0.matches(prepared.request.headers, keys: keys) }
        }
        return chosen.flatMap { withBody($0, forSending: prepared.request.shared) }
    }

    /// `entry` with its body at hand: a body the store keeps in a file is opened for the proxy
    /// (which sends it as is) and read for everything else. Nil when the file is gone or
    /// damaged: as if nothing were stored.
    private func withBody(_ entry: StoredEntry, forSending: Bool) -> StoredEntry? {
        guard entry.bodyFile != nil else { return entry }
        var resolved = entry
        if forSending {
            guard let opened = store.openBody(of: entry) else { return nil }
            resolved.openedBody = opened
        } else {
            guard let body = store.readBody(of: entry) else { return nil }
            resolved.body = body
            resolved.bodyFile = nil
        }
        return resolved
    }

    /// Partial content (RFC 9111 §3.4): range requests no stored whole response answers, and
    /// plain GETs that find only a stored part.
    public var ranges: RangeFetcher { RangeFetcher(engine: self, rangeFetchOver: limits.rangeFetchOver) }

    /// Requests that joined another request's upstream fetch instead of sending their own.
    public var coalescedCount: Int { flights.joinedCount }

}

/// Passes on the first answer only: a cancelled request is answered at once, and whatever its
/// work produces later is dropped.
final class ReplyOnce: Sendable {
    private let reply = CallbackSlot<CacheAnswer>()

    init(_ reply: @escaping @Sendable (CacheAnswer) -> Void) { self.reply.set(reply) }

    /// Calls the reply the first time, and lets go of it: whatever still holds this (a
    /// cancellation handler, a finished transfer) must not keep the caller's work alive.
    @Sendable func callAsFunction(_ answer: CacheAnswer) {
        reply.take()?(answer)
    }
}
