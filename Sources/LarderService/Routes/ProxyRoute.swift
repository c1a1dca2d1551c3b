// The reverse-proxy route: `/proxy/{NAME}/{path…}?{query}` (or every path on the proxy-root
// listener) forwards the request to upstream NAME and answers with the upstream's response as
// it is — status, headers, body, no envelope — through the same cache, as a shared cache
// under RFC 9111:
//  - credentials do not partition the key; a request with Authorization is stored only when
//    the response allows sharing (§3.5); `private` responses are never stored;
//  - the caller's Cache-Control request directives apply (§5.2.1);
//  - HEAD is answered from a stored GET;
//  - If-None-Match / If-Modified-Since are answered with 304 from the response (§4.3.2);
//  - a single byte Range is cut from a stored whole response (206), honouring If-Range; with no
//    whole response stored, RangeFetcher answers it from a stored part or asks for that range only;
//  - every response carries `Age` (§5.1) and `Cache-Status` (RFC 9211); the stored `Date` is
//    never rewritten; hop-by-hop fields (RFC 9110 §7.6.1) are neither forwarded nor passed on.
//    CDN-Cache-Control (RFC 9213) is used by this cache and passed on for the caches after it
//    (a CDN in front of Larder is one), unless the deployment says Larder is the last cache.

import LarderCore
import LarderEngine
import LarderHTTP

struct ProxyRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    /// Prepared GET requests by their wire form (upstream, target, header fields): a repeated
    /// request skips URL parsing and key derivation, as /fetch skips JSON parsing.
    let memo: RequestMemo
    /// What the answers pass on.
    let passing: Passing

    /// What the proxy's answers pass on of a response, and say of it.
    struct Passing: Sendable {
        /// Response fields never passed on (besides hop-by-hop), lower-case: see `withheldFields`.
        let withheld: FieldNames
        /// Cache-Status carries the cache key (`key`, RFC 9211 §2.7; `--cache-status-key`).
        let keyInCacheStatus: Bool
    }

    /// Request fields not forwarded: connection-level ones, and those Larder sets itself. (The
    /// request id and trace context are not forwarded either, nor part of the request memo's key:
    /// every request Larder sends upstream carries the request's own; RequestIdentity.)
    private static let notForwarded = FieldNames(["host", "content-length", "expect"])
    /// Fields a client could use to make the origin answer differently for the same cache key
    /// (the origin reflects or routes on them, but they are not part of the key): the
    /// forwarding headers a proxy in front of Larder would set (Larder is the edge here), and
    /// the URL and method overrides some frameworks honour. Stripped before forwarding.
    /// (Every `x-forwarded-*` field too, by prefix.)
    static let unkeyedOverrides = FieldNames([
        "forwarded", "x-real-ip", "x-host", "x-original-url", "x-rewrite-url", "x-original-host",
        "x-http-method-override", "x-http-method", "x-method-override"
    ])
    /// Conditions (and ranges) Larder evaluates itself for cacheable requests, so the upstream
    /// always sends a full response that can be stored.
    private static let conditionals = FieldNames([
        "if-none-match", "if-modified-since", "if-match", "if-unmodified-since",
        "if-range", "range"
    ])
    /// Response fields never passed on (besides hop-by-hop): the server sets its own framing and
    /// its own Age; the fields tags are read from (Surrogate-Key, Cache-Tag: they are for this
    /// cache, as a CDN keeps them); the targeted fields for Larder alone (Larder-Cache-Control:
    /// every targeted field but CDN-Cache-Control) unless `passOwnCacheControl`; with
    /// `stripTargetedCacheControl`, CDN-Cache-Control too (RFC 9213 §2.1: it is for every cache
    /// of its class in the chain, so by default it goes on).
    static func withheldFields(_ configuration: LarderConfiguration) -> Set<String> {
        var fields: Set<String> = ["content-length", "age"]
        if configuration.stripTargetedCacheControl { fields.insert("cdn-cache-control") }
        if !configuration.passOwnCacheControl {
            fields.formUnion(configuration.targetedCacheControl.filter { $0 != "cdn-cache-control" })
        }
        fields.formUnion(configuration.tagHeaders.map { $0.lowercased() })
        return fields
    }

    /// Answers a proxied request for `target` (path and query, as received) on upstream `name`.
    func handle(_ routeRequest: RouteRequest, upstream name: String, target: String) -> RouteAnswer? {
        let request = routeRequest.http
        guard let upstream = upstreams[name] else {
            let error = LarderError(.unknownUpstream, "no upstream named '\(name)'")
            return RouteAnswer(Self.errorResponse(error), errorCode: error.code.rawValue)
        }
        guard !request.bodyTooLarge else {
            let error = LarderError.invalid("body", "request body is larger than the limit (1 MiB)")
            return RouteAnswer(Self.errorResponse(error), errorCode: error.code.rawValue)
        }
        // MHD accepts only token methods, so this holds; any method is forwarded (§4.4 treats
        // one Larder does not know as unsafe).
        guard let method = HTTPMethod(rawValue: request.method) else {
            let error = LarderError.invalid("method", "is not a token")
            return RouteAnswer(Self.errorResponse(error), errorCode: error.code.rawValue)
        }
        var memoKey: [UInt8] = []
        if method == .get, request.body.isEmpty {
            memoKey.reserveCapacity(256)
            memoKey.appendUTF8(name)
            memoKey.append(0)
            memoKey.appendUTF8(target)
            memoKey.append(0)
            for header in request.headers where !RequestIdentity.isIdentityField(header.name) {
                memoKey.appendUTF8(header.name)
                memoKey.append(0)
                memoKey.appendUTF8(header.value)
                memoKey.append(0)
            }
            if case .fetch(let prepared)? = memo.lookup(memoKey) {
                return answerGet(prepared.identified(routeRequest.identity), request: routeRequest)
            }
        }
        let fetch: FetchRequest
        do {
            fetch = try Self.forwardedRequest(request, method: method, upstream: upstream, target: target)
        } catch {
            return RouteAnswer(Self.errorResponse(error), errorCode: error.code.rawValue)
        }
        if method == .get {
            let prepared = engine.prepare(fetch, for: routeRequest.identity)
            if !memoKey.isEmpty { memo.insert(memoKey) { .fetch(prepared.withoutIdentity) } }
            return answerGet(prepared, request: routeRequest)
        }

        if method == .head {
            // RFC 9111 §4.3.5 / §4: a HEAD can be answered from a stored GET; only when nothing
            // usable is stored does the HEAD go upstream (and is not stored).
            if let stored = engine.storedGet(for: fetch, keepingBody: true) {
                return Self.deliver(stored, method: method, request: request, passing: passing)
            }
            var forward = fetch
            forward.cache.policy = .noStore
            return answer(engine.prepare(forward, for: routeRequest.identity), method: method, request: routeRequest)
        }
        return answer(engine.prepare(fetch, for: routeRequest.identity), method: method, request: routeRequest)
    }

    /// A GET: a single byte range that no stored whole response answers goes to the range
    /// fetcher (stored parts, or only that range from the upstream); anything else as usual.
    private func answerGet(_ prepared: PreparedFetch, request routeRequest: RouteRequest) -> RouteAnswer? {
        let request = routeRequest.http
        guard let range = Self.singleRange(request.headers) else {
            return answer(prepared, method: .get, request: routeRequest)
        }
        let passing = passing
        if let whole = engine.cachedAnswer(for: prepared) {
            return Self.deliver(whole, method: .get, request: request, passing: passing).about(prepared)
        }
        let immediate = engine.ranges.fetch(prepared, range: range) { answer in
            routeRequest.respond(Self.deliver(answer, method: .get, request: request, passing: passing).about(prepared))
        }
        return immediate.map { Self.deliver($0, method: .get, request: request, passing: passing).about(prepared) }
    }

    /// The request's Range when it is one byte range Larder serves, without If-Range (a client's
    /// If-Range is evaluated against a whole stored response, the usual way).
    static func singleRange(_ headers: [(name: String, value: String)]) -> String? {
        var range: String?
        for header in headers {
            if header.name.caseInsensitiveEquals("if-range") { return nil }
            if header.name.caseInsensitiveEquals("range") {
                guard range == nil else { return nil }
                range = header.value
            }
        }
        guard let range, StoredPart.requested(range, total: Int.max / 2) != nil else { return nil }
        return range
    }

    private func answer(_ prepared: PreparedFetch, method: HTTPMethod, request routeRequest: RouteRequest) -> RouteAnswer? {
        let request = routeRequest.http
        let passing = passing
        // The reply is built only for a miss: a hit is answered here.
        switch engine.lookup(prepared) {
        case .answered(let answer):
            return Self.deliver(answer, method: method, request: request, passing: passing).about(prepared)
        case .miss(let miss):
            let immediate = engine.send(miss) { answer in
                routeRequest.respond(Self.deliver(answer, method: method, request: request, passing: passing).about(prepared))
            }
            return immediate.map { Self.deliver($0, method: method, request: request, passing: passing).about(prepared) }
        }
    }

    private static func deliver(
        _ answer: CacheAnswer, method: HTTPMethod, request: HTTPServerRequest,
        passing: Passing
    ) -> RouteAnswer {
        let conditions = request.headers.filter { conditionals.contains(anyCase: $0.name) }
        let response = render(answer, method: method, conditions: conditions, passing: passing)
        var errorCode: String?
        if case .failed(let error) = answer { errorCode = error.code.rawValue }
        return RouteAnswer(response, outcome: answer.outcome, errorCode: errorCode)
    }

    /// The request as it goes upstream: the client's method, path, query, fields and body.
    static func forwardedRequest(
        _ request: HTTPServerRequest, method: HTTPMethod, upstream: NamedUpstream,
        target: String
    ) throws(LarderError) -> FetchRequest {
        guard let base = upstream.url(for: target, cdn: false) else { throw LarderError(.unknownUpstream, "no base URL") }
        let url = try UpstreamURL(parsing: base, mergingQuery: upstream.query, field: "path")
        if let refusal = upstream.refusal(for: url, cdn: false) { throw .invalid("path", refusal) }
        let fields = request.headers.map { HeaderField($0.name, $0.value) }
        let nominated = HopByHop.nominated(in: fields)
        let cacheable = method == .get
        var headers: [HeaderField] = []
        headers.reserveCapacity(fields.count + upstream.headers.count)
        for field in fields {
            let name = field.name.lowercasedASCII
            if HopByHop.contains(name, nominatedBy: nominated) || notForwarded.contains(name) || RequestIdentity.isIdentityField(name)
                || unkeyedOverrides.contains(name) || name.hasPrefix("x-forwarded-")
            {
                continue
            }
            if cacheable, conditionals.contains(name) { continue }
            headers.append(field)
        }
        var originBound: Set<String> = []
        for field in upstream.headers where headers.values(field.name).isEmpty {
            headers.append(field)
            originBound.insert(field.name.lowercasedASCII)
        }
        var options = CacheOptions()
        options.namespace = FetchRequest.reservedNamespacePrefix + upstream.name
        options.staleOnError = upstream.cache.staleOnError
        options.tags = upstream.cache.tags
        options.negativeTTL = upstream.cache.negativeTTL
        var forwarded = FetchRequest(
            method: method, url: url, headers: headers, body: request.body.isEmpty ? nil : request.body,
            cache: options, shared: true)
        forwarded.originBoundHeaders = originBound
        return forwarded
    }

    static func render(
        _ answer: CacheAnswer, method: HTTPMethod, conditions: [(name: String, value: String)],
        passing: Passing
    ) -> HTTPServerResponse {
        let notPassedOn = passing.withheld
        guard case .served(let served) = answer else {
            if case .failed(let error) = answer { return errorResponse(error) }
            return HTTPServerResponse(status: 502)
        }
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(served.headers.count + 2)
        if served.upstreamMs == nil {
            // From the store: names are lower-case and connection-level fields were never kept.
            for field in served.headers where !notPassedOn.contains(field.name) {
                headers.append((field.name, field.value))
            }
        } else {
            let nominated = HopByHop.nominated(in: served.headers)
            for field in served.headers {
                let name = field.name.lowercasedASCII
                if HopByHop.contains(name, nominatedBy: nominated) || notPassedOn.contains(name) { continue }
                headers.append((field.name, field.value))
            }
        }
        let report = served.report
        headers.append(("Age", String(WholeSeconds.of(report.age, rounding: .down))))
        headers.append(("Cache-Status", cacheStatus(report, status: served.status, method: method, withKey: passing.keyInCacheStatus)))

        if !conditions.isEmpty, method == .get || method == .head, served.status == 200,
            notModified(
                conditions: conditions, etag: served.etag,
                lastModified: served.lastModified ?? served.headers.first(named: "date"))
        {
            // §4.3.2 / RFC 9110 §15.4.5: the 304 carries the fields a 200 would, but no body.
            let kept: Set<String> = [
                "cache-control", "content-location", "date", "etag", "expires", "vary", "age", "cache-status",
                "last-modified"
            ]
            return HTTPServerResponse(status: 304, headers: headers.filter { kept.contains($0.name.lowercasedASCII) }, body: [])
        }
        if !conditions.isEmpty, method == .get, served.status == 200 {
            // RFC 9110 §14: a single range is cut from the full response.
            let field = { (name: String) in conditions.first { $0.name.lowercasedASCII == name }?.value }
            let length = served.bodyLength
            switch ByteRange.answer(
                range: field("range"), ifRange: field("if-range"), length: length,
                etag: served.etag, lastModified: served.lastModified)
            {
            case .full:
                break
            case .partial(let bytes):
                headers.append(("Content-Range", "bytes \(bytes.lowerBound)-\(bytes.upperBound)/\(length)"))
                if let file = served.openedBody {
                    return HTTPServerResponse(
                        status: 206, headers: headers,
                        file: HTTPFileBody(file, offset: bytes.lowerBound, length: bytes.count))
                }
                return HTTPServerResponse(status: 206, headers: headers, body: Array(served.body[bytes]))
            case .unsatisfiable:
                headers.removeAll { $0.name.lowercasedASCII == "content-type" }
                headers.append(("Content-Range", "bytes */\(length)"))
                return HTTPServerResponse(status: 416, headers: headers, body: [])
            }
        }
        // A HEAD gets the body too: libmicrohttpd sends only the header section, with the
        // Content-Length a GET would get (RFC 9110 §8.6: any other value is forbidden).
        if let file = served.openedBody {
            return HTTPServerResponse(status: served.status, headers: headers, file: HTTPFileBody(file, offset: 0, length: file.size))
        }
        var response = HTTPServerResponse(status: served.status, headers: headers, body: served.body)
        if method == .head, served.body.isEmpty, served.upstreamMs != nil, served.status >= 200,
            served.status != 204, served.status != 304
        {
            // The upstream's HEAD response: its Content-Length is the GET's (when it is one
            // plain number; otherwise libmicrohttpd's 0 stands, as before).
            response.headContentLength = served.headers.first(named: "content-length").flatMap { value in
                Int(value.trimmingSpaces).flatMap { $0 >= 0 ? $0 : nil }
            }
        }
        return response
    }

    /// RFC 9110 §13.1.2 / §13.1.3, weak comparison for If-None-Match; If-Modified-Since only
    /// when there is no If-None-Match, against Last-Modified or else Date (RFC 9111 §4.3.2).
    static func notModified(conditions: [(name: String, value: String)], etag: String?, lastModified: String?) -> Bool {
        let noneMatch = conditions.filter { $0.name.lowercasedASCII == "if-none-match" }.map(\.value)
        if !noneMatch.isEmpty {
            guard let etag else { return false }
            let candidates = noneMatch.flatMap { $0.split(separator: ",").map { $0.trimmingSpaces } }
            func opaque(_ tag: String) -> String { tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag }
            return candidates.contains { $0 == "*" || opaque($0) == opaque(etag) }
        }
        guard let since = conditions.first(where: { $0.name.lowercasedASCII == "if-modified-since" }).flatMap({ HTTPDate.parse($0.value) }),
            let modified = lastModified.flatMap(HTTPDate.parse)
        else { return false }
        return modified <= since
    }

    /// RFC 9211 Cache-Status for Larder's part in the answer; `withKey`: with the cache key.
    static func cacheStatus(_ report: CacheReport, status: Int, method: HTTPMethod, withKey: Bool = false) -> String {
        // The hot paths, without an array: a hit, and a miss stored.
        if !withKey, report.outcome == .hit, !report.coalesced {
            return "larder; hit; ttl=" + String(WholeSeconds.of(report.ttl ?? 0, rounding: .up))
        }
        if !withKey, report.outcome == .miss, report.stored, let ttl = report.ttl {
            return "larder; fwd=" + (report.forward ?? .uriMiss).rawValue + "; fwd-status=" + String(report.upstreamStatus ?? status)
                + "; stored; ttl=" + String(WholeSeconds.of(ttl, rounding: .up))
        }
        var parts = ["larder"]
        switch report.outcome {
        case .hit:
            parts.append("hit")
            if report.coalesced { parts.append("collapsed") }
            parts.append("ttl=\(WholeSeconds.of(report.ttl ?? 0, rounding: .up))")
        case .stale:
            parts.append("hit")
            parts.append("ttl=0")
            parts.append(
                report.upstreamError == nil
                    ? "detail=stale"
                    : (report.staleOnErrorPolicy ? "detail=stale-on-error" : "detail=stale-if-error"))
        case .revalidated:
            parts.append("fwd=\((report.forward ?? .stale).rawValue)")
            parts.append("fwd-status=304")
            if report.stored { parts.append("stored") }
            if let ttl = report.ttl { parts.append("ttl=\(WholeSeconds.of(ttl, rounding: .up))") }
        case .miss:
            parts.append("fwd=\((report.forward ?? .uriMiss).rawValue)")
            parts.append("fwd-status=\(report.upstreamStatus ?? status)")
            if report.stored {
                parts.append("stored")
                if let ttl = report.ttl { parts.append("ttl=\(WholeSeconds.of(ttl, rounding: .up))") }
            }
        case .bypass:
            parts.append(CacheRules.isCacheable(method: method, ttl: nil) ? "fwd=bypass" : "fwd=method")
            parts.append("fwd-status=\(report.upstreamStatus ?? status)")
        }
        // §2.7: the key, an sf-string (hex digits, nothing to escape).
        if withKey { parts.append("key=\"\(report.key.hex)\"") }
        return parts.joined(separator: "; ")
    }

    static func errorResponse(_ error: LarderError) -> HTTPServerResponse {
        HTTPServerResponse(status: error.status, headers: [("Content-Type", "application/json")], body: error.jsonBody)
    }
}
