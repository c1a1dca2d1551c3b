// Named upstreams: a base URL (and optionally a CDN URL) with headers, query arguments and
// cache rules applied to every request that names it (YTKNetwork's global config and URL
// filters). /fetch takes `"upstream": NAME, "path": "/x"` instead of `url`.

public struct CacheDefaults: Sendable, Equatable {
    public var policy: CachePolicy?
    public var ttl: Double?
    public var version: Int64?
    public var namespace: String?
    /// Seconds past freshness a stored response answers when this upstream fails (overrides
    /// `--stale-on-error`).
    public var staleOnError: Double?
    /// Tags every entry stored through this upstream carries.
    public var tags: [String] = []
    /// Negative-caching lifetimes by status, over `--negative-ttl`'s (NegativeTTL).
    public var negativeTTL = NegativeTTL()
    public init(policy: CachePolicy? = nil, ttl: Double? = nil, version: Int64? = nil, namespace: String? = nil) {
        self.policy = policy
        self.ttl = ttl
        self.version = version
        self.namespace = namespace
    }
}

public struct NamedUpstream: Sendable, Equatable {
    public var name: String
    /// Absolute http(s) URL; a request's `path` is appended to it.
    public var baseURL: String { didSet { basePath = Self.path(of: baseURL) } }
    /// Used instead of `baseURL` when a request says `"cdn": true`.
    public var cdnURL: String? { didSet { cdnBasePath = cdnURL.flatMap(Self.path(of:)) } }
    /// The base URLs' paths without a trailing slash, parsed once (every request is checked
    /// against one); nil when the URL does not parse.
    private var basePath: String?
    private var cdnBasePath: String?
    /// Sent with every request unless the request sets the same field.
    public var headers: [HeaderField]
    /// Added to every request's query unless the request sets the same name.
    public var query: [String: String]
    /// Used for every cache option the request leaves out.
    public var cache: CacheDefaults

    public init(
        name: String, baseURL: String, cdnURL: String? = nil, headers: [HeaderField] = [],
        query: [String: String] = [:], cache: CacheDefaults = CacheDefaults()
    ) {
        self.name = name
        self.baseURL = baseURL
        self.cdnURL = cdnURL
        self.basePath = Self.path(of: baseURL)
        self.cdnBasePath = cdnURL.flatMap(Self.path(of:))
        self.headers = headers
        self.query = query
        self.cache = cache
    }

    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
    }

    /// Checks the fields a user wrote; throws with the field at fault (for start-up errors).
    public func validate() throws(LarderError) {
        guard Self.isValidName(name) else { throw .invalid("name", "'\(name)' must be 1–64 letters, digits, '-' or '_'") }
        _ = try UpstreamURL(parsing: baseURL, field: "baseUrl")
        if let cdnURL { _ = try UpstreamURL(parsing: cdnURL, field: "cdnUrl") }
        for field in headers {
            guard HTTPToken.isValidName(field.name) else { throw .invalid("headers", "'\(field.name)' is not a valid header name") }
            guard HTTPToken.isValidValue(field.value) else { throw .invalid("headers.\(field.name)", "must not contain line breaks") }
            let lower = field.name.lowercasedASCII
            guard !FetchRequest.managedHeaders.contains(lower), !lower.hasPrefix("proxy-") else {
                throw .invalid("headers.\(field.name)", "is managed by Larder and cannot be set")
            }
        }
        if let ttl = cache.ttl, !(ttl.isFinite && ttl >= 0) { throw .invalid("cache.ttl", "must be a number of seconds, 0 or more") }
        if let window = cache.staleOnError, !(window.isFinite && window >= 0) {
            throw .invalid("cache.staleOnError", "must be a number of seconds, 0 or more")
        }
        if let namespace = cache.namespace, namespace.isEmpty || namespace.utf8.count > 256 {
            throw .invalid("cache.namespace", "must be 1 to 256 bytes")
        }
        if let namespace = cache.namespace, namespace.hasPrefix(FetchRequest.reservedNamespacePrefix) {
            throw .invalid("cache.namespace", "namespaces starting with '\(FetchRequest.reservedNamespacePrefix)' belong to the proxy")
        }
        _ = try CacheTags.validated(cache.tags, field: "cache.tags")
    }

    /// nil when `url` (built from a request's path) stays under the base URL's path, else why
    /// not. Dot segments must not climb out of it (`/v1/../admin`), or a caller could reach
    /// what the operator did not expose — nor may anything an origin might read as one after
    /// Larder has normalised the path: a dot segment with path parameters (`..;/admin`, read as
    /// `..` by Tomcat and Spring), an encoded slash or backslash (`..%2Fadmin`, `..%5Cadmin`),
    /// or a literal backslash.
    public func refusal(for url: UpstreamURL, cdn: Bool) -> String? {
        guard let basePath = cdn ? cdnBasePath : basePath else {
            return "upstream '\(name)' has no \(cdn ? "cdnUrl" : "baseUrl")"
        }
        guard basePath.isEmpty || url.path == basePath || url.path.hasPrefix(basePath + "/") else {
            return "leaves the base path of upstream '\(name)'"
        }
        let rest = url.path.dropFirst(basePath.count)
        if Self.hasEncodedSlashOrBackslash(rest.utf8) {
            return "an encoded slash or a backslash could leave the base path of upstream '\(name)'"
        }
        if Self.hasDotSegment(rest.utf8) {
            return "a dot segment with parameters could leave the base path of upstream '\(name)'"
        }
        return nil
    }

    /// A segment that is `.` or `..` before any `;` parameters, in one pass without
    /// allocating (this runs on every proxied request).
    private static func hasDotSegment(_ bytes: Substring.UTF8View) -> Bool {
        var dots = 0 // dots since the segment began, while nothing else came
        var onlyDots = true // the segment's part before `;` is dots so far
        var inParameters = false
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "/"):
                if onlyDots, dots == 1 || dots == 2 { return true }
                dots = 0
                onlyDots = true
                inParameters = false
            case UInt8(ascii: ";"):
                inParameters = true
            case UInt8(ascii: "."):
                if !inParameters { dots += 1 }
            default:
                if !inParameters { onlyDots = false }
            }
        }
        return onlyDots && (dots == 1 || dots == 2)
    }

    /// `%2F`, `%5C` (any case) or a backslash.
    private static func hasEncodedSlashOrBackslash(_ bytes: Substring.UTF8View) -> Bool {
        var previous: (UInt8, UInt8) = (0, 0)
        for byte in bytes {
            if byte == UInt8(ascii: "\\") { return true }
            if previous == (UInt8(ascii: "%"), UInt8(ascii: "2")), byte | 0x20 == UInt8(ascii: "f") { return true }
            if previous == (UInt8(ascii: "%"), UInt8(ascii: "5")), byte | 0x20 == UInt8(ascii: "c") { return true }
            previous = (previous.1, byte)
        }
        return false
    }

    private static func path(of url: String) -> String? {
        guard let base = try? UpstreamURL(parsing: url) else { return nil }
        return base.path.hasSuffix("/") ? String(base.path.dropLast()) : base.path
    }

    /// The absolute URL for `path` (which may carry its own query) under this upstream.
    public func url(for path: String, cdn: Bool) -> String? {
        guard let base = cdn ? cdnURL : baseURL else { return nil }
        if path.isEmpty { return base }
        let trimmedBase = base.hasSuffix("/") ? String(base.dropLast()) : base
        return path.hasPrefix("/") || path.hasPrefix("?") ? trimmedBase + path : trimmedBase + "/" + path
    }
}
