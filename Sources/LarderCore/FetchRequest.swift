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
    public var sensitive: JSONValue?
    public var ignoreQuery: Set<String> = []
    public var namespace: String = "default"
    /// Seconds past freshness during which a stale entry is served while it is refreshed in the
    /// background; nil = the response's `stale-while-revalidate`.
    public var staleWhileRevalidate: Double?
    /// Seconds past freshness during which a stale entry is served when the upstream fails;
    /// nil = the response's `stale-if-error`.
    public var staleIfError: Double?
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

    public init(method: HTTPMethod = .get, url: UpstreamURL, headers: [HeaderField] = [], body: [UInt8]? = nil,
                timeoutMs: Int = FetchRequest.defaultTimeoutMs, cache: CacheOptions = CacheOptions(), shared: Bool = false) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMs = timeoutMs
        self.cache = cache
        self.directives = RequestDirectives(headers: headers)
        self.shared = shared
    }

    /// Whether the request carries Authorization (for the shared-cache rule, RFC 9111 §3.5).
    public var hasAuthorization: Bool { !headers.values("authorization").isEmpty }

    public static let defaultTimeoutMs = 30_000
    public static let maxTimeoutMs = 600_000

    /// Fields the caller may not set: Larder manages the connection and the framing, and the
    /// host comes from `url` (a different Host would share a cache entry with another site).
    static let managedHeaders: Set<String> = [
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer",
        "upgrade", "expect", "proxy-authorization", "proxy-connection",
    ]
}

// MARK: - Parsing

extension FetchRequest {
    /// Parses and validates a /fetch body; `upstreams` are the named upstreams by name.
    public static func parse(json bytes: [UInt8], upstreams: [String: NamedUpstream] = [:]) throws(LarderError) -> FetchRequest {
        let wire: WireFetchRequest
        do {
            wire = try JSONDecoder().decode(WireFetchRequest.self, from: Data(bytes))
        } catch let error as DecodingError {
            throw Self.describe(error)
        } catch {
            throw LarderError.invalid("body", "not valid JSON")
        }
        return try wire.validated(upstreams: upstreams)
    }

    private static func describe(_ error: DecodingError) -> LarderError {
        func path(_ codingPath: [any CodingKey]) -> String {
            let joined = codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
                .joined(separator: ".").replacingOccurrences(of: ".[", with: "[")
            return joined.isEmpty ? "body" : joined
        }
        switch error {
        case .typeMismatch(let type, let context):
            return .invalid(path(context.codingPath), "expected \(Self.describe(type))")
        case .valueNotFound(let type, let context):
            return .invalid(path(context.codingPath), "expected \(Self.describe(type)), found null")
        case .keyNotFound(let key, let context):
            return .invalid(path(context.codingPath + [key]), "is required")
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return .invalid("body", "not valid JSON") }
            return .invalid(path(context.codingPath), "invalid value")
        @unknown default:
            return .invalid("body", "not valid JSON")
        }
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int64.Type, is Int.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "a boolean"
        case is [String].Type: "an array of strings"
        case is [String: String].Type: "an object of strings"
        default: "another type"
        }
    }
}

private struct WireFetchRequest: Decodable {
    var url: String?
    var upstream: String?
    var path: String?
    var cdn: Bool?
    var method: String?
    var query: [String: String]?
    var headers: [String: String]?
    var body: JSONValue?
    var bodyBase64: String?
    var timeoutMs: WireInteger?
    var cache: WireCacheOptions?

    func validated(upstreams: [String: NamedUpstream]) throws(LarderError) -> FetchRequest {
        var named: NamedUpstream?
        let target: String
        switch (url, upstream) {
        case (.some, .some):
            throw .invalid("upstream", "give either url or upstream, not both")
        case (let url?, nil):
            guard path == nil, cdn == nil else { throw .invalid(path != nil ? "path" : "cdn", "goes with upstream, not url") }
            target = url
        case (nil, let name?):
            guard let found = upstreams[name] else {
                throw LarderError(.unknownUpstream, "no upstream named '\(name)'", field: "upstream")
            }
            guard let built = found.url(for: path ?? "", cdn: cdn ?? false) else {
                throw .invalid("cdn", "upstream '\(name)' has no cdnUrl")
            }
            named = found
            target = built
        case (nil, nil):
            throw .invalid("url", "is required (or upstream and path)")
        }
        let url = target
        let method: HTTPMethod
        if let raw = self.method {
            guard let parsed = HTTPMethod(rawValue: raw.uppercased()), HTTPMethod.fetchable.contains(parsed) else {
                throw .invalid("method", "'\(raw)' is not one of \(HTTPMethod.fetchable.map(\.rawValue).joined(separator: ", "))")
            }
            method = parsed
        } else {
            method = .get
        }
        for (name, value) in query ?? [:] {
            guard !name.isEmpty else { throw .invalid("query", "parameter names must not be empty") }
            guard HTTPToken.isValidValue(value) else { throw .invalid("query.\(name)", "must not contain line breaks") }
        }
        var mergedQuery = named?.query ?? [:]
        mergedQuery.merge(query ?? [:]) { _, callers in callers }
        let upstreamURL = try UpstreamURL(parsing: url, mergingQuery: mergedQuery)
        if let named, !named.contains(upstreamURL, cdn: cdn ?? false) {
            throw .invalid("path", "leaves the base path of upstream '\(named.name)'")
        }

        var fields: [HeaderField] = []
        for (name, value) in (headers ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard HTTPToken.isValidName(name) else { throw .invalid("headers", "'\(name)' is not a valid header name") }
            guard HTTPToken.isValidValue(value) else { throw .invalid("headers.\(name)", "must not contain line breaks or NUL") }
            let lower = name.lowercasedASCII
            guard !FetchRequest.managedHeaders.contains(lower), !lower.hasPrefix("proxy-") else {
                throw .invalid("headers.\(name)", "is managed by Larder and cannot be set")
            }
            fields.append(HeaderField(name, value))
        }
        for field in named?.headers ?? [] where fields.values(field.name).isEmpty {
            fields.append(field)
        }

        var requestBody: [UInt8]?
        switch (body, bodyBase64) {
        case (.some, .some):
            throw .invalid("bodyBase64", "give either body or bodyBase64, not both")
        case (let json?, nil):
            requestBody = json.canonicalBytes
            if fields.values("content-type").isEmpty { fields.append(HeaderField("Content-Type", "application/json")) }
        case (nil, let base64?):
            guard let data = Data(base64Encoded: base64) else { throw .invalid("bodyBase64", "not valid base64") }
            requestBody = Array(data)
        case (nil, nil):
            requestBody = nil
        }
        if requestBody != nil, method == .head {
            throw .invalid("body", "a HEAD request cannot carry a body")
        }

        let timeout = timeoutMs.map { Int(clamping: $0.value) } ?? FetchRequest.defaultTimeoutMs
        guard (1...FetchRequest.maxTimeoutMs).contains(timeout) else {
            throw .invalid("timeoutMs", "must be between 1 and \(FetchRequest.maxTimeoutMs)")
        }
        let options = try (cache ?? WireCacheOptions()).validated(defaults: named?.cache ?? CacheDefaults())
        if options.policy == .cacheOnly || options.policy == .cacheElseLoad,
           !CacheRules.isCacheable(method: method, ttl: options.ttl) {
            throw .invalid("cache.policy", "'\(options.policy.rawValue)' needs a cacheable request: GET, HEAD, or POST with cache.ttl")
        }
        return FetchRequest(method: method, url: upstreamURL, headers: fields, body: requestBody,
                            timeoutMs: timeout, cache: options)
    }
}

private struct WireCacheOptions: Decodable {
    var policy: String?
    var ttl: Double?
    var version: WireInteger?
    var sensitive: JSONValue?
    var ignoreQuery: [String]?
    var namespace: String?
    var staleWhileRevalidate: Double?
    var staleIfError: Double?

    func validated(defaults: CacheDefaults) throws(LarderError) -> CacheOptions {
        var options = CacheOptions()
        options.policy = defaults.policy ?? options.policy
        options.ttl = defaults.ttl
        options.namespace = defaults.namespace ?? options.namespace
        if let policy {
            guard let parsed = CachePolicy(rawValue: policy) else {
                let known = CachePolicy.allCases.map(\.rawValue).joined(separator: ", ")
                throw .invalid("cache.policy", "'\(policy)' is not one of \(known)")
            }
            options.policy = parsed
        }
        if let ttl {
            guard ttl.isFinite, ttl >= 0, ttl <= 3_153_600_000 else {
                throw .invalid("cache.ttl", "must be a number of seconds, 0 or more")
            }
            options.ttl = ttl
        }
        options.version = version?.value ?? defaults.version ?? 0
        for (field, value) in [("cache.staleWhileRevalidate", staleWhileRevalidate), ("cache.staleIfError", staleIfError)] {
            if let value, !(value.isFinite && value >= 0) { throw .invalid(field, "must be a number of seconds, 0 or more") }
        }
        options.staleWhileRevalidate = staleWhileRevalidate
        options.staleIfError = staleIfError
        options.sensitive = sensitive
        options.ignoreQuery = Set(ignoreQuery ?? [])
        if let namespace {
            guard !namespace.isEmpty, namespace.utf8.count <= 256 else {
                throw .invalid("cache.namespace", "must be 1 to 256 bytes")
            }
            options.namespace = namespace
        }
        return options
    }
}

/// An integer field. swift-foundation reports a fractional number decoded as an integer as
/// "not valid JSON" with no field; this names the field instead.
private struct WireInteger: Decodable {
    let value: Int64

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(Int64.self) {
            self.value = value
        } else {
            throw DecodingError.typeMismatch(Int64.self, DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "expected an integer"))
        }
    }
}
