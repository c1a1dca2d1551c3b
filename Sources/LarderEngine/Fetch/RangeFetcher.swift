// Partial content in the shared cache (RFC 9111 §3.4), for range requests through the proxy
// when no whole response is stored:
//  - a cold range request asks the upstream for that range only (a 4 GiB file is never fetched
//    whole to answer `bytes=0-1023`), and a 206 it gets is stored as the key's *part*;
//  - a later range inside the part is answered from it;
//  - a range beyond it asks only for the missing bytes (`Range: bytes=N-`, with If-Range on a
//    strong validator) and, when the new part continues the stored one under the same strong
//    validator, combines them; once they cover the whole representation it is stored as a
//    whole response, and ranges are cut from it as for any stored response;
//  - with `rangeFetchOver` set, a representation no larger than that is then fetched whole in
//    the background, so small objects end up stored whole (off by default: a cache that asks
//    for more than the client did surprises origins and the public test suite alike).
// One part per key: the stored bytes from one position on. A part is a row of status 206 next
// to the key's other rows; FetchEngine's lookups never take it for a whole response.

import Foundation
import LarderCore

public struct RangeFetcher: Sendable {
    let engine: FetchEngine
    /// Representations up to this many bytes are fetched whole after a part of them arrived.
    let rangeFetchOver: Int

    public init(engine: FetchEngine, rangeFetchOver: Int) {
        self.engine = engine
        self.rangeFetchOver = rangeFetchOver
    }

    /// Answers a GET with a single byte `range` (nil: the whole representation) that no stored
    /// whole response answers: at once from the stored part, or later through `reply`.
    public func fetch(
        _ prepared: PreparedFetch, range: String?,
        reply: @escaping @Sendable (CacheAnswer) -> Void
    ) -> CacheAnswer? {
        let prepared = engine.namespaces.resolving(prepared)
        let now = engine.clock.now()
        let request = prepared.request
        guard let (entry, part) = storedPart(prepared), let wanted = StoredPart.requested(range, total: part.total) else {
            forward(prepared, range: range, ifRange: nil, stored: nil, reply: reply)
            return nil
        }
        let fresh = entry.freshness.remaining(now: now, ttl: request.cache.ttl) > 0 && !request.directives.noCache
        if fresh, part.covered.contains(wanted.lowerBound), part.covered.contains(wanted.upperBound) {
            engine.store.recordHit(entry.key, at: now)
            return slice(entry, part: part, wanted, now: now, outcome: .hit)
        }
        // Ask only for what is missing after the part, when the request reaches past it.
        if part.covered.contains(wanted.lowerBound) || wanted.lowerBound == part.covered.upperBound,
            wanted.upperBound >= part.covered.upperBound, part.covered.upperBound < part.total
        {
            let validator = entry.etag.flatMap { $0.hasPrefix("W/") ? nil : $0 } ?? (entry.etag == nil ? entry.lastModified : nil)
            forward(
                prepared, range: "bytes=\(part.covered.upperBound)-", ifRange: validator, stored: (entry, part),
                wantsWhole: range == nil, reply: reply)
            return nil
        }
        forward(prepared, range: range, ifRange: nil, stored: nil, reply: reply)
        return nil
    }

    private func storedPart(_ prepared: PreparedFetch) -> (StoredEntry, StoredPart)? {
        guard let entry = engine.store.lookup(prepared.derived.key).first(where: { $0.status == 206 }),
            entry.freshness.version == prepared.request.cache.version,
            let part = StoredPart(contentRange: entry.headerFields.first(named: "content-range"), bodyCount: entry.body.count)
        else { return nil }
        return (entry, part)
    }

    /// A 206 with `wanted` cut from the stored part.
    private func slice(
        _ entry: StoredEntry, part: StoredPart, _ wanted: ClosedRange<Int>, now: Double,
        outcome: CacheOutcome
    ) -> CacheAnswer {
        let offset = wanted.lowerBound - part.first
        let body = Array(entry.body[offset..<(offset + wanted.count)])
        var headers = entry.headerFields.filter { !$0.name.caseInsensitiveEquals("content-range") }
        headers.append(HeaderField("content-range", "bytes \(wanted.lowerBound)-\(wanted.upperBound)/\(part.total)"))
        let report = CacheReport(
            outcome: outcome, key: entry.primaryKey, age: entry.freshness.age(now: now, ttl: nil),
            ttl: entry.freshness.remaining(now: now, ttl: nil), version: entry.freshness.version, stored: true)
        return .served(
            ServedResponse(
                status: 206, headersJSON: ResponseHeaders.renderJSON(headers, dropCookies: true), headers: headers,
                body: body, bodyKind: .binary, report: report, upstreamMs: nil, etag: entry.etag,
                lastModified: entry.lastModified))
    }

    /// Asks the upstream for `range` (nil: the whole representation).
    /// `wantsWhole`: the client asked for the whole representation, so a part that cannot be
    /// completed is not its answer.
    private func forward(
        _ prepared: PreparedFetch, range: String?, ifRange: String?, stored: (StoredEntry, StoredPart)?,
        wantsWhole: Bool = false, reply: @escaping @Sendable (CacheAnswer) -> Void
    ) {
        let request = prepared.request
        let upstreamRequest = engine.upstreamRequest(for: request, .range(range, ifRange: ifRange), identity: prepared.identity)
        let sentAt = engine.clock.now()
        engine.exchange(upstreamRequest, for: request) { result in
            switch result {
            case .failure(let error):
                reply(.failed(error))
            case .success(let response) where response.status == 206:
                received(part: response, for: prepared, stored: stored, wantsWhole: wantsWhole, sentAt: sentAt, reply: reply)
            case .success(let response):
                // A whole response (the upstream ignored Range, or If-Range failed): stored and
                // answered as any miss; the route cuts the range from it.
                engine.complete(
                    RunningMiss(
                        prepared, outcome: .miss, fallback: nil, forward: stored == nil ? .uriMiss : .partial, flight: nil, reply: reply),
                    response: response, sentAt: sentAt)
            }
        }
    }

    private func received(
        part response: UpstreamResponse, for prepared: PreparedFetch, stored: (StoredEntry, StoredPart)?,
        wantsWhole: Bool, sentAt: Double, reply: @escaping @Sendable (CacheAnswer) -> Void
    ) {
        // The client wants the whole: once the new part is kept, ask for the whole unless it completes.
        let fetcher = self
        let answerPart: @Sendable () -> Void
        if wantsWhole {
            answerPart = { fetcher.forward(prepared, range: nil, ifRange: nil, stored: nil, reply: reply) }
        } else {
            let answer = passOn(response, for: prepared, forward: stored == nil ? .uriMiss : .partial)
            answerPart = { reply(answer) }
        }
        guard let part = StoredPart(contentRange: response.headers.first(named: "content-range"), bodyCount: response.body.count) else {
            return answerPart()
        }
        if let (entry, storedPart) = stored, part.first == storedPart.covered.upperBound, part.total == storedPart.total,
            StoredPart.combinable(stored: entry.headerFields, new: response.headers)
        {
            let body = entry.body + response.body
            if storedPart.first == 0, body.count >= part.total {
                // Whole: stored and answered as a whole response (§3.4), the new fields winning.
                let whole = UpstreamResponse(
                    status: 200,
                    headers: response.headers.filter {
                        !$0.name.caseInsensitiveEquals("content-range") && !$0.name.caseInsensitiveEquals("content-length")
                    }, body: Array(body.prefix(part.total)), requestTime: response.requestTime, responseTime: response.responseTime)
                return engine.complete(
                    RunningMiss(prepared, outcome: .miss, fallback: nil, forward: .partial, flight: nil, reply: reply), response: whole,
                    sentAt: sentAt)
            }
            var combined = response
            combined.body = body
            combined.headers =
                response.headers.filter { !$0.name.caseInsensitiveEquals("content-range") }
                + [HeaderField("Content-Range", "bytes \(storedPart.first)-\(storedPart.first + body.count - 1)/\(part.total)")]
            return store(combined, for: prepared, sentAt: sentAt, then: answerPart)
        }
        store(response, for: prepared, sentAt: sentAt) {
            answerPart()
            if !wantsWhole, part.total <= rangeFetchOver, !part.isComplete { fetchWhole(prepared) }
        }
    }

    /// The upstream's 206 as this client's answer.
    private func passOn(_ response: UpstreamResponse, for prepared: PreparedFetch, forward: ForwardReason) -> CacheAnswer {
        .served(
            ServedResponse(
                status: 206, headersJSON: ResponseHeaders.renderJSON(response.headers, dropCookies: false), headers: response.headers,
                body: response.body, bodyKind: .binary,
                report: CacheReport(
                    outcome: .miss, key: prepared.derived.key, age: 0, ttl: nil, version: prepared.request.cache.version,
                    stored: false, forward: forward, upstreamStatus: response.status),
                upstreamMs: (response.responseTime - response.requestTime) * 1000, etag: response.headers.first(named: "etag"),
                lastModified: response.headers.first(named: "last-modified")))
    }

    /// Keeps a 206 as the key's part when the response allows storing (a varying one is not kept).
    private func store(_ response: UpstreamResponse, for prepared: PreparedFetch, sentAt: Double, then: @escaping @Sendable () -> Void) {
        let request = prepared.request
        let now = engine.clock.now()
        var inputs = engine.storeInputs(
            request, partitioned: false, status: 206, headers: response.headers,
            bodySize: response.body.count, sentAt: sentAt, arrivedAt: now)
        // A part is kept for the key's GET, by the response's own freshness.
        inputs.method = .get
        inputs.ttl = nil
        inputs.partial = true
        guard Vary.names(in: response.headers)?.isEmpty == true, case .store(let stored) = CacheRules.store(inputs)
        else { return then() }
        var entry = engine.entry(storing: response, for: request, derived: prepared.derived, kind: .binary, stored: stored, at: now)
        entry.key = CacheKey(hex: prepared.derived.key.hex + ".part")
        engine.store.save(entry) { _ in then() }
    }

    /// A small representation is fetched whole in the background, so it ends up stored whole.
    private func fetchWhole(_ prepared: PreparedFetch) {
        var whole = prepared.request
        whole.headers.removeAll { $0.name.caseInsensitiveEquals("range") || $0.name.caseInsensitiveEquals("if-range") }
        whole.cache.policy = .reload
        _ = engine.fetch(engine.prepare(whole)) { _ in }
    }
}
