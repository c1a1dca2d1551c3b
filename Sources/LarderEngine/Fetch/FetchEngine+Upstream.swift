// Going upstream: the request built once (upstreamRequest), sent and counted (exchange), and
// what comes back: a 304 that revalidates a stored entry (RFC 9111 §4.3.3, §4.3.4), a failure
// a stale entry may answer (RFC 5861 §4, RFC 9111 §4.2.4), or a response to store
// (FetchEngine+Storing).

import Dispatch
import LarderCore
import Logging

extension FetchEngine {
    /// Sends `run`'s request upstream; stores and answers with the response. Its fallback is
    /// revalidated (RFC 9111 §4.3.1), and may answer instead of an upstream failure
    /// (stale-if-error); with `fallbackGone` (a 304 confirmed an entry that is gone, purged or
    /// damaged) there is none: the request goes without conditions, and a failure is answered
    /// as it is.
    func sendUpstream(_ run: RunningMiss, fallbackGone: Bool = false) {
        let request = run.request
        let fallback = fallbackGone ? nil : run.fallback
        let validating = Self.revalidating(fallback, for: request)
        var upstreamRequest = upstreamRequest(for: request, .whole(revalidating: validating), identity: run.prepared.identity)
        if let cancellation = run.cancellation {
            // The leader's caller gave up: abort the transfer unless others wait on it. Removing
            // the flight under the lock means nobody can join it after that decision. Each
            // transfer sent for the miss (a refetch after a 304 too) has its handler; the caller
            // may have given up before this one was registered (it then runs at once).
            let transfer = Cancellation()
            upstreamRequest.cancellation = transfer
            // Weakly: the caller's cancellation outlives the miss (and `run` holds it); a miss
            // that is over has nothing to abort.
            cancellation.onCancel { [self, weak run] in
                guard let run else { return }
                run.giveUp { _ in
                    if run.callerGaveUp, abandonsFlight(of: run) { transfer.cancel() }
                }
            }
        }
        run.sent(conditional: validating != nil)
        let sentAt = clock.now()
        exchange(upstreamRequest, for: request) { [self] result in
            // Completions arrive on an upstream driver's thread, which runs other transfers too;
            // a large body's checks (UTF-8, JSON) and copies happen elsewhere, so they are not
            // held up behind them.
            if case .success(let response) = result, response.body.count > Self.offloadBodyBytes {
                DispatchQueue.global(qos: .userInitiated).async { [self] in
                    received(result, run: run, fallback: fallback, validating: validating, sentAt: sentAt)
                }
            } else {
                received(result, run: run, fallback: fallback, validating: validating, sentAt: sentAt)
            }
        }
    }

    /// Ends `run`'s flight when nobody waits on it (FlightTable.abandon); true when nobody does
    /// (or it leads none), so that its transfer may stop.
    func abandonsFlight(of run: RunningMiss) -> Bool {
        run.flight.map(flights.abandon) ?? true
    }

    /// What the engine asks the upstream for, besides the caller's own request.
    enum UpstreamAsk {
        /// The representation; with an entry, conditionally on its validators (RFC 9111 §4.3.1).
        case whole(revalidating: StoredEntry?)
        /// A byte range of a GET (RFC 9110 §14.2), the caller's Range and If-Range replaced by these.
        case range(String?, ifRange: String?)

        /// The method the upstream is asked with.
        func method(of request: FetchRequest) -> HTTPMethod {
            if case .range = self { return .get }
            return request.method
        }
    }

    /// The one way a request goes upstream: the caller's request with what `ask` adds, this
    /// instance's CDN-Loop token, the caller's request id and trace context, the engine's limits,
    /// and how redirects are treated.
    func upstreamRequest(for request: FetchRequest, _ ask: UpstreamAsk, identity: RequestIdentity?) -> UpstreamRequest {
        var headers = request.headers
        // OpenTelemetry's HTTP client span: named by the method, ended with the exchange.
        let span = identity?.span.child(ask.method(of: request).rawValue, kind: .client)
        if let identity, let span {
            headers.removeAll { RequestIdentity.isIdentityField($0.name) }
            headers.append(contentsOf: identity.upstreamFields(for: span))
        }
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
        var upstreamRequest = UpstreamRequest(
            method: method, url: request.url, headers: headers, body: body,
            timeoutMs: request.timeoutMs, maxBodyBytes: limits.maxUpstreamBodyBytes)
        // /fetch follows redirects for its caller; the proxy passes them on.
        upstreamRequest.followRedirects = !request.shared
        upstreamRequest.originBoundHeaders = request.originBoundHeaders
        upstreamRequest.progress = request.progress
        upstreamRequest.span = span
        // A resumed download sends a Range of its own, which would replace the one asked for.
        if case .whole = ask { upstreamRequest.resumable = request.resumable }
        return upstreamRequest
    }

    /// OpenTelemetry's HTTP client span attributes (semantic conventions, HTTP spans), the URL
    /// with --redact-query applied.
    static func clientSpanAttributes(_ request: UpstreamRequest, redaction: QueryRedaction, status: Int?) -> SpanAttributes {
        var attributes: SpanAttributes = [
            "http.request.method": .string(request.method.rawValue),
            "url.full": .string(redaction.apply(request.url.absoluteString)),
            "server.address": .string(request.url.host),
            "server.port": .int(request.url.port ?? (request.url.scheme == "https" ? 443 : 80))
        ]
        if let status { attributes["http.response.status_code"] = .int(status) }
        return attributes
    }

    /// RFC 9111 §4.3.1: the stored entry to revalidate with its validators instead of
    /// re-downloading it; nil when there is none, or the caller sent its own conditions (then
    /// the answer is theirs).
    static func revalidating(_ fallback: StoredEntry?, for request: FetchRequest) -> StoredEntry? {
        guard let fallback, request.cache.policy == .useProtocol,
            request.headers.values("if-none-match").isEmpty, request.headers.values("if-modified-since").isEmpty,
            fallback.etag != nil || fallback.lastModified != nil
        else { return nil }
        return fallback
    }

    /// Sends `upstreamRequest`, counting the exchange under `request`'s upstream (a named one,
    /// or "fetch" for a URL) for the metrics.
    func exchange(
        _ upstreamRequest: UpstreamRequest, for request: FetchRequest,
        completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void
    ) {
        let namespace = request.cache.namespace
        let upstreamName =
            namespace.hasPrefix(FetchRequest.reservedNamespacePrefix)
            ? String(namespace.dropFirst(FetchRequest.reservedNamespacePrefix.count)) : "fetch"
        let span = upstreamRequest.span
        let redaction = limits.redaction
        upstream.send(upstreamRequest) { [traffic] result in
            switch result {
            case .success(let response):
                traffic.exchanged(
                    upstream: upstreamName, status: response.status, errorCode: nil,
                    seconds: response.responseTime - response.requestTime)
                span?.end(
                    Self.clientSpanAttributes(upstreamRequest, redaction: redaction, status: response.status),
                    errorType: response.status >= 500 ? String(response.status) : nil)
            case .failure(let error):
                traffic.exchanged(upstream: upstreamName, status: nil, errorCode: error.code.rawValue, seconds: 0)
                span?.end(Self.clientSpanAttributes(upstreamRequest, redaction: redaction, status: nil), errorType: error.code.rawValue)
            }
            completion(result)
        }
    }

    /// Bodies larger than this are handled off the upstream's thread.
    static let offloadBodyBytes = 256 << 10

    private func received(
        _ result: Result<UpstreamResponse, LarderError>, run: RunningMiss, fallback: StoredEntry?, validating: StoredEntry?,
        sentAt: Double
    ) {
        let request = run.request
        switch result {
        case .failure(let error):
            let answer = staleOnError(fallback, request: request, error: error.code.rawValue) ?? .failed(error)
            land(run.flight, with: .failed(error)) { run.answer(answer) }
        case .success(let response):
            if run.received(status: response.status) == .revalidate, let validating {
                return revalidated(run, entry: validating, notModified: response, sentAt: sentAt)
            }
            if CacheRules.isServerError(response.status),
                let stale = staleOnError(
                    fallback, request: request,
                    error: "upstream_status_\(response.status)")
            {
                land(run.flight, with: .failed(LarderError(.upstreamError, "upstream answered \(response.status)"))) { run.answer(stale) }
                return
            }
            complete(run, response: response, sentAt: sentAt)
        }
    }

    /// A 304 confirmed `entry`: update its headers and freshness from the 304 (RFC 9111
    /// §4.3.4), store it, and serve the stored body. If the entry vanished meanwhile (purged,
    /// damaged), there is no body to serve: ask again without conditions.
    private func revalidated(_ run: RunningMiss, entry: StoredEntry, notModified: UpstreamResponse, sentAt: Double) {
        let prepared = run.prepared
        let flight = run.flight
        let options = prepared.request.cache
        guard
            let current = store.lookup(entry.primaryKey).first(where: { $0.key == entry.key })
                .flatMap({ withBody($0, forSending: false) }),
            current.freshness.version == options.version
        else {
            logger.debug(
                "304 for an entry that is gone; fetching in full",
                metadata: ["key": "\(entry.key)", "request_id": "\(prepared.identity?.id ?? "-")"])
            // Asked again only for someone: a caller that gave up, with nobody waiting on its
            // flight, leaves nothing to ask for.
            if run.callerGaveUp, abandonsFlight(of: run) {
                return land(flight, with: .notShareable) {}
            }
            return sendUpstream(run, fallbackGone: true)
        }
        if let validation = prepared.request.validation, let failure = validation.failure(status: current.status, body: current.body) {
            return land(flight, with: .notShareable) { run.answer(.failed(LarderError(.validationFailed, failure))) }
        }
        let now = clock.now()
        let headers = ResponseHeaders.updated(current.headerFields, with: notModified.headers)
        let upstreamMs = (notModified.responseTime - notModified.requestTime) * 1000
        let decision = CacheRules.store(
            storeInputs(
                prepared.request, partitioned: prepared.derived.partitioned,
                status: current.status, headers: headers, bodySize: current.body.count,
                sentAt: sentAt, arrivedAt: now))
        guard case .store(let stored) = decision else {
            // The origin now forbids storing: serve what it confirmed, keep nothing.
            let report = CacheReport(
                outcome: .revalidated, key: entry.primaryKey, age: 0, ttl: nil, version: options.version,
                stored: false, forward: run.forward, upstreamStatus: 304)
            let answer = CacheAnswer.served(
                ServedResponse(
                    status: current.status, headersJSON: ResponseHeaders.renderJSON(headers, dropCookies: true), headers: headers,
                    body: current.body, bodyKind: current.bodyKind, report: report, upstreamMs: upstreamMs,
                    etag: headers.first(named: "etag"), lastModified: headers.first(named: "last-modified")))
            return land(flight, with: .notShareable) { run.answer(answer) }
        }
        var update = current
        update.headersJSON = ResponseHeaders.renderJSON(
            CacheRules.storableHeaders(headers, withholding: stored.withheldFields),
            dropCookies: true)
        update.freshness = stored.entry(storedAt: now, version: options.version)
        update.etag = headers.first(named: "etag")
        update.lastModified = headers.first(named: "last-modified")
        let refreshed = update
        save(refreshed, counting: false) { [self] saved in
            let report = CacheReport(
                outcome: .revalidated, key: entry.primaryKey, age: 0,
                ttl: saved ? refreshed.freshness.remaining(now: now, ttl: options.ttl) : nil,
                version: options.version, stored: saved, forward: run.forward, upstreamStatus: 304)
            // This caller gets what the origin just confirmed, Set-Cookie included; what others
            // get later is the stored form.
            let answer = CacheAnswer.served(
                ServedResponse(
                    status: refreshed.status, headersJSON: ResponseHeaders.renderJSON(headers, dropCookies: false), headers: headers,
                    body: refreshed.body,
                    bodyKind: refreshed.bodyKind, report: report, upstreamMs: upstreamMs, etag: refreshed.etag,
                    lastModified: refreshed.lastModified))
            land(flight, with: saved ? .stored(refreshed) : .notShareable) { run.answer(answer) }
        }
    }

    /// The stale entry as the answer to a failed upstream request, when stale-if-error allows.
    func staleOnError(_ entry: StoredEntry?, request: FetchRequest, error: String) -> CacheAnswer? {
        let now = clock.now()
        let options = request.cache
        guard let entry else { return nil }
        var byPolicy = false
        if !CacheRules.mayServeStaleOnError(
            entry.freshness, now: now, ttl: options.ttl, window: options.staleIfError,
            requested: request.directives.staleIfError)
        {
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
}
