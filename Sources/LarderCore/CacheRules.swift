// The decisions of the cache, as pure functions of metadata and `now` (seconds since 1970).
// Nothing here reads a clock or touches storage; the engine acts on what these return.

/// What the engine does with a request before any I/O.
public enum LookupDecision: Equatable, Sendable {
    /// Serve the stored entry; `fresh` false means it is past its freshness (outcome "stale").
    case serve(fresh: Bool)
    /// Serve the stale entry now and refresh it in the background (stale-while-revalidate).
    case serveStaleAndRefresh
    /// Go upstream. `readCache` false when the policy skipped the cache (no-store, reload).
    case fetch
    /// `cache-only` and nothing usable is stored.
    case failNotCached
}

/// Why a response was not stored. Each rule has its own name so logs can say which fired.
public enum StoreRefusal: String, Sendable, Equatable {
    case policyNoStore = "policy_no_store" // cache.policy = no-store
    case requestNoStore = "request_no_store" // the caller sent Cache-Control: no-store
    case methodNotCacheable = "method_not_cacheable" // PUT, PATCH, DELETE; POST without ttl
    case statusNotCacheable = "status_not_cacheable" // only 200–299 are stored
    case responseNoStore = "response_no_store" // Cache-Control: no-store, even with ttl
    case responsePrivate = "response_private" // private response, no per-caller partition
    case authorizedRequest = "authorized_request" // shared cache, Authorization or Cookie, response not marked shareable
    case responseVaries = "response_varies" // Vary: * (never matches)
    case objectTooLarge = "object_too_large" // over --max-object-bytes: served, not stored
    case storedSuccessKept = "stored_success_kept" // a 5xx kept by a negative lifetime would replace a stored success
}

public enum StoreDecision: Equatable, Sendable {
    /// Store with this freshness lifetime in seconds (0 = stale at once, still usable by
    /// cache-else-load, cache-only and a later `ttl`).
    case store(StoredFreshness)
    case refuse(StoreRefusal)
}

/// What a lookup needs to know about a stored entry.
public struct EntryFreshness: Sendable, Equatable {
    public var storedAt: Double
    public var freshnessLifetime: Double
    public var version: Int64
    /// `stale-while-revalidate` from the response (RFC 5861 §3), seconds; 0 when absent.
    public var staleWhileRevalidate: Double
    /// `stale-if-error` from the response (RFC 5861 §4), seconds; 0 when absent.
    public var staleIfError: Double
    /// `must-revalidate` or `proxy-revalidate` (RFC 9111 §5.2.2.2, §5.2.2.8): never served stale
    /// without the origin's say-so.
    public var mustRevalidate: Bool
    /// The response's age when it was stored (RFC 9111 §4.2.3 corrected_initial_age), seconds.
    public var initialAge: Double
    /// The caller's `cache.ttl` it was stored under, seconds; nil when stored under the
    /// response's own freshness. Only the admin side reads it (`expiresAt`: listings, the
    /// `expired` filter, retention): a lookup judges freshness by its own request's ttl.
    public var storedTTL: Double?
    /// Whether a caller's `ttl` judges this entry's freshness: for 2xx answers only. An error or
    /// a redirect is stored under its own freshness or a negative-caching lifetime, and a
    /// caller's ttl (an hour for the object it asks for) never keeps a 404 or a 502 that long.
    /// Not stored: the entry's status decides it (StoredEntry).
    public var judgedByCallerTTL = true
    /// When a soft purge marked it stale (Fastly's soft purge, Varnish's `purge.soft`): from then
    /// on it is stale whatever its lifetime or a caller's ttl says, and its stale windows
    /// (stale-while-revalidate, stale-if-error) count from then. Revalidated or stored again, an
    /// entry has none.
    public var invalidatedAt: Double?

    public init(
        storedAt: Double, freshnessLifetime: Double, version: Int64, staleWhileRevalidate: Double = 0,
        staleIfError: Double = 0, mustRevalidate: Bool = false, initialAge: Double = 0, storedTTL: Double? = nil,
        invalidatedAt: Double? = nil
    ) {
        self.invalidatedAt = invalidatedAt
        self.storedAt = storedAt
        self.freshnessLifetime = freshnessLifetime
        self.version = version
        self.staleWhileRevalidate = staleWhileRevalidate
        self.staleIfError = staleIfError
        self.mustRevalidate = mustRevalidate
        self.initialAge = initialAge
        self.storedTTL = storedTTL
    }

    /// When the entry stops being fresh under the lifetime it was stored under: the caller's
    /// ttl from when it was stored (what `isFresh` measures a ttl by), else the response's own
    /// lifetime less the age it arrived with. A version never ends an entry by time: it only
    /// decides which requests may use it.
    public var expiresAt: Double {
        let end = storedTTL.map { storedAt + $0 } ?? storedAt - initialAge + freshnessLifetime
        return invalidatedAt.map { min($0, end) } ?? end
    }
    /// When its longest stale window (stale-while-revalidate, stale-if-error) ends.
    public var staleUntil: Double { expiresAt + max(staleWhileRevalidate, staleIfError) }

    /// Seconds since the entry was stored (never negative).
    public func residentTime(now: Double) -> Double { max(0, now - storedAt) }

    /// The age that freshness is judged by: with a caller's `ttl`, the time since it was stored
    /// (YTKNetwork's cacheTimeInSeconds); otherwise HTTP's current_age (RFC 9111 §4.2.3),
    /// which also counts the age the response already had when it arrived.
    public func age(now: Double, ttl: Double?) -> Double {
        callerTTL(ttl) == nil ? initialAge + residentTime(now: now) : residentTime(now: now)
    }

    /// Seconds of freshness left under `ttl` when given, else the stored lifetime.
    public func remaining(now: Double, ttl: Double?) -> Double {
        if let invalidatedAt, now >= invalidatedAt { return 0 }
        return max(0, (callerTTL(ttl) ?? freshnessLifetime) - age(now: now, ttl: ttl))
    }

    public func isFresh(now: Double, ttl: Double?) -> Bool {
        if let invalidatedAt, now >= invalidatedAt { return false }
        return age(now: now, ttl: ttl) < (callerTTL(ttl) ?? freshnessLifetime)
    }

    /// Seconds past freshness (0 while fresh); after a soft purge, at least the time since it.
    public func staleness(now: Double, ttl: Double?) -> Double {
        let byLifetime = max(0, age(now: now, ttl: ttl) - (callerTTL(ttl) ?? freshnessLifetime))
        guard let invalidatedAt else { return byLifetime }
        return max(byLifetime, now - invalidatedAt)
    }

    /// Whether a caller's ttl judges an entry of `status` (`judgedByCallerTTL`): 2xx only.
    public static func callerTTLJudges(status: Int) -> Bool { (200...299).contains(status) }

    /// The caller's ttl when it judges this entry (`judgedByCallerTTL`).
    @inline(__always) private func callerTTL(_ ttl: Double?) -> Double? { judgedByCallerTTL ? ttl : nil }

    /// Marks it stale at `time` (a soft purge); an earlier mark stays.
    public mutating func markStale(at time: Double) {
        invalidatedAt = min(invalidatedAt ?? time, time)
    }
}

/// Caller-chosen windows for serving stale entries; nil = the response's directive.
public struct StaleWindows: Sendable, Equatable {
    public var whileRevalidate: Double?
    public var ifError: Double?
    public init(whileRevalidate: Double? = nil, ifError: Double? = nil) {
        self.whileRevalidate = whileRevalidate
        self.ifError = ifError
    }
}

/// How a response is stored: its freshness and the stale-serving allowances it grants.
public struct StoredFreshness: Sendable, Equatable {
    public var lifetime: Double
    public var staleWhileRevalidate: Double = 0
    public var staleIfError: Double = 0
    public var mustRevalidate = false
    public var initialAge: Double = 0
    /// The caller's ttl the response is stored under (`StoreInputs.ttl`); nil: its own lifetime.
    public var ttl: Double?
    /// Fields named by `no-cache="…"` / `private="…"`, lower-cased: kept out of the store.
    public var withheldFields: Set<String> = []
    public init(
        lifetime: Double, staleWhileRevalidate: Double = 0, staleIfError: Double = 0, mustRevalidate: Bool = false,
        initialAge: Double = 0, ttl: Double? = nil, withheldFields: Set<String> = []
    ) {
        self.lifetime = lifetime
        self.ttl = ttl
        self.staleWhileRevalidate = staleWhileRevalidate
        self.staleIfError = staleIfError
        self.mustRevalidate = mustRevalidate
        self.initialAge = initialAge
        self.withheldFields = withheldFields
    }

    /// The entry's freshness, stored at `storedAt` under `version`.
    public func entry(storedAt: Double, version: Int64) -> EntryFreshness {
        EntryFreshness(
            storedAt: storedAt, freshnessLifetime: lifetime, version: version, staleWhileRevalidate: staleWhileRevalidate,
            staleIfError: staleIfError, mustRevalidate: mustRevalidate, initialAge: initialAge, storedTTL: ttl)
    }
}

public enum CacheRules {
    /// GET and HEAD are cacheable; POST only when the caller gives a ttl (YTKNetwork caches
    /// POST by time); PUT, PATCH and DELETE never.
    public static func isCacheable(method: HTTPMethod, ttl: Double?) -> Bool {
        switch method {
        case .get, .head: true
        case .post: ttl != nil
        default: false
        }
    }

    /// Whether to read the cache, and what to do with what was found.
    public static func lookup(
        policy: CachePolicy, method: HTTPMethod, ttl: Double?, version: Int64,
        entry: EntryFreshness?, now: Double, stale: StaleWindows = StaleWindows(),
        directives: RequestDirectives = RequestDirectives()
    ) -> LookupDecision {
        switch policy {
        case .noStore, .reload:
            return .fetch
        case .useProtocol, .cacheElseLoad, .cacheOnly:
            break
        }
        let cacheOnly = policy == .cacheOnly || (policy == .useProtocol && directives.onlyIfCached)
        guard isCacheable(method: method, ttl: ttl), let entry, entry.version == version else {
            // An entry under another version is never served (and the next store replaces it).
            return cacheOnly ? .failNotCached : .fetch
        }
        let fresh = entry.isFresh(now: now, ttl: ttl)
        switch policy {
        case .useProtocol:
            // The caller's request directives (§5.2.1) narrow what is acceptable.
            if directives.noCache { return directives.onlyIfCached ? .failNotCached : .fetch }
            let age = entry.age(now: now, ttl: ttl)
            let acceptableAge = directives.maxAge.map { age <= $0 } ?? true
            let freshEnough = directives.minFresh.map { entry.remaining(now: now, ttl: ttl) >= $0 } ?? true
            if fresh, acceptableAge, freshEnough { return .serve(fresh: true) }
            // §5.2.1.2 max-stale, unless the origin said must-revalidate (§5.2.2.2).
            if !fresh, acceptableAge, !entry.mustRevalidate, let maxStale = directives.maxStale,
                entry.staleness(now: now, ttl: ttl) <= maxStale
            {
                return .serve(fresh: false)
            }
            if directives.onlyIfCached { return .failNotCached }
            guard acceptableAge, freshEnough else { return .fetch }
            // RFC 5861 §3: within the stale-while-revalidate window, answer with the stale
            // entry and refresh it in the background — unless the origin said must-revalidate.
            let window = stale.whileRevalidate ?? entry.staleWhileRevalidate
            if !entry.mustRevalidate, window > 0, entry.staleness(now: now, ttl: ttl) < window {
                return .serveStaleAndRefresh
            }
            return .fetch
        case .cacheElseLoad, .cacheOnly:
            return .serve(fresh: fresh)
        case .noStore, .reload:
            return .fetch
        }
    }

    /// RFC 5861 §4: whether a stale entry may answer instead of an upstream failure
    /// (unreachable, timeout, or a 500, 502, 503 or 504 status). The window is the caller's
    /// (`cache.staleIfError`) or else the response's directive; a request's own
    /// `Cache-Control: stale-if-error` (`requested`) may widen it (§4: either may allow it).
    public static func mayServeStaleOnError(
        _ entry: EntryFreshness, now: Double, ttl: Double?, window: Double?,
        requested: Double? = nil
    ) -> Bool {
        guard !entry.mustRevalidate else { return false }
        let allowed = max(window ?? entry.staleIfError, requested ?? 0)
        return allowed > 0 && entry.staleness(now: now, ttl: ttl) < allowed
    }

    /// The upstream statuses that count as errors for stale-if-error (RFC 5861 §4).
    public static func isServerError(_ status: Int) -> Bool {
        [500, 502, 503, 504].contains(status)
    }

    /// Statuses whose caching semantics Larder implements (for must-understand, §5.2.2.3).
    public static let understoodStatuses: Set<Int> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

    /// Statuses a cache may store with heuristic freshness (RFC 9110 §15.1).
    public static let heuristicallyCacheable: Set<Int> = [200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501]

    /// Heuristic freshness is this fraction of the time since Last-Modified (RFC 9111 §4.2.2)…
    public static let heuristicFraction = 0.1
    /// …capped at one day.
    public static let heuristicCap: Double = 86_400

    /// Whether and how to store a response (RFC 9111 §3, §4.2).
    public static func store(_ inputs: StoreInputs) -> StoreDecision {
        let policy = inputs.policy
        let method = inputs.method
        let ttl = inputs.ttl
        let status = inputs.status
        let headers = inputs.headers
        let directives = inputs.directives
        let shared = inputs.shared
        if policy == .noStore { return .refuse(.policyNoStore) }
        if directives.noStore { return .refuse(.requestNoStore) }
        guard isCacheable(method: method, ttl: ttl) else { return .refuse(.methodNotCacheable) }
        let cacheControl = effectiveCacheControl(headers, targeted: inputs.targetedFields)
        // §5.2.2.3 must-understand: store only if the status code's caching rules are
        // understood — and then no-store, sent for caches that do not, is overridden.
        let mustUnderstand = cacheControl.has("must-understand")
        if mustUnderstand, !understoodStatuses.contains(status) { return .refuse(.statusNotCacheable) }
        // §3.5: a shared cache stores a response to a request with Authorization only when the
        // response says it may be shared. A Cookie is treated alike: a response to it may be
        // that user's page (a 2xx without freshness would otherwise be stored and, through
        // max-stale, served to anyone).
        if inputs.sharedWithCredentials,
            !(cacheControl.has("public") || cacheControl.has("s-maxage") || cacheControl.has("must-revalidate"))
        {
            return .refuse(.authorizedRequest)
        }
        // §5.2.2.5: no-store forbids storing; the caller's ttl does not override the origin.
        if cacheControl.has("no-store"), !mustUnderstand { return .refuse(.responseNoStore) }
        // §5.2.2.7: a shared cache must not store a private response. Larder stores it only
        // inside a per-caller partition of the key. `private="field"` only keeps that field
        // out of the store (see storableHeaders).
        if cacheControl.hasUnqualified("private"), !inputs.partitioned { return .refuse(.responsePrivate) }
        // §4.1: `Vary: *` never matches a later request, so storing it would be useless.
        if Vary.names(in: headers) == nil { return .refuse(.responseVaries) }
        var freshness = freshnessLifetime(status: status, cacheControl: cacheControl, headers: headers, receivedAt: inputs.responseTime)
        // Negative caching: a lifetime the operator or caller chose for this status, when the
        // response gives none of its own (a heuristic one included: the chosen one is meant).
        var negative = false
        if freshness.source != .explicit, let lifetime = inputs.negativeTTL.lifetime(for: status) {
            // A server error is a passing state of the origin: kept for a lifetime of the
            // operator's choosing, it must not replace a success stored for the key, which still
            // answers within its stale windows.
            if (500...599).contains(status), inputs.replacesSuccess { return .refuse(.storedSuccessKept) }
            freshness = (lifetime, .explicit)
            negative = true
        }
        // 2xx is stored (206 partial content only once ranges are handled). Other final
        // statuses only when the response itself makes them fresh (§3: explicitly or
        // heuristically cacheable) or a negative-caching lifetime applies; a caller's ttl never
        // judges them (EntryFreshness.judgedByCallerTTL).
        let storable: Bool
        switch status {
        case 200...299: storable = status != 206 || inputs.partial // a 206 only as a stored part (§3.4)
        case 300...599: storable = status != 304 && freshness.seconds > 0
        default: storable = false // 1xx interim responses are never stored
        }
        guard storable else { return .refuse(.statusNotCacheable) }
        guard inputs.bodySize <= inputs.maxBodySize else { return .refuse(.objectTooLarge) }
        func seconds(_ name: String) -> Double {
            if case .value(let value) = cacheControl.seconds(name) { return value }
            return 0
        }
        return .store(
            StoredFreshness(
                lifetime: freshness.seconds,
                staleWhileRevalidate: seconds("stale-while-revalidate"),
                staleIfError: seconds("stale-if-error"),
                // §4.2.4: never served stale (on error, by max-stale, while revalidating) when a
                // directive forbids it: must-revalidate, proxy-revalidate, no-cache, and for a
                // shared cache s-maxage (which carries proxy-revalidate's meaning, §5.2.2.10).
                mustRevalidate: cacheControl.has("must-revalidate") || cacheControl.has("proxy-revalidate")
                    || cacheControl.hasUnqualified("no-cache") || (shared && cacheControl.has("s-maxage")),
                // A negative lifetime counts from storing: an Age the answer came with (a CDN in
                // front of the origin) must not use it up.
                initialAge: negative ? 0 : initialAge(headers: headers, requestTime: inputs.requestTime, responseTime: inputs.responseTime),
                // A caller's ttl is the lifetime of 2xx answers only (EntryFreshness.judgedByCallerTTL).
                ttl: EntryFreshness.callerTTLJudges(status: status) ? ttl : nil,
                withheldFields: cacheControl.fieldsNotToStore))
    }

    /// RFC 9110 §9.3.3 / RFC 9111 §4: a response to POST may answer later GETs of the same
    /// URI when it has explicit freshness and a Content-Location equal to the POST's target
    /// (`contentLocationIsTarget`); it is then stored as that URI's GET response.
    public static func postResponseAnswersGet(
        status: Int, headers: [HeaderField], contentLocationIsTarget: Bool,
        receivedAt: Double, targeted: [String] = defaultTargetedFields
    ) -> Bool {
        guard contentLocationIsTarget, (200...299).contains(status), status != 206 else { return false }
        let freshness = freshnessLifetime(
            status: status, cacheControl: effectiveCacheControl(headers, targeted: targeted), headers: headers,
            receivedAt: receivedAt)
        return freshness.source == .explicit && freshness.seconds > 0
    }

    /// The response fields as they may be stored: without those named by `no-cache="…"` or
    /// `private="…"` (RFC 9111 §5.2.2.4, §5.2.2.7). Set-Cookie and connection-level fields are
    /// left out when the headers are rendered for storage.
    public static func storableHeaders(_ headers: [HeaderField]) -> [HeaderField] {
        storableHeaders(headers, withholding: effectiveCacheControl(headers).fieldsNotToStore)
    }

    /// The same with the fields already known (`StoredFreshness.withheldFields`).
    public static func storableHeaders(_ headers: [HeaderField], withholding excluded: Set<String>) -> [HeaderField] {
        guard !excluded.isEmpty else { return headers }
        return headers.filter { !excluded.contains($0.name.lowercasedASCII) }
    }

    /// The targeted fields Larder reads (RFC 9213 §2.2), in order of precedence: its own, then the
    /// one every CDN reads. Lower-case; `--targeted-cache-control` replaces the list.
    public static let defaultTargetedFields = ["larder-cache-control", "cdn-cache-control"]

    /// RFC 9213: Larder is a shared cache, so the first of `targeted` that is present and valid
    /// replaces `Cache-Control` (and `Expires`) for its decisions.
    public static func effectiveCacheControl(_ headers: [HeaderField], targeted: [String] = defaultTargetedFields) -> CacheControl {
        targetedCacheControl(headers, targeted: targeted) ?? CacheControl(headers.values("cache-control"))
    }

    /// The first of `targeted` (lower-case names) present as a valid Structured Field; an
    /// invalid one is ignored entirely and the next is tried (RFC 9213 §2.1, §2.2), so
    /// `Cache-Control` applies when none is valid.
    public static func targetedCacheControl(_ headers: [HeaderField], targeted: [String] = defaultTargetedFields) -> CacheControl? {
        for name in targeted {
            let values = headers.values(name)
            // An empty field is no Dictionary (RFC 9651 §3.2 never serializes one): as if absent.
            guard values.contains(where: { !$0.trimmingSpaces.isEmpty }) else { continue }
            if let parsed = CacheControl(structuredField: values.joined(separator: ", ")) { return parsed }
        }
        return nil
    }

    public enum FreshnessSource: Sendable, Equatable {
        case explicit, heuristic, none
    }

    /// Freshness lifetime (RFC 9111 §4.2.1): s-maxage (Larder is a shared cache), then
    /// max-age, then Expires minus Date; without any of them, a heuristic (§4.2.2) for
    /// heuristically cacheable statuses or `public` responses: a tenth of the time since
    /// Last-Modified, at most a day. `no-cache` (§5.2.2.4) means revalidate every time
    /// (lifetime 0). Invalid values mean stale (§4.2.1, §5.3).
    public static func freshnessLifetime(
        status: Int = 200, cacheControl: CacheControl, headers: [HeaderField],
        receivedAt: Double
    ) -> (seconds: Double, source: FreshnessSource) {
        // `no-cache="field"` does not ask for revalidation: the listed fields are simply not
        // stored (storableHeaders), so the rest may be reused while fresh.
        if cacheControl.hasUnqualified("no-cache") { return (0, .explicit) }
        for directive in ["s-maxage", "max-age"] {
            switch cacheControl.seconds(directive) {
            case .value(let seconds): return (seconds, .explicit)
            case .invalid: return (0, .explicit)
            case .absent: continue
            }
        }
        let date = headers.first(named: "date").flatMap(HTTPDate.parse) ?? receivedAt
        // RFC 9213 §2.2: with a targeted field, Expires does not count either.
        let expiresValues = cacheControl.isTargeted ? [] : headers.values("expires")
        if !expiresValues.isEmpty {
            // §5.3: an invalid Expires (including more than one) means already expired.
            guard expiresValues.count == 1, let expires = HTTPDate.parse(expiresValues[0]) else { return (0, .explicit) }
            return (max(0, expires - date), .explicit)
        }
        guard heuristicallyCacheable.contains(status) || cacheControl.has("public"),
            let lastModified = headers.first(named: "last-modified").flatMap(HTTPDate.parse), lastModified < date
        else {
            return (0, .none)
        }
        return (min(heuristicCap, (date - lastModified) * heuristicFraction), .heuristic)
    }

    /// RFC 9111 §4.2.3 corrected_initial_age: how old the response already was on arrival —
    /// the larger of the apparent age (arrival minus Date) and the Age header plus the time
    /// the exchange took. §5.1: of a list, the first Age value counts; an invalid one is ignored.
    public static func initialAge(headers: [HeaderField], requestTime: Double, responseTime: Double) -> Double {
        let apparentAge = headers.first(named: "date").flatMap(HTTPDate.parse).map { max(0, responseTime - $0) } ?? 0
        let ageValue: Double =
            headers.first(named: "age")
            .flatMap { $0.split(separator: ",").first.map { $0.trimmingSpaces } }
            .flatMap { text in text.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } && !text.isEmpty ? Double(text.prefix(10)) : nil } ?? 0
        let responseDelay = max(0, responseTime - requestTime)
        return max(apparentAge, ageValue + responseDelay)
    }
}
