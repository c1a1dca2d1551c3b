/// What `CacheRules.store` decides on: the request's side (policy, method, caller's ttl and
/// directives, whether the key is partitioned or the cache shared) and the response's
/// (status, fields, size, and when it was asked for and arrived).
public struct StoreInputs: Sendable, Equatable {
    public var policy: CachePolicy
    public var method: HTTPMethod
    /// The caller's ttl (`cache.ttl`); nil: the response's own freshness.
    public var ttl: Double?
    /// The key carries a per-caller part (`sensitive` or credentials), so the entry is private
    /// to that caller and `Cache-Control: private` does not forbid storing (RFC 9111 §5.2.2.7).
    public var partitioned: Bool
    public var status: Int
    public var headers: [HeaderField]
    public var bodySize: Int
    /// Larger bodies are served but not stored (`--max-object-bytes`).
    public var maxBodySize: Int
    /// When the request was sent and the response arrived, on the cache's clock (§4.2.3).
    public var requestTime: Double
    public var responseTime: Double
    /// The caller's request directives (§5.2.1).
    public var directives: RequestDirectives
    /// A shared cache's request carrying Authorization or Cookie (§3.5).
    public var sharedWithCredentials: Bool
    /// Stored by a shared cache (the proxy): s-maxage also forbids serving stale (§5.2.2.10).
    public var shared: Bool
    /// A 206 kept as a stored part (§3.4); a 206 is stored only so.
    public var partial: Bool
    /// The targeted Cache-Control fields read, in order (RFC 9213 §2.2; lower-case).
    public var targetedFields: [String] = CacheRules.defaultTargetedFields
    /// Lifetimes for statuses whose answers carry no explicit freshness (negative caching).
    public var negativeTTL = NegativeTTL()
    /// A success (2xx) is stored for the key, which storing this answer would replace.
    public var replacesSuccess = false

    public init(
        policy: CachePolicy, method: HTTPMethod, ttl: Double?, partitioned: Bool,
        status: Int, headers: [HeaderField], bodySize: Int, maxBodySize: Int,
        requestTime: Double, responseTime: Double,
        directives: RequestDirectives = RequestDirectives(),
        sharedWithCredentials: Bool = false, shared: Bool = false, partial: Bool = false
    ) {
        self.policy = policy
        self.method = method
        self.ttl = ttl
        self.partitioned = partitioned
        self.status = status
        self.headers = headers
        self.bodySize = bodySize
        self.maxBodySize = maxBodySize
        self.requestTime = requestTime
        self.responseTime = responseTime
        self.directives = directives
        self.sharedWithCredentials = sharedWithCredentials
        self.shared = shared
        self.partial = partial
    }
}
