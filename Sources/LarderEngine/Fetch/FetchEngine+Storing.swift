// A response from the upstream becomes the answer and, when CacheRules.store allows, an entry:
// the entry's key and variant, the fields kept, the URLs an unsafe method invalidates
// (RFC 9111 §4.4), and a POST response kept for later GETs (RFC 9110 §9.3.3).

import LarderCore
import Logging

extension FetchEngine {
    /// Answers `prepared` with `response` (sent at `sentAt`), storing it when the rules allow,
    /// invalidating what an unsafe method changed, then lands `flight`.
    func complete(_ run: RunningMiss, response: UpstreamResponse, sentAt: Double) {
        let prepared = run.prepared
        let outcome = run.outcome
        let flight = run.flight
        let request = prepared.request
        let derived = prepared.derived
        let options = request.cache
        // Ages are measured on the engine's clock (injected), durations on the upstream's.
        let arrivedAt = clock.now()
        let upstreamMs = (response.responseTime - response.requestTime) * 1000
        // The proxy passes bodies on as they are: only the /fetch envelope needs the kind.
        let kind =
            request.shared
            ? BodyKind.binary
            : BodyKind.classify(contentType: response.headers.first(named: "content-type"), body: response.body)
        var inputs = storeInputs(
            request, partitioned: derived.partitioned, status: response.status,
            headers: response.headers, bodySize: response.body.count,
            sentAt: sentAt, arrivedAt: arrivedAt)
        inputs.replacesSuccess = run.fallback.map { (200...299).contains($0.status) } ?? false
        let decision = CacheRules.store(inputs)
        // The /fetch envelope shows the headers as JSON; the proxy sends the fields as they are.
        let liveHeaders = request.shared ? [] : ResponseHeaders.renderJSON(response.headers, dropCookies: false)
        if let validation = request.validation, let failure = validation.failure(status: response.status, body: response.body) {
            // A failed validation is a failed request, and nothing of it is stored. What the
            // unsafe method changed at the origin still invalidates (RFC 9111 §4.4).
            let error = CacheAnswer.failed(LarderError(.validationFailed, failure))
            let stale = invalidatedURLs(request: request, response: response)
            guard !stale.isEmpty else { return land(flight, with: .notShareable) { run.answer(error) } }
            return invalidate(stale, after: request, response: response, at: arrivedAt) { [self] _ in
                land(flight, with: .notShareable) { run.answer(error) }
            }
        }
        noteCacheability(of: prepared, decision: decision, status: response.status, at: arrivedAt)
        switch decision {
        case .refuse(let reason):
            logger.debug(
                "not stored",
                metadata: ["key": "\(derived.key)", "rule": "\(reason.rawValue)", "request_id": "\(prepared.identity?.id ?? "-")"])
            let report = CacheReport(
                outcome: outcome, key: derived.key, age: 0, ttl: nil, version: options.version,
                stored: false, notStoredBecause: outcome == .bypass ? nil : reason, forward: run.forward,
                upstreamStatus: response.status)
            let served = ServedResponse(
                status: response.status, headersJSON: liveHeaders, headers: response.headers,
                body: response.body, bodyKind: kind, report: report, upstreamMs: upstreamMs,
                etag: response.headers.first(named: "etag"),
                lastModified: response.headers.first(named: "last-modified"))
            let stale = invalidatedURLs(request: request, response: response)
            guard !stale.isEmpty else {
                return land(flight, with: .notShareable) { run.answer(.served(served)) }
            }
            // The answer waits for the invalidation, so the caller's next read sees it.
            invalidate(stale, after: request, response: response, at: arrivedAt) { [self] removed in
                if !removed.isEmpty { logger.debug("invalidated", metadata: ["entries": "\(removed.count)"]) }
                guard
                    let asGet = postResponseAsGetEntry(
                        request: request, response: response, kind: kind,
                        arrivedAt: arrivedAt, sentAt: sentAt)
                else {
                    return land(flight, with: .notShareable) { run.answer(.served(served)) }
                }
                save(asGet) { [self] _ in land(flight, with: .notShareable) { run.answer(.served(served)) } }
            }
        case .store(let stored):
            let entry = self.entry(
                storing: response, for: request, derived: keyForStoring(prepared, response: response), kind: kind, stored: stored,
                at: arrivedAt)
            let freshness = entry.freshness
            let storeSpan = prepared.identity?.span.recordedChild("cache store")
            save(entry) { [self] saved in
                storeSpan?.end(["larder.cache.key": .string(derived.key.hex), "larder.cache.stored": .bool(saved)])
                let report = CacheReport(
                    outcome: outcome, key: entry.primaryKey, age: freshness.age(now: arrivedAt, ttl: options.ttl),
                    ttl: saved ? freshness.remaining(now: arrivedAt, ttl: options.ttl) : nil,
                    version: options.version, stored: saved, forward: run.forward, upstreamStatus: response.status)
                let answer = CacheAnswer.served(
                    ServedResponse(
                        status: response.status, headersJSON: liveHeaders, headers: response.headers, body: response.body,
                        bodyKind: kind, report: report, upstreamMs: upstreamMs, etag: entry.etag, lastModified: entry.lastModified))
                land(flight, with: saved ? .stored(entry) : .unstored(entry)) { run.answer(answer) }
            }
        }
    }

    /// Remembers `prepared`'s key as uncacheable when its answer was refused for a reason of the
    /// response's own, and forgets it when the answer was stored (UncacheableMemory). The
    /// caller's choices (no-store, a policy, credentials) say nothing of the key; neither does a
    /// 5xx, a passing state of the origin, whose misses keep coalescing.
    private func noteCacheability(of prepared: PreparedFetch, decision: StoreDecision, status: Int, at now: Double) {
        let key = prepared.derived.key
        switch decision {
        case .store:
            uncacheable.withLock { if $0.memory.count > 0 { $0.memory.forget(key) } }
        case .refuse(let reason):
            let seconds = limits.uncacheableMemory
            guard seconds > 0, prepared.request.method == .get, Self.isOfTheResponse(reason, status: status) else { return }
            uncacheable.withLock { $0.memory.remember(key, until: now + seconds) }
        }
    }

    /// Whether `refusal` says something of the key's answers rather than of this request.
    private static func isOfTheResponse(_ refusal: StoreRefusal, status: Int) -> Bool {
        switch refusal {
        case .responseNoStore, .responsePrivate, .responseVaries, .objectTooLarge: true
        case .statusNotCacheable: status < 500
        case .policyNoStore, .requestNoStore, .methodNotCacheable, .authorizedRequest, .storedSuccessKept: false
        }
    }

    /// A shared cache's POST response that may answer later GETs (RFC 9110 §9.3.3), as the
    /// entry for that GET; nil when it may not, or when it varies (its variant would be keyed
    /// by the POST's fields).
    private func postResponseAsGetEntry(
        request: FetchRequest, response: UpstreamResponse, kind: BodyKind,
        arrivedAt: Double, sentAt: Double
    ) -> StoredEntry? {
        guard request.shared, request.method == .post, Vary.names(in: response.headers)?.isEmpty == true,
            let location = response.headers.first(named: "content-location"),
            let target = request.url.resolving(location),
            CacheRules.postResponseAnswersGet(
                status: response.status, headers: response.headers,
                contentLocationIsTarget: target.keyString() == request.url.keyString(),
                receivedAt: arrivedAt, targeted: limits.targetedFields)
        else { return nil }
        var get = request
        get.method = .get
        get.body = nil
        let derived = keys.derive(for: get)
        var inputs = storeInputs(
            get, partitioned: derived.partitioned, status: response.status, headers: response.headers,
            bodySize: response.body.count, sentAt: sentAt, arrivedAt: arrivedAt)
        // The POST's ttl is not the GET's: the response's own freshness decides (it has some).
        inputs.ttl = nil
        guard case .store(let stored) = CacheRules.store(inputs) else { return nil }
        return entry(storing: response, for: get, derived: derived, kind: kind, stored: stored, at: arrivedAt)
    }

    /// What `CacheRules.store` is asked about a response to `request`, everywhere the engine
    /// stores; a caller changes only what differs in its case, and says why.
    func storeInputs(
        _ request: FetchRequest, partitioned: Bool, status: Int, headers: [HeaderField], bodySize: Int,
        sentAt: Double, arrivedAt: Double
    ) -> StoreInputs {
        let limits = limits
        var inputs = StoreInputs(
            policy: request.cache.policy, method: request.method, ttl: request.cache.ttl, partitioned: partitioned,
            status: status, headers: headers, bodySize: bodySize, maxBodySize: limits.maxStoredBodyBytes,
            requestTime: sentAt, responseTime: arrivedAt, directives: request.directives,
            sharedWithCredentials: request.shared && request.hasCredentials, shared: request.shared)
        inputs.targetedFields = limits.targetedFields
        inputs.negativeTTL = limits.negativeTTL.overridden(by: request.cache.negativeTTL)
        return inputs
    }

    /// The entry that keeps `response` for `request` under `derived`, stored at `time`: a
    /// varying response is one variant among others under the key (§4.1); fields the
    /// response withholds (`no-cache="…"`, `private="…"`) and cookies are left out.
    func entry(
        storing response: UpstreamResponse, for request: FetchRequest, derived: CacheKeyBuilder.Derived,
        kind: BodyKind, stored: StoredFreshness, at time: Double
    ) -> StoredEntry {
        let varyNames = Vary.names(in: response.headers) ?? []
        let fingerprint = varyNames.isEmpty ? nil : keys.variantFingerprint(names: varyNames, request: request.headers)
        let rowKey = fingerprint.map { CacheKey(hex: derived.key.hex + "." + $0.prefix(32)) } ?? derived.key
        let headers = ResponseHeaders.rendered(
            CacheRules.storableHeaders(response.headers, withholding: stored.withheldFields),
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
        // RFC 9875 §2: its groups, as tags of its origin.
        for group in CacheGroups.tags(CacheGroups.membershipField, in: response.headers, of: request.url)
        where entry.tags.count < CacheTags.maxPerEntry && !entry.tags.contains(group) {
            entry.tags.append(group)
        }
        // A caller that chose a lifetime or a version wants this entry kept (docs/operations.md).
        entry.keepRequested = request.cache.keepRequested || request.cache.ttl != nil || request.cache.versionExplicit
        return entry
    }

    /// Invalidates what a response to an unsafe method changed (`urls`, from `invalidatedURLs`):
    /// removes those URLs' entries (RFC 9111 §4.4), then marks stale the members of the groups
    /// its `Cache-Group-Invalidation` names, of the request's origin only (RFC 9875 §3). Marked
    /// stale rather than removed (a soft purge): a write to one member of a group seldom changes
    /// them all, so most are revalidated with a 304 and keep their bodies, and a stale window
    /// still answers if the origin then fails (§4.4 allows either). Calls back with the keys
    /// touched.
    func invalidate(
        _ urls: [String], after request: FetchRequest, response: UpstreamResponse, at time: Double,
        then: @escaping @Sendable ([CacheKey]) -> Void
    ) {
        store.invalidate(urlKeys: urls) { [self] removed in
            let groups = CacheGroups.tags(CacheGroups.invalidationField, in: response.headers, of: request.url)
            guard !groups.isEmpty else { return then(removed) }
            store.invalidate(tags: groups, at: time) { marked in then(removed + marked) }
        }
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
                target.isSameOrigin(as: request.url)
            {
                urls.append(target.keyString())
            }
        }
        return urls.map(limits.redaction.apply)
    }
}
