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
    case policyNoStore = "policy_no_store"            // cache.policy = no-store
    case methodNotCacheable = "method_not_cacheable"  // PUT, PATCH, DELETE; POST without ttl
    case statusNotCacheable = "status_not_cacheable"  // only 200–299 are stored
    case responseNoStore = "response_no_store"        // Cache-Control: no-store, even with ttl
    case responsePrivate = "response_private"         // private response, no per-caller partition
    case bodyTooLarge = "body_too_large"
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

    public init(storedAt: Double, freshnessLifetime: Double, version: Int64, staleWhileRevalidate: Double = 0,
                staleIfError: Double = 0, mustRevalidate: Bool = false) {
        self.storedAt = storedAt
        self.freshnessLifetime = freshnessLifetime
        self.version = version
        self.staleWhileRevalidate = staleWhileRevalidate
        self.staleIfError = staleIfError
        self.mustRevalidate = mustRevalidate
    }

    /// Age in seconds, measured from when the entry was stored (never negative).
    public func age(now: Double) -> Double { max(0, now - storedAt) }

    /// Seconds of freshness left under `ttl` when given, else the stored lifetime.
    public func remaining(now: Double, ttl: Double?) -> Double {
        max(0, (ttl ?? freshnessLifetime) - age(now: now))
    }

    public func isFresh(now: Double, ttl: Double?) -> Bool {
        age(now: now) < (ttl ?? freshnessLifetime)
    }

    /// Seconds past freshness (0 while fresh).
    public func staleness(now: Double, ttl: Double?) -> Double {
        max(0, age(now: now) - (ttl ?? freshnessLifetime))
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
    public init(lifetime: Double, staleWhileRevalidate: Double = 0, staleIfError: Double = 0, mustRevalidate: Bool = false) {
        self.lifetime = lifetime
        self.staleWhileRevalidate = staleWhileRevalidate
        self.staleIfError = staleIfError
        self.mustRevalidate = mustRevalidate
    }
}

public enum CacheRules {
    /// GET and HEAD are cacheable; POST only when the caller gives a ttl (YTKNetwork caches
    /// POST by time); PUT, PATCH and DELETE never.
    public static func isCacheable(method: HTTPMethod, ttl: Double?) -> Bool {
        switch method {
        case .get, .head: true
        case .post: ttl != nil
        case .put, .patch, .delete: false
        }
    }

    /// Whether to read the cache, and what to do with what was found.
    public static func lookup(policy: CachePolicy, method: HTTPMethod, ttl: Double?, version: Int64,
                              entry: EntryFreshness?, now: Double, stale: StaleWindows = StaleWindows()) -> LookupDecision {
        switch policy {
        case .noStore, .reload:
            return .fetch
        case .useProtocol, .cacheElseLoad, .cacheOnly:
            break
        }
        guard isCacheable(method: method, ttl: ttl), let entry, entry.version == version else {
            // An entry under another version is never served (and the next store replaces it).
            return policy == .cacheOnly ? .failNotCached : .fetch
        }
        let fresh = entry.isFresh(now: now, ttl: ttl)
        switch policy {
        case .useProtocol:
            if fresh { return .serve(fresh: true) }
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
    /// (unreachable, timeout, or a 500, 502, 503 or 504 status).
    public static func mayServeStaleOnError(_ entry: EntryFreshness, now: Double, ttl: Double?, window: Double?) -> Bool {
        guard !entry.mustRevalidate else { return false }
        let allowed = window ?? entry.staleIfError
        return allowed > 0 && entry.staleness(now: now, ttl: ttl) < allowed
    }

    /// The upstream statuses that count as errors for stale-if-error (RFC 5861 §4).
    public static func isServerError(_ status: Int) -> Bool {
        [500, 502, 503, 504].contains(status)
    }

    /// Whether and for how long to store a response (issue 2 subset of RFC 9111 §3 and §4.2.1).
    /// - `partitioned`: the key carries a per-caller part (`sensitive` or credentials), so the
    ///   entry is private to that caller and `Cache-Control: private` does not forbid storing.
    public static func store(policy: CachePolicy, method: HTTPMethod, ttl: Double?, partitioned: Bool,
                             status: Int, headers: [HeaderField], bodySize: Int, maxBodySize: Int,
                             receivedAt: Double) -> StoreDecision {
        if policy == .noStore { return .refuse(.policyNoStore) }
        guard isCacheable(method: method, ttl: ttl) else { return .refuse(.methodNotCacheable) }
        guard (200...299).contains(status) else { return .refuse(.statusNotCacheable) }
        let cacheControl = CacheControl(headers.values("cache-control"))
        // §5.2.2.5: no-store forbids storing; the caller's ttl does not override the origin.
        if cacheControl.has("no-store") { return .refuse(.responseNoStore) }
        // §5.2.2.7: a shared cache must not store a private response. Larder stores it only
        // inside a per-caller partition of the key.
        if cacheControl.has("private"), !partitioned { return .refuse(.responsePrivate) }
        guard bodySize <= maxBodySize else { return .refuse(.bodyTooLarge) }
        func seconds(_ name: String) -> Double {
            if case .value(let value) = cacheControl.seconds(name) { return value }
            return 0
        }
        return .store(StoredFreshness(
            lifetime: freshnessLifetime(cacheControl: cacheControl, headers: headers, receivedAt: receivedAt),
            staleWhileRevalidate: seconds("stale-while-revalidate"),
            staleIfError: seconds("stale-if-error"),
            mustRevalidate: cacheControl.has("must-revalidate") || cacheControl.has("proxy-revalidate")))
    }

    /// Freshness lifetime (RFC 9111 §4.2.1): s-maxage (Larder is a shared cache), then
    /// max-age, then Expires minus Date. `no-cache` (§5.2.2.4) means revalidate every time,
    /// which for this issue is lifetime 0. Invalid values mean stale (§4.2.1, §5.3).
    public static func freshnessLifetime(cacheControl: CacheControl, headers: [HeaderField], receivedAt: Double) -> Double {
        if cacheControl.has("no-cache") { return 0 }
        switch cacheControl.seconds("s-maxage") {
        case .value(let seconds): return seconds
        case .invalid: return 0
        case .absent: break
        }
        switch cacheControl.seconds("max-age") {
        case .value(let seconds): return seconds
        case .invalid: return 0
        case .absent: break
        }
        let expiresValues = headers.values("expires")
        guard !expiresValues.isEmpty else { return 0 }
        // §5.3: an invalid Expires (including more than one) means already expired.
        guard expiresValues.count == 1, let expires = HTTPDate.parse(expiresValues[0]) else { return 0 }
        let date = headers.values("date").first.flatMap(HTTPDate.parse) ?? receivedAt
        return max(0, expires - date)
    }
}
