// POST /chain: dependent steps (see ChainPlan and ChainRun). Answers with every step's result
// and the rendered `output`, or — with `Accept: application/x-ndjson` — one line per step as it
// finishes and a summary line last (ItemAnswer, shared with /batch).

import LarderCore
import LarderEngine
import LarderHTTP
import LarderRE2
import LarderSync

/// Checks a plan's patterns for their bounds without compiling them (ChainRoute.handle).
private struct UncompiledPatterns: TextPatternCompiler {
    struct Uncompiled: TextPattern {
        var programSize: Int { 0 }
        func isFound(in text: String) -> Bool { false }
    }

    func compile(_ source: String) throws(TextPatternRefusal) -> any TextPattern { Uncompiled() }
}

struct ChainRoute: Sendable {
    let engine: FetchEngine
    let upstreams: [String: NamedUpstream]
    let clock: Clock
    let maxSteps: Int
    /// Bytes of rendered steps one answer may hold (`--max-batch-bytes`).
    let maxAnswerBytes: Int
    /// Parsed chains by body bytes, and prepared step requests by their rendered bytes: a
    /// repeated chain over fresh entries skips parsing and key derivation, as /fetch does.
    let memo: RequestMemo
    let steps: RequestMemo

    func handle(_ routeRequest: RouteRequest) throws(LarderError) -> RouteAnswer? {
        let request = routeRequest.http
        if request.bodyTooLarge { throw .invalid("body", "request body is larger than the limit") }
        if case .chain(let known)? = memo.lookup(request.body) { return run(known, for: routeRequest) }
        // Checked here without compiling its patterns: RE2 builds Unicode classes at a cost its
        // memory bound does not see (`(?i)[\pL\PL]` takes half a millisecond), so a chain that has
        // any is compiled, parsed again, where its conditions are judged, off the event loop.
        let unchecked = try ChainPlan.parse(json: request.body, maxSteps: maxSteps, patterns: UncompiledPatterns())
        guard unchecked.hasPatterns else {
            memo.insert(request.body) { .chain(unchecked) }
            return run(unchecked, for: routeRequest)
        }
        let maxSteps = self.maxSteps
        let clock = self.clock
        ChainRun.conditions.async {
            do throws(LarderError) {
                // Not remembered: compiled patterns take far more than the bytes the memo counts.
                var plan = try ChainPlan.parse(json: request.body, maxSteps: maxSteps, patterns: RE2Compiler())
                // The time it waited here is the chain's too.
                let waited = Int((clock.now() - routeRequest.receivedAt) * 1000)
                guard waited < plan.timeoutMs else {
                    throw LarderError(.upstreamTimeout, "the chain did not start within its \(plan.timeoutMs) ms")
                }
                plan.timeoutMs -= waited
                if let answer = run(plan, for: routeRequest) { routeRequest.respond(answer) }
            } catch {
                routeRequest.respond(RouteAnswer(error: error))
            }
        }
        return nil
    }

    /// Runs `plan`: its answer now, or nil when it is given later through `routeRequest`.
    private func run(_ plan: ChainPlan, for routeRequest: RouteRequest) -> RouteAnswer? {
        let receivedAt = routeRequest.receivedAt
        let upstreams = self.upstreams
        let clock = self.clock
        let ids = plan.steps.map(\.id)
        let engine = self.engine
        let steps = self.steps
        let identity = routeRequest.identity
        let makeRequest: @Sendable (JSONValue, String) throws(LarderError) -> PreparedFetch = { value, path throws(LarderError) in
            let bytes = value.canonicalBytes
            if case .fetch(let known)? = steps.lookup(bytes) { return known.identified(identity) }
            let prepared = engine.prepare(try FetchRequest.parse(value, path: path, upstreams: upstreams))
            steps.insert(bytes) { .fetch(prepared) }
            return prepared.identified(identity)
        }
        // With `include: output`, the document holds the failed steps only.
        let keep: @Sendable (ItemOutcome) -> Bool = { !plan.outputOnly || $0.state == .failed }
        return ItemAnswer.answer(routeRequest, ids: ids, maxAnswerBytes: maxAnswerBytes, keep: keep) { sink, finish in
            ChainRun(
                engine: engine, plan: plan, clock: clock, prepare: makeRequest, sink: sink,
                onFinish: { result in
                    finish { steps, line in
                        Self.summary(result, plan: plan, steps: &steps, receivedAt: receivedAt, clock: clock, line: line)
                    }
                })
        }
    }

    /// `{"ok", "output", "steps": {id: {…}}, "order": [ids], "failed": [ids], "error", "timing"}`;
    /// with `include: "output"`, steps only for failures. `steps`: the steps as rendered, by
    /// index (nil in the stream's last line, which has no `steps`), let go of as copied in.
    static func summary(
        _ result: ChainResult, plan: ChainPlan, steps: inout [[UInt8]]?, receivedAt: Double, clock: Clock,
        line: Bool = false
    ) -> [UInt8] {
        let ids = plan.steps.map(\.id)
        let failed = result.outcomes.compactMap { $0 }.filter { $0.state == .failed }
        let includeSteps = steps != nil
        var out: [UInt8] = []
        out.reserveCapacity((steps?.reduce(0) { $0 + $1.count + 80 } ?? 0) + 256)
        out.append(contentsOf: #"{"ok":"#.utf8)
        out.append(contentsOf: (result.error == nil ? "true" : "false").utf8)
        if let output = result.output {
            out.append(contentsOf: #","output":"#.utf8)
            output.render(into: &out)
        }
        if includeSteps {
            out.append(contentsOf: #","steps":{"#.utf8)
            var first = true
            for outcome in result.outcomes.compactMap({ $0 }) where !plan.outputOnly || outcome.state == .failed {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                JSONWriter.appendString(ids[outcome.index], to: &out)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: steps![outcome.index])
                steps![outcome.index] = []
            }
            out.append(UInt8(ascii: "}"))
        }
        if !plan.outputOnly || !includeSteps {
            out.append(contentsOf: #","order":["#.utf8)
            for (position, index) in result.order.enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                JSONWriter.appendString(ids[index], to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: #","failed":["#.utf8)
        for (position, outcome) in failed.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.appendString(ids[outcome.index], to: &out)
        }
        out.append(UInt8(ascii: "]"))
        if let error = result.error {
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: error.jsonBody.dropFirst().dropLast())
        }
        out.append(contentsOf: #","timing":{"totalMs":"#.utf8)
        JSONWriter.appendMilliseconds(max(0, (clock.now() - receivedAt) * 1000), to: &out)
        out.append(contentsOf: "}}".utf8)
        if line { out.append(UInt8(ascii: "\n")) }
        return out
    }
}
