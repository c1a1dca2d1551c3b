// POST /batch: many /fetch specs in one call (see BatchRunner). Answers with one JSON
// document in request order, or — with `Accept: application/x-ndjson` — streams one line per
// request as it completes and a summary line last, so a caller sees the first results while
// slow ones still run. A client that goes away cancels its batch.

import LarderCore
import LarderEngine
import LarderHTTP

struct BatchRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    let clock: Clock
    let maxRequests: Int
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

    /// `fail` renders (and logs) an error; `finish` logs the final answer.
    func handle(_ request: HTTPServerRequest, responder: HTTPResponder, receivedAt: Double,
                fail: (LarderError) -> HTTPServerResponse,
                finish: @escaping @Sendable (HTTPServerResponse) -> HTTPServerResponse) -> HTTPServerResponse? {
        if request.bodyTooLarge { return fail(.invalid("body", "request body is larger than the limit")) }
        let batch: PreparedBatch
        if case .batch(let known)? = memo.lookup(request.body) {
            batch = known
        } else {
            do {
                let parsed = try BatchRequest.parse(json: request.body, upstreams: upstreams, maxRequests: maxRequests)
                batch = PreparedBatch(ids: parsed.items.map(\.id), items: parsed.items.map { engine.prepare($0.request) },
                                      mode: parsed.mode, concurrency: parsed.concurrency, timeoutMs: parsed.timeoutMs)
            } catch {
                return fail(error)
            }
            memo.insert(request.body, .batch(batch))
        }
        let streaming = ItemRendering.wantsNDJSON(request)
        let clock = self.clock
        let ids = batch.ids
        if streaming {
            let stream = HTTPResponseStream()
            let run = BatchRun(engine: engine, items: batch.items, mode: batch.mode, concurrency: batch.concurrency, clock: clock,
                               timeoutMs: batch.timeoutMs,
                               onItem: { outcome in
                                   stream.write(ItemRendering.line(ItemRendering.item(outcome, id: ids[outcome.index], index: outcome.index,
                                                                                      receivedAt: receivedAt)))
                               },
                               onFinish: { outcomes in
                                   stream.write(ItemRendering.line(Self.summary(outcomes, ids: ids, responses: nil, receivedAt: receivedAt, clock: clock)))
                                   stream.finish()
                               })
            responder.onClientGone { run.cancel() }
            run.start()
            return finish(HTTPServerResponse(status: 200, headers: [("Content-Type", "application/x-ndjson")], stream: stream))
        }
        let run = BatchRun(engine: engine, items: batch.items, mode: batch.mode, concurrency: batch.concurrency, clock: clock,
                               timeoutMs: batch.timeoutMs,
                           onItem: { _ in },
                           onFinish: { outcomes in
                               let responses = outcomes.map { ItemRendering.item($0, id: ids[$0.index], index: nil, receivedAt: receivedAt) }
                               let body = Self.summary(outcomes, ids: ids, responses: responses, receivedAt: receivedAt, clock: clock)
                               responder.respond(finish(HTTPServerResponse(status: 200, headers: [("Content-Type", "application/json")], body: body)))
                           })
        responder.onClientGone { run.cancel() }
        run.start()
        return nil
    }

    /// `{"ok":…,"failed":[ids],"responses":[…],"timing":{"totalMs":…}}` (no `responses` in the
    /// stream's last line).
    static func summary(_ outcomes: [ItemOutcome], ids: [String], responses: [[UInt8]]?, receivedAt: Double, clock: Clock) -> [UInt8] {
        let failed = outcomes.filter { $0.state == .failed }.map { ids[$0.index] }
        let ok = outcomes.allSatisfy { $0.state == .done }
        var out: [UInt8] = Array(#"{"ok":"#.utf8)
        out.append(contentsOf: (ok ? "true" : "false").utf8)
        out.append(contentsOf: #","failed":["#.utf8)
        for (index, id) in failed.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(id, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if let responses {
            out.append(contentsOf: #","responses":["#.utf8)
            for (index, response) in responses.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: response)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #","timing":{"totalMs":"#.utf8)
        JSONWriter.appendMilliseconds(max(0, (clock.now() - receivedAt) * 1000), to: &out)
        out.append(contentsOf: "}}".utf8)
        return out
    }
}

/// How batch requests and chain steps appear in responses: the /fetch envelope with the
/// item's `id` (and `index` when streamed) and `state` in front.
enum ItemRendering {
    static func wantsNDJSON(_ request: HTTPServerRequest) -> Bool {
        request.headers.contains { $0.name.caseInsensitiveEquals("accept") && $0.value.lowercasedASCII.contains("application/x-ndjson") }
    }

    static func line(_ object: [UInt8]) -> [UInt8] { object + [UInt8(ascii: "\n")] }

    /// `{"id":…,"index":…,"state":…, …envelope or error…}`
    static func item(_ outcome: ItemOutcome, id: String, index: Int?, receivedAt: Double) -> [UInt8] {
        var out: [UInt8] = Array(#"{"id":"#.utf8)
        JSONWriter.appendString(id, to: &out)
        if let index {
            out.append(contentsOf: #","index":"#.utf8)
            out.append(contentsOf: String(index).utf8)
        }
        out.append(contentsOf: #","state":""#.utf8)
        out.append(contentsOf: outcome.state.rawValue.utf8)
        out.append(UInt8(ascii: "\""))
        switch outcome.answer {
        case .served(let served)?:
            let envelope = Envelope.render(status: served.status, headersJSON: served.headersJSON, body: served.body,
                                           kind: served.bodyKind, cache: served.report,
                                           totalMs: max(0, (outcome.finishedAt - receivedAt) * 1000), upstreamMs: served.upstreamMs)
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: envelope.dropFirst())
            return out
        case .failed(let error)?:
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: error.jsonBody.dropFirst())
            return out
        case nil:
            out.append(UInt8(ascii: "}"))
            return out
        }
    }
}
