// Negative caching: lifetimes for answers of chosen statuses (a 404, a 502) that say nothing of
// their own freshness, so a missing object or a failing origin is asked once per lifetime rather
// than by every request (ATS `negative_caching_lifetime`, nginx `proxy_cache_valid 404 1m`).
// Set by the operator (`--negative-ttl`, a named upstream's `cache.negativeTtl`) and by a /fetch
// caller (`cache.negativeTtl`); the response's own explicit freshness always wins (RFC 9111
// §4.2.1), and no-store, private and the other refusals still refuse.

public struct NegativeTTL: Sendable, Equatable {
    /// Seconds by status; 0 turns a status off where a broader setting gave it a lifetime.
    public var seconds: [Int: Double] { kept ?? [:] }
    /// nil when empty: every request carries one (CacheOptions), and a dictionary, even empty,
    /// is a reference each copy of the request retains.
    private let kept: [Int: Double]?

    public init(_ seconds: [Int: Double] = [:]) {
        kept = seconds.isEmpty ? nil : seconds
    }

    public var isEmpty: Bool { kept == nil }

    public static func == (lhs: NegativeTTL, rhs: NegativeTTL) -> Bool { lhs.seconds == rhs.seconds }

    /// The statuses that can be given a lifetime: redirects and errors. 304 is never stored (it
    /// updates a stored response, §4.3.4); 2xx answers are what `ttl` is for.
    public static func accepts(status: Int) -> Bool {
        (300...599).contains(status) && status != 304
    }

    /// A status code as a setting or a request names one: exactly three digits.
    public static func status(_ text: some StringProtocol) -> Int? {
        guard text.utf8.count == 3, text.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        return Int(text)
    }

    /// The longest lifetime accepted, as for `ttl`: 100 years.
    public static let maxSeconds: Double = 3_153_600_000

    /// Why `seconds` for `status` cannot be set; nil when it can.
    public static func refusal(status: Int, seconds: Double) -> String? {
        guard accepts(status: status) else { return "status \(status) is not 300–599 (304 excluded)" }
        guard seconds.isFinite, seconds >= 0, seconds <= maxSeconds else {
            return "must be a number of seconds, 0 to 3153600000 (100 years)"
        }
        return nil
    }

    /// These lifetimes with `overrides`' replacing them status by status (an upstream's over the
    /// deployment's, a request's over both).
    public func overridden(by overrides: NegativeTTL) -> NegativeTTL {
        guard !overrides.isEmpty else { return self }
        guard !isEmpty else { return overrides }
        return NegativeTTL(seconds.merging(overrides.seconds) { _, override in override })
    }

    /// The lifetime an answer with `status` is stored for when it has no explicit freshness;
    /// nil when none (or 0) is set.
    public func lifetime(for status: Int) -> Double? {
        guard let lifetime = kept?[status], lifetime > 0, Self.accepts(status: status) else { return nil }
        return lifetime
    }

    /// `404=30s, 502=5s`, by status, for logs and `larder config`.
    public func description(duration: (Double) -> String) -> String {
        seconds.keys.sorted().map { "\($0)=\(duration(seconds[$0] ?? 0))" }.joined(separator: ", ")
    }

    /// From a /fetch `cache.negativeTtl` member: an object of status codes to seconds.
    public static func parse(_ value: JSONValue, field: String) throws(LarderError) -> NegativeTTL {
        guard case .object(let members) = value else {
            throw .invalid(field, "must be an object of status codes to seconds, like {\"404\": 30}")
        }
        var seconds: [Int: Double] = [:]
        for (name, member) in members.sorted(by: { $0.key < $1.key }) {
            guard let status = status(name) else {
                // Not quoted back: it could be of any length.
                throw .invalid(field, "its keys must be status codes of three digits")
            }
            guard case .number(let number) = member else { throw .invalid("\(field).\(name)", "must be a number of seconds") }
            if let refusal = refusal(status: status, seconds: number.double) { throw .invalid("\(field).\(name)", refusal) }
            seconds[status] = number.double
        }
        return NegativeTTL(seconds)
    }
}
