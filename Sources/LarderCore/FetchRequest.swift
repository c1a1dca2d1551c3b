// The body of POST /fetch, validated. Every rejection names the field at fault.

import Foundation

public enum CachePolicy: String, Sendable, CaseIterable {
    /// Freshness from the response headers (or `ttl`); fetch when stale.
    case useProtocol = "protocol"
    /// Don't read the cache; fetch; store.
    case reload = "reload"
    /// Any stored entry however old, else fetch.
    case cacheElseLoad = "cache-else-load"
    /// Any stored entry however old, else fail with `not_cached`.
    case cacheOnly = "cache-only"
    /// Neither read nor write.
    case noStore = "no-store"
}

public struct CacheOptions: Sendable, Equatable {
    public var policy: CachePolicy = .useProtocol
    /// Seconds. When set, an entry is fresh while its age is below it, whatever the headers say.
    public var ttl: Double?
    public var version: Int64 = 0
    /// Versions are integers a JSON number holds exactly everywhere (±(2^53 − 1)), so a
    /// JavaScript caller reads back the version it wrote.
    public static let versions: ClosedRange<Int64> = -9_007_199_254_740_991...9_007_199_254_740_991
    public static let versionRule = "must be an integer from -9007199254740991 to 9007199254740991"
    /// Whether the caller (or its named upstream) chose `version`; when not, the engine uses
    /// the namespace's current version (POST /cache/namespaces/{ns}/version).
    public var versionExplicit = false
    /// Set by a warm job: what it fetches is meant to be kept (admitted without probation).
    public var keepRequested = false
    /// Surrogate keys the stored entry carries, for purging by tag (besides the response's
    /// Surrogate-Key / Cache-Tag).
    public var tags: [String] = []
    public var sensitive: JSONValue?
    public var ignoreQuery: Set<String> = []
    public var namespace: String = "default"
    /// Seconds past freshness during which a stale entry is served while it is refreshed in the
    /// background; nil = the response's `stale-while-revalidate`.
    public var staleWhileRevalidate: Double?
    /// Seconds past freshness during which a stale entry is served when the upstream fails;
    /// nil = the response's `stale-if-error`.
    public var staleIfError: Double?
    /// Seconds past freshness a stored response may answer an upstream failure by the
    /// deployment's choice (a named upstream's `cache.staleOnError`); nil = the global setting.
    public var staleOnError: Double?
    /// Lifetimes for answers of these statuses without explicit freshness (`cache.negativeTtl`,
    /// over a named upstream's); the deployment's `--negative-ttl` fills the statuses left out.
    public var negativeTTL = NegativeTTL()
    public init() {}

    public var staleWindows: StaleWindows { StaleWindows(whileRevalidate: staleWhileRevalidate, ifError: staleIfError) }
}

public struct FetchRequest: Sendable {
    public var method: HTTPMethod
    public var url: UpstreamURL
    public var headers: [HeaderField]
    public var body: [UInt8]?
    /// Milliseconds for the whole upstream exchange, redirects included.
    public var timeoutMs: Int
    public var cache: CacheOptions
    /// The caller's Cache-Control request directives, from `headers`.
    public var directives: RequestDirectives
    /// Served as a shared cache (the /proxy route, RFC 9111 as written): credentials do not
    /// partition the key, and a request with Authorization is stored only when the response
    /// allows it (§3.5). False for /fetch, which keeps a private partition per credential.
    public var shared: Bool
    /// Names (lower-case) of fields that a named upstream's configuration added: like
    /// credentials, they never follow a redirect to another origin.
    public var originBoundHeaders: Set<String> = []
    /// What the response must satisfy to count as a success (nil: anything the upstream says).
    public var validation: ResponseValidation?
    /// Counts body bytes as they arrive (warm jobs).
    public var progress: TransferProgress?
    /// A GET cut short mid-body is resumed with Range and If-Range when the origin allows
    /// (warm jobs: YTKNetwork's resumable downloads).
    public var resumable = false

    public init(
        method: HTTPMethod = .get, url: UpstreamURL, headers: [HeaderField] = [], body: [UInt8]? = nil,
        timeoutMs: Int = FetchRequest.defaultTimeoutMs, cache: CacheOptions = CacheOptions(), shared: Bool = false
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMs = timeoutMs
        self.cache = cache
        self.directives = RequestDirectives(headers: headers)
        self.shared = shared
    }

    /// Whether the request carries Authorization (for the shared-cache rule, RFC 9111 §3.5) or
    /// a Cookie, which a shared cache treats alike: the response may be meant for that user.
    public var hasCredentials: Bool { !headers.values("authorization").isEmpty || !headers.values("cookie").isEmpty }

    public static let defaultTimeoutMs = 30_000
    public static let maxTimeoutMs = 600_000

    /// Fields the caller may not set: Larder manages the connection and the framing, and the
    /// host comes from `url` (a different Host would share a cache entry with another site).
    static let managedHeaders: Set<String> = [
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
        "upgrade", "expect", "proxy-authorization", "proxy-connection"
    ]
}

// MARK: - Parsing

extension FetchRequest {
    /// The members a /fetch spec may have (anything else is refused, naming it).
    public static let knownFields = [
        "url", "upstream", "path", "cdn", "method", "query", "headers", "body", "bodyBase64",
        "timeoutMs", "cache", "validate"
    ]
    public static let knownCacheFields = [
        "policy", "ttl", "version", "sensitive", "ignoreQuery", "namespace",
        "staleWhileRevalidate", "staleIfError", "tags", "negativeTtl"
    ]

    /// Namespaces of this prefix belong to the proxy route (`proxy:NAME`): a /fetch caller who
    /// could write there could answer the proxy's clients with a response of its choosing.
    public static let reservedNamespacePrefix = "proxy:"

    /// Why `namespace` cannot name a namespace anywhere (a request's, a budget's); nil when it
    /// can: 1 to 256 bytes, and no control characters, since the admin API, /metrics labels and
    /// the CLI show it.
    public static func namespaceRefusal(_ namespace: String) -> String? {
        guard !namespace.isEmpty, namespace.utf8.count <= 256 else { return "must be 1 to 256 bytes" }
        guard !namespace.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
            return "must not contain control characters"
        }
        return nil
    }

    /// Parses and validates a /fetch body; `upstreams` are the named upstreams by name.
    public static func parse(json bytes: [UInt8], upstreams: [String: NamedUpstream] = [:]) throws(LarderError) -> FetchRequest {
        try parse(try JSONFields.parseBody(bytes), path: "", upstreams: upstreams)
    }

    /// Validates one fetch spec already parsed; `path` names it in errors ("" for a /fetch body,
    /// `requests[2]` inside a batch).
    public static func parse(_ value: JSONValue, path: String, upstreams: [String: NamedUpstream] = [:]) throws(LarderError) -> FetchRequest
    {
        let spec = try JSONFields(value, path: path)
        try spec.rejectUnknown(knownFields)
        return try SpecReader(spec: spec).validated(upstreams: upstreams)
    }
}

private struct SpecReader {
    let spec: JSONFields

    func validated(upstreams: [String: NamedUpstream]) throws(LarderError) -> FetchRequest {
        let url = try spec.string("url")
        let upstream = try spec.string("upstream")
        let path = try spec.string("path")
        let cdn = try spec.bool("cdn")
        var named: NamedUpstream?
        let target: String
        switch (url, upstream) {
        case (.some, .some):
            throw .invalid(spec.path("upstream"), "give either url or upstream, not both")
        case (let url?, nil):
            guard path == nil, cdn == nil else { throw .invalid(spec.path(path != nil ? "path" : "cdn"), "goes with upstream, not url") }
            target = url
        case (nil, let name?):
            guard let found = upstreams[name] else {
                throw LarderError(.unknownUpstream, "no upstream named '\(name)'", field: spec.path("upstream"))
            }
            guard let built = found.url(for: path ?? "", cdn: cdn ?? false) else {
                throw .invalid(spec.path("cdn"), "upstream '\(name)' has no cdnUrl")
            }
            named = found
            target = built
        case (nil, nil):
            throw .invalid(spec.path("url"), "is required (or upstream and path)")
        }
        let method: HTTPMethod
        if let raw = try spec.string("method") {
            guard let parsed = HTTPMethod(rawValue: raw.uppercased()), HTTPMethod.fetchable.contains(parsed) else {
                throw .invalid(
                    spec.path("method"), "'\(raw)' is not one of \(HTTPMethod.fetchable.map(\.rawValue).joined(separator: ", "))")
            }
            method = parsed
        } else {
            method = .get
        }
        let query = try spec.stringMap("query") ?? []
        for (name, value) in query {
            guard !name.isEmpty else { throw .invalid(spec.path("query"), "parameter names must not be empty") }
            guard HTTPToken.isValidValue(value) else { throw .invalid(spec.path("query.\(name)"), "must not contain line breaks") }
        }
        var mergedQuery = named?.query ?? [:]
        for (name, value) in query { mergedQuery[name] = value }
        let upstreamURL = try UpstreamURL(parsing: target, mergingQuery: mergedQuery, field: spec.path(upstream == nil ? "url" : "path"))
        if let named {
            if let refusal = named.refusal(for: upstreamURL, cdn: cdn ?? false) { throw .invalid(spec.path("path"), refusal) }
        }

        var fields: [HeaderField] = []
        for (name, value) in try spec.stringMap("headers") ?? [] {
            guard HTTPToken.isValidName(name) else { throw .invalid(spec.path("headers"), "'\(name)' is not a valid header name") }
            guard HTTPToken.isValidValue(value) else { throw .invalid(spec.path("headers.\(name)"), "must not contain line breaks or NUL") }
            let lower = name.lowercasedASCII
            guard !FetchRequest.managedHeaders.contains(lower), !lower.hasPrefix("proxy-") else {
                throw .invalid(spec.path("headers.\(name)"), "is managed by Larder and cannot be set")
            }
            fields.append(HeaderField(name, value))
        }
        var originBound: Set<String> = []
        for field in named?.headers ?? [] where fields.values(field.name).isEmpty {
            fields.append(field)
            originBound.insert(field.name.lowercasedASCII)
        }

        var requestBody: [UInt8]?
        let base64 = try spec.string("bodyBase64")
        switch (spec.value("body"), base64) {
        case (.some, .some):
            throw .invalid(spec.path("bodyBase64"), "give either body or bodyBase64, not both")
        case (let json?, nil):
            requestBody = json.canonicalBytes
            if fields.values("content-type").isEmpty { fields.append(HeaderField("Content-Type", "application/json")) }
        case (nil, let base64?):
            guard let data = Data(base64Encoded: base64) else { throw .invalid(spec.path("bodyBase64"), "not valid base64") }
            requestBody = Array(data)
        case (nil, nil):
            requestBody = nil
        }
        if requestBody != nil, method == .head {
            throw .invalid(spec.path("body"), "a HEAD request cannot carry a body")
        }

        let timeout = try spec.integer("timeoutMs").map { Int(clamping: $0) } ?? FetchRequest.defaultTimeoutMs
        guard (1...FetchRequest.maxTimeoutMs).contains(timeout) else {
            throw .invalid(spec.path("timeoutMs"), "must be between 1 and \(FetchRequest.maxTimeoutMs)")
        }
        let cache = try spec.object("cache")
        try cache?.rejectUnknown(FetchRequest.knownCacheFields)
        let options = try CacheReader(fields: cache, path: spec.path("cache")).validated(defaults: named?.cache ?? CacheDefaults())
        if options.policy == .cacheOnly || options.policy == .cacheElseLoad,
            !CacheRules.isCacheable(method: method, ttl: options.ttl)
        {
            throw .invalid(
                spec.path("cache.policy"), "'\(options.policy.rawValue)' needs a cacheable request: GET, HEAD, or POST with cache.ttl")
        }
        var request = FetchRequest(
            method: method, url: upstreamURL, headers: fields, body: requestBody,
            timeoutMs: timeout, cache: options)
        request.originBoundHeaders = originBound
        if let validate = try spec.typed("validate") {
            request.validation = try ResponseValidation.parse(validate, path: spec.path("validate"))
        }
        return request
    }
}

private struct CacheReader {
    let fields: JSONFields?
    let path: String

    func name(_ member: String) -> String { "\(path).\(member)" }

    func validated(defaults: CacheDefaults) throws(LarderError) -> CacheOptions {
        var options = CacheOptions()
        options.policy = defaults.policy ?? options.policy
        options.ttl = defaults.ttl
        options.namespace = defaults.namespace ?? options.namespace
        options.version = defaults.version ?? 0
        options.versionExplicit = defaults.version != nil
        options.tags = defaults.tags
        options.staleOnError = defaults.staleOnError
        options.negativeTTL = defaults.negativeTTL
        guard let fields else { return options }
        if let policy = try fields.string("policy") {
            guard let parsed = CachePolicy(rawValue: policy) else {
                let known = CachePolicy.allCases.map(\.rawValue).joined(separator: ", ")
                throw .invalid(name("policy"), "'\(policy)' is not one of \(known)")
            }
            options.policy = parsed
        }
        if let ttl = try fields.number("ttl") {
            guard ttl.isFinite, ttl >= 0, ttl <= 3_153_600_000 else {
                throw .invalid(name("ttl"), "must be a number of seconds, 0 to 3153600000 (100 years)")
            }
            options.ttl = ttl
        }
        if let version = try fields.integer("version") {
            guard CacheOptions.versions.contains(version) else { throw .invalid(fields.path("version"), CacheOptions.versionRule) }
            options.version = version
            options.versionExplicit = true
        }
        if let tags = try fields.strings("tags") {
            options.tags = try CacheTags.validated(tags, field: name("tags"), adding: options.tags)
        }
        for member in ["staleWhileRevalidate", "staleIfError"] {
            if let value = try fields.number(member), !(value.isFinite && value >= 0) {
                throw .invalid(name(member), "must be a number of seconds, 0 or more")
            }
        }
        options.staleWhileRevalidate = try fields.number("staleWhileRevalidate")
        options.staleIfError = try fields.number("staleIfError")
        if let negative = try fields.typed("negativeTtl") {
            options.negativeTTL = options.negativeTTL.overridden(by: try NegativeTTL.parse(negative, field: name("negativeTtl")))
        }
        options.sensitive = fields.value("sensitive")
        options.ignoreQuery = Set(try fields.strings("ignoreQuery") ?? [])
        if let namespace = try fields.string("namespace") {
            if let refusal = FetchRequest.namespaceRefusal(namespace) { throw .invalid(name("namespace"), refusal) }
            // `/cache/namespaces/{ns}/version` must be able to name it: a browser or client
            // resolves `.` and `..` as path segments.
            guard namespace != ".", namespace != ".." else { throw .invalid(name("namespace"), "must not be '.' or '..'") }
            guard !namespace.hasPrefix(FetchRequest.reservedNamespacePrefix) else {
                throw .invalid(name("namespace"), "namespaces starting with '\(FetchRequest.reservedNamespacePrefix)' belong to the proxy")
            }
            options.namespace = namespace
        }
        return options
    }
}
