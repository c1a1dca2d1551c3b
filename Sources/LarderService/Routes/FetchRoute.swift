// POST /fetch: one request spec in JSON, answered with the JSON envelope and an X-Cache header.

import LarderCore
import LarderEngine
import LarderHTTP

struct FetchRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    let clock: Clock
    /// Prepared requests by body bytes: a repeated spec skips parsing and key derivation.
    let memo: RequestMemo

    func handle(_ request: RouteRequest) throws(LarderError) -> RouteAnswer? {
        if request.http.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        let body = request.http.body
        let prepared: PreparedFetch
        if case .fetch(let known)? = memo.lookup(body) {
            prepared = known
        } else {
            prepared = engine.prepare(try FetchRequest.parse(json: body, upstreams: upstreams))
            memo.insert(body) { .fetch(prepared) }
        }
        if prepared.request.method == .head, let fromGet = engine.storedGet(for: prepared.request) {
            return envelope(fromGet, receivedAt: request.receivedAt).about(prepared)
        }
        // The reply is built only for a miss: a hit is answered here.
        switch engine.lookup(prepared.identified(request.identity)) {
        case .answered(let answer):
            return envelope(answer, receivedAt: request.receivedAt).about(prepared)
        case .miss(let miss):
            let immediate = engine.send(miss) { [self] answer in
                request.respond(envelope(answer, receivedAt: request.receivedAt).about(prepared))
            }
            return immediate.map { envelope($0, receivedAt: request.receivedAt).about(prepared) }
        }
    }

    private func envelope(_ answer: CacheAnswer, receivedAt: Double) -> RouteAnswer {
        switch answer {
        case .failed(let error):
            return RouteAnswer(error: error)
        case .served(let served):
            let totalMs = max(0, (clock.now() - receivedAt) * 1000)
            let body = Envelope.render(
                status: served.status, headersJSON: served.headersJSON, body: served.body,
                kind: served.bodyKind, cache: served.report, totalMs: totalMs, upstreamMs: served.upstreamMs)
            let headers: [(name: String, value: String)] = [
                ("Content-Type", "application/json"), ("X-Cache", served.report.outcome.headerValue)
            ]
            return RouteAnswer(HTTPServerResponse(status: 200, headers: headers, body: body), outcome: served.report.outcome)
        }
    }
}
