// POST /batch: many /fetch specs in one call (see BatchRunner). Answers with one JSON
// document in request order, or — with `Accept: application/x-ndjson` — streams one line per
// request as it completes and a summary line last, so a caller sees the first results while
// slow ones still run (ItemAnswer, shared with /chain).

import LarderCore
import LarderEngine
import LarderHTTP
import LarderSync

struct BatchRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    let clock: Clock
    let maxRequests: Int
    /// Bytes of rendered items one answer may hold (`--max-batch-bytes`).
    let maxAnswerBytes: Int
    /// Parsed batches by body bytes: a repeated batch (a dashboard's 20 tiles) skips parsing
    /// and key derivation, as /fetch does.
    let memo: RequestMemo

    struct PreparedBatch: Sendable {
        let ids: [String]
        let items: [PreparedFetch]
        let mode: BatchMode
        let concurrency: Int
        let timeoutMs: Int
    }

    func handle(_ routeRequest: RouteRequest) throws(LarderError) -> RouteAnswer? {
        let request = routeRequest.http
        let receivedAt = routeRequest.receivedAt
        if request.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        let batch: PreparedBatch
        if case .batch(let known)? = memo.lookup(request.body) {
            batch = known
        } else {
            let parsed = try BatchRequest.parse(json: request.body, upstreams: upstreams, maxRequests: maxRequests)
            batch = PreparedBatch(
                ids: parsed.items.map(\.id), items: parsed.items.map { engine.prepare($0.request) },
                mode: parsed.mode, concurrency: parsed.concurrency, timeoutMs: parsed.timeoutMs)
            memo.insert(request.body) { .batch(batch) }
        }
        let clock = self.clock
        let ids = batch.ids
        return ItemAnswer.answer(routeRequest, ids: ids, maxAnswerBytes: maxAnswerBytes) { [engine] sink, finish in
            BatchRun(
                engine: engine, items: batch.items.map { $0.identified(routeRequest.identity) }, mode: batch.mode,
                concurrency: batch.concurrency, clock: clock,
                timeoutMs: batch.timeoutMs, sink: sink,
                onFinish: { outcomes in
                    finish { responses, line in
                        Self.summary(outcomes, ids: ids, responses: &responses, receivedAt: receivedAt, clock: clock, line: line)
                    }
                })
        }
    }

    /// `{"ok":…,"failed":[ids],"responses":[…],"timing":{"totalMs":…}}` (no `responses` in the
    /// stream's last line). The rendered responses are let go of as they are copied in.
    static func summary(
        _ outcomes: [ItemOutcome], ids: [String], responses: inout [[UInt8]]?, receivedAt: Double, clock: Clock,
        line: Bool = false
    ) -> [UInt8] {
        let failed = outcomes.filter { $0.state == .failed }.map { ids[$0.index] }
        let ok = outcomes.allSatisfy { $0.state == .done }
        var out: [UInt8] = []
        out.reserveCapacity((responses?.reduce(0) { $0 + $1.count + 1 } ?? 0) + 64 * ids.count + 128)
        out.append(contentsOf: #"{"ok":"#.utf8)
        out.append(contentsOf: (ok ? "true" : "false").utf8)
        out.append(contentsOf: #","failed":["#.utf8)
        for (index, id) in failed.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(id, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if responses != nil {
            out.append(contentsOf: #","responses":["#.utf8)
            for index in responses!.indices {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: responses![index])
                responses![index] = []
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #","timing":{"totalMs":"#.utf8)
        JSONWriter.appendMilliseconds(max(0, (clock.now() - receivedAt) * 1000), to: &out)
        out.append(contentsOf: "}}".utf8)
        if line { out.append(UInt8(ascii: "\n")) }
        return out
    }
}

/// How batch requests and chain steps appear in responses: the /fetch envelope with the
/// item's `id` (and `index` when streamed) and `state` in front.
enum ItemRendering {
    static func wantsNDJSON(_ request: HTTPServerRequest) -> Bool {
        request.headers.contains { $0.name.caseInsensitiveEquals("accept") && $0.value.lowercasedASCII.contains("application/x-ndjson") }
    }

    /// `{"id":…,"index":…,"state":…, …envelope…, "error":{…}}`: a done item has the envelope, a
    /// failed one the error — and the envelope too when the upstream's status failed it. `line`
    /// ends it with a newline (NDJSON), in the same buffer.
    static func item(_ outcome: ItemOutcome, id: String, index: Int?, receivedAt: Double, line: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        if let served = outcome.response {
            // Room for the body as the envelope writes it (text escaped, binary in base64), so
            // a large one is written into one buffer, once.
            out.reserveCapacity(served.body.count * (served.bodyKind == .json ? 1 : 2) + served.headersJSON.count + 512)
        }
        out.append(contentsOf: #"{"id":"#.utf8)
        JSONWriter.appendString(id, to: &out)
        if let index {
            out.append(contentsOf: #","index":"#.utf8)
            out.append(contentsOf: String(index).utf8)
        }
        out.append(contentsOf: #","state":""#.utf8)
        out.append(contentsOf: outcome.state.rawValue.utf8)
        out.append(UInt8(ascii: "\""))
        if let served = outcome.response {
            out.append(UInt8(ascii: ","))
            Envelope.appendMembers(
                status: served.status, headersJSON: served.headersJSON, body: served.body, kind: served.bodyKind,
                cache: served.report, totalMs: max(0, (outcome.finishedAt - receivedAt) * 1000),
                upstreamMs: served.upstreamMs, to: &out)
        }
        if let error = outcome.error {
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: error.jsonBody.dropFirst().dropLast())
        }
        out.append(UInt8(ascii: "}"))
        if line { out.append(UInt8(ascii: "\n")) }
        return out
    }
}
