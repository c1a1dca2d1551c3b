// The engine with an in-memory store and a scripted upstream: no sockets, no threads.

import Foundation
import LarderCore
import LarderEngine
import LarderSync
import LarderTesting
import Logging
import XCTest

/// An upstream whose answers the test scripts, recording what it was asked.
final class ScriptedUpstream: Upstream {
    let requests = Locked<[UpstreamRequest]>([])
    private let script: @Sendable (UpstreamRequest, Int) -> Result<UpstreamResponse, LarderError>

    init(_ script: @escaping @Sendable (UpstreamRequest, Int) -> Result<UpstreamResponse, LarderError>) {
        self.script = script
    }

    func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        let index = requests.withLock { requests -> Int in
            requests.append(request)
            return requests.count - 1
        }
        completion(script(request, index))
    }

    static func response(_ status: Int, _ headers: [(String, String)], body: String = "") -> UpstreamResponse {
        UpstreamResponse(
            status: status, headers: headers.map { HeaderField($0.0, $0.1) }, body: Array(body.utf8),
            requestTime: 0, responseTime: 0)
    }
}

final class FetchEngineTests: XCTestCase {
    private let now = ManualClock(start: 1_000)

    private func engine(store: any CacheStore, upstream: any Upstream) -> FetchEngine {
        FetchEngine(
            store: store, upstream: upstream, keys: CacheKeyBuilder(secret: Array(repeating: 1, count: 32)),
            clock: now.clock, logger: Logger(label: "engine-test"))
    }

    /// Runs a fetch to completion (the scripted upstream answers synchronously).
    private func fetch(_ engine: FetchEngine, _ request: FetchRequest) -> [String: Any] {
        let delivered = Locked<CacheAnswer?>(nil)
        let immediate = engine.fetch(request) { answer in delivered.withLock { $0 = answer } }
        guard case .served(let served)? = immediate ?? delivered.withLock({ $0 }) else {
            XCTFail("no response")
            return [:]
        }
        let envelope = Envelope.render(
            status: served.status, headersJSON: served.headersJSON, body: served.body,
            kind: served.bodyKind, cache: served.report, totalMs: 0, upstreamMs: served.upstreamMs)
        return (try? JSONSerialization.jsonObject(with: Data(envelope))) as? [String: Any] ?? [:]
    }

    func testA304ForAnEntryThatVanishedLeadsToAnUnconditionalRefetch() throws {
        let store = MemoryCacheStore()
        let keys = CacheKeyBuilder(secret: Array(repeating: 1, count: 32))
        let request = FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item"))
        let key = keys.derive(for: request).key
        let upstream = ScriptedUpstream { sent, index in
            switch index {
            case 0:
                return .success(
                    ScriptedUpstream.response(
                        200,
                        [
                            ("ETag", "\"a\""), ("Cache-Control", "max-age=10"),
                            ("Content-Type", "text/plain")
                        ], body: "first"))
            case 1:
                // The entry is purged while the conditional request is in flight.
                XCTAssertEqual(sent.headers.values("if-none-match"), ["\"a\""])
                store.remove(key)
                return .success(ScriptedUpstream.response(304, [("ETag", "\"a\"")]))
            default:
                XCTAssertEqual(sent.headers.values("if-none-match"), [], "the refetch carries no condition")
                return .success(ScriptedUpstream.response(200, [("ETag", "\"b\""), ("Content-Type", "text/plain")], body: "second"))
            }
        }
        let engine = engine(store: store, upstream: upstream)
        XCTAssertEqual(fetch(engine, request)["bodyText"] as? String, "first")
        now.advance(by: 20)
        let refetched = fetch(engine, request)
        XCTAssertEqual(refetched["bodyText"] as? String, "second")
        XCTAssertEqual((refetched["cache"] as? [String: Any])?["outcome"] as? String, "miss")
        XCTAssertEqual(upstream.requests.withLock { $0.count }, 3)
    }

    /// The entry a 304 confirmed was purged meanwhile: the refetch's failure is answered as it
    /// is, never with the purged entry, whatever stale-if-error it allowed.
    func testAPurgedEntryNeverAnswersTheRefetchAfterA304() throws {
        let store = MemoryCacheStore()
        let request = FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item"))
        let key = CacheKeyBuilder(secret: Array(repeating: 1, count: 32)).derive(for: request).key
        let upstream = ScriptedUpstream { _, index in
            switch index {
            case 0:
                return .success(
                    ScriptedUpstream.response(
                        200, [("ETag", "\"a\""), ("Cache-Control", "max-age=10, stale-if-error=600"), ("Content-Type", "text/plain")],
                        body: "purged"))
            case 1:
                store.remove(key)
                return .success(ScriptedUpstream.response(304, [("ETag", "\"a\"")]))
            default:
                return .success(ScriptedUpstream.response(503, [("Content-Type", "text/plain")], body: "unavailable"))
            }
        }
        let engine = engine(store: store, upstream: upstream)
        XCTAssertEqual(fetch(engine, request)["bodyText"] as? String, "purged")
        now.advance(by: 20)
        let refetched = fetch(engine, request)
        XCTAssertEqual(refetched["status"] as? Int, 503)
        XCTAssertEqual(refetched["bodyText"] as? String, "unavailable")
        XCTAssertEqual(upstream.requests.withLock { $0.count }, 3)
    }

    func testRevalidationFollowsTheNewFreshnessFromThe304() throws {
        let store = MemoryCacheStore()
        let upstream = ScriptedUpstream { _, index in
            index == 0
                ? .success(ScriptedUpstream.response(200, [("ETag", "\"a\""), ("Cache-Control", "max-age=10")], body: "x"))
                : .success(ScriptedUpstream.response(304, [("Cache-Control", "max-age=100")]))
        }
        let engine = engine(store: store, upstream: upstream)
        let request = FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item"))
        _ = fetch(engine, request)
        now.advance(by: 20)
        let revalidated = fetch(engine, request)
        XCTAssertEqual((revalidated["cache"] as? [String: Any])?["outcome"] as? String, "revalidated")
        XCTAssertEqual((revalidated["cache"] as? [String: Any])?["ttl"] as? Int, 100)
        now.advance(by: 50)
        XCTAssertEqual((fetch(engine, request)["cache"] as? [String: Any])?["outcome"] as? String, "hit")
        XCTAssertEqual(upstream.requests.withLock { $0.count }, 2)
    }

    /// Regression: the flight used to be removed only after the leader was answered, so a
    /// request sent on that answer joined a finished flight and got its response whatever
    /// its own directives said.
    func testARequestSentOnTheLeadersAnswerNeverJoinsTheFinishedFlight() throws {
        let store = MemoryCacheStore()
        let upstream = ScriptedUpstream { _, index in
            .success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "response \(index)"))
        }
        let engine = engine(store: store, upstream: upstream)
        let url = try UpstreamURL(parsing: "http://origin.test/item")
        let followUp = Locked<CacheAnswer?>(nil)
        let strict = FetchRequest(url: url, headers: [HeaderField("Cache-Control", "no-cache")])
        _ = engine.fetch(FetchRequest(url: url)) { _ in
            // Sent the moment the first answer arrives; no-cache: it must reach the upstream.
            let immediate = engine.fetch(strict) { answer in followUp.withLock { $0 = answer } }
            if let immediate { followUp.withLock { $0 = immediate } }
        }
        guard case .served(let served)? = followUp.withLock({ $0 }) else { return XCTFail("no answer") }
        XCTAssertFalse(served.report.coalesced)
        XCTAssertEqual(String(decoding: served.body, as: UTF8.self), "response 1")
        XCTAssertEqual(upstream.requests.withLock { $0.count }, 2)
    }

    /// A store that keeps nothing: Redis refusing first-time entries while it is full.
    private final class RefusingStore: CacheStore {
        func lookup(_ primaryKey: CacheKey) -> [StoredEntry] { [] }
        func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void) { completion(false) }
        func recordHit(_ key: CacheKey, at time: Double) {}
        func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void) { completion([]) }
        func invalidate(tags: [String], at time: Double, completion: @escaping @Sendable ([CacheKey]) -> Void) { completion([]) }
    }

    /// An upstream that answers when the test says so.
    private final class HeldUpstream: Upstream {
        let sent = Locked<[@Sendable (Result<UpstreamResponse, LarderError>) -> Void]>([])
        func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
            sent.withLock { $0.append(completion) }
        }
    }

    /// Requests that waited on a flight whose storable response the store did not keep (Redis
    /// refusing it while full, a failed write) get that response, reported as not stored:
    /// they do not each go to the origin while the store is under pressure.
    func testWaitersShareAStorableResponseTheStoreDidNotKeep() throws {
        let upstream = HeldUpstream()
        let engine = engine(store: RefusingStore(), upstream: upstream)
        let request = FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item"))
        let answers = Locked<[CacheAnswer]>([])
        for _ in 0..<3 {
            if let immediate = engine.fetch(request, reply: { answer in answers.withLock { $0.append(answer) } }) {
                answers.withLock { $0.append(immediate) }
            }
        }
        let pending = upstream.sent.withLock { $0 }
        XCTAssertEqual(pending.count, 1, "one origin request for three callers")
        pending[0](.success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "shared")))
        let served = answers.withLock { $0 }.compactMap { answer -> ServedResponse? in
            if case .served(let served) = answer { return served }
            return nil
        }
        XCTAssertEqual(served.count, 3)
        XCTAssertEqual(served.map { String(decoding: $0.body, as: UTF8.self) }, ["shared", "shared", "shared"])
        XCTAssertEqual(served.map(\.report.stored), [false, false, false])
        XCTAssertEqual(served.filter(\.report.coalesced).count, 2)
        XCTAssertEqual(upstream.sent.withLock { $0.count }, 1)
    }

    /// An upstream that answers when the test says so, keeping each request (its transfer's
    /// cancellation included).
    private final class HeldRequestsUpstream: Upstream {
        let sent = Locked<[(request: UpstreamRequest, complete: @Sendable (Result<UpstreamResponse, LarderError>) -> Void)]>([])
        func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
            sent.withLock { $0.append((request, completion)) }
        }
    }

    /// Answers recorded in order, from `fetch`'s return or its reply.
    private final class Answers: Sendable {
        let all = Locked<[CacheAnswer]>([])
        var reply: @Sendable (CacheAnswer) -> Void { { [self] answer in all.withLock { $0.append(answer) } } }
        func take(_ immediate: CacheAnswer?) { if let immediate { reply(immediate) } }
        var codes: [String] {
            all.withLock { $0 }.map { answer in
                switch answer {
                case .served(let served): return String(decoding: served.body, as: UTF8.self)
                case .failed(let error): return error.code.rawValue
                }
            }
        }
    }

    func testALookupAnswersAHitAndHandsAMissOnWithoutSendingIt() throws {
        let upstream = HeldRequestsUpstream()
        let engine = engine(store: MemoryCacheStore(), upstream: upstream)
        let prepared = engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item")))
        guard case .miss(let miss) = engine.lookup(prepared) else { return XCTFail("nothing is stored: a miss") }
        XCTAssertEqual(miss.key, prepared.derived.key)
        XCTAssertEqual(upstream.sent.withLock { $0.count }, 0, "a lookup never goes upstream")
        let answers = Answers()
        answers.take(engine.send(miss, reply: answers.reply))
        upstream.sent.withLock { $0 }[0].complete(
            .success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "stored")))
        XCTAssertEqual(answers.codes, ["stored"])
        guard case .answered(.served(let served)) = engine.lookup(prepared) else { return XCTFail("stored: a hit") }
        XCTAssertEqual(served.report.outcome, .hit)
        XCTAssertEqual(engine.traffic.snapshot().hits, 1, "a hit is counted by the lookup")
        XCTAssertEqual(upstream.sent.withLock { $0.count }, 1)
    }

    func testALeaderThatGivesUpAloneIsAnsweredCancelledOnceAndItsTransferAborted() throws {
        let upstream = HeldRequestsUpstream()
        let engine = engine(store: MemoryCacheStore(), upstream: upstream)
        let prepared = engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item")))
        let cancellation = Cancellation()
        let answers = Answers()
        answers.take(engine.fetch(prepared, cancellation: cancellation, reply: answers.reply))
        let sent = upstream.sent.withLock { $0 }
        XCTAssertEqual(sent.count, 1)
        cancellation.cancel()
        XCTAssertEqual(answers.codes, ["cancelled"])
        XCTAssertEqual(sent[0].request.cancellation?.isCancelled, true, "nobody waits: the transfer is aborted")
        // The transfer's late end is not a second answer.
        sent[0].complete(.failure(LarderError(.cancelled, "aborted")))
        cancellation.cancel()
        XCTAssertEqual(answers.codes, ["cancelled"])
    }

    /// A 304 confirmed an entry that is gone: the refetch is the caller's transfer too, aborted
    /// when the caller gives up (nobody else waits on it).
    func testACallerThatGivesUpDuringTheRefetchAfterA304AbortsIt() throws {
        let store = MemoryCacheStore()
        let upstream = HeldRequestsUpstream()
        let engine = engine(store: store, upstream: upstream)
        let prepared = engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item")))
        let stored = Answers()
        stored.take(engine.fetch(prepared, reply: stored.reply))
        upstream.sent.withLock { $0 }[0].complete(
            .success(ScriptedUpstream.response(200, [("ETag", "\"a\""), ("Cache-Control", "max-age=10")], body: "first")))
        XCTAssertEqual(stored.codes, ["first"])
        now.advance(by: 20)

        let cancellation = Cancellation()
        let answers = Answers()
        answers.take(engine.fetch(prepared, cancellation: cancellation, reply: answers.reply))
        let conditional = upstream.sent.withLock { $0 }[1]
        XCTAssertEqual(conditional.request.headers.values("if-none-match"), ["\"a\""])
        store.remove(prepared.derived.key)
        conditional.complete(.success(ScriptedUpstream.response(304, [("ETag", "\"a\"")])))
        let sent = upstream.sent.withLock { $0 }
        XCTAssertEqual(sent.count, 3, "the entry is gone: asked again without conditions")
        XCTAssertEqual(sent[2].request.headers.values("if-none-match"), [])
        cancellation.cancel()
        XCTAssertEqual(answers.codes, ["cancelled"])
        XCTAssertEqual(sent[2].request.cancellation?.isCancelled, true, "nobody waits: the refetch is aborted")
        sent[2].complete(.failure(LarderError(.cancelled, "aborted")))
        XCTAssertEqual(answers.codes, ["cancelled"])
    }

    /// A miss that is over keeps nothing alive through its caller's cancellation, which the
    /// caller may keep as long as it likes (a batch keeps its items' until the batch ends).
    func testAFinishedMissIsNotKeptByItsCallersCancellation() throws {
        let upstream = HeldRequestsUpstream()
        let engine = engine(store: MemoryCacheStore(), upstream: upstream)
        let prepared = engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item")))
        let answers = Answers()
        weak var held: Cancellation?
        do {
            let cancellation = Cancellation()
            held = cancellation
            answers.take(engine.fetch(prepared, cancellation: cancellation, reply: answers.reply))
            upstream.sent.withLock { $0 }[0].complete(
                .success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "stored")))
            upstream.sent.withLock { $0.removeAll() }
        }
        XCTAssertEqual(answers.codes, ["stored"])
        XCTAssertNil(held, "the cancellation and the miss its handler would act on are freed")
    }

    func testALeaderThatGivesUpLeavesTheTransferToItsWaitersAndAWaiterThatGivesUpLeavesTheFlight() throws {
        let upstream = HeldRequestsUpstream()
        let engine = engine(store: MemoryCacheStore(), upstream: upstream)
        let prepared = engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item")))
        let (leader, staying, leaving) = (Answers(), Answers(), Answers())
        let leaderGivesUp = Cancellation()
        let waiterGivesUp = Cancellation()
        leader.take(engine.fetch(prepared, cancellation: leaderGivesUp, reply: leader.reply))
        staying.take(engine.fetch(prepared, reply: staying.reply))
        leaving.take(engine.fetch(prepared, cancellation: waiterGivesUp, reply: leaving.reply))
        let sent = upstream.sent.withLock { $0 }
        XCTAssertEqual(sent.count, 1, "three callers, one origin request")
        waiterGivesUp.cancel()
        leaderGivesUp.cancel()
        XCTAssertEqual(leader.codes, ["cancelled"])
        XCTAssertEqual(leaving.codes, ["cancelled"])
        XCTAssertEqual(sent[0].request.cancellation?.isCancelled, false, "a caller still waits: the transfer goes on")
        sent[0].complete(.success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "shared")))
        XCTAssertEqual(staying.codes, ["shared"])
        XCTAssertEqual(leader.codes, ["cancelled"], "the leader's answer was its cancellation")
        XCTAssertEqual(leaving.codes, ["cancelled"], "the waiter left before the landing")
        XCTAssertEqual(upstream.sent.withLock { $0.count }, 1)
    }

    func testHitsAreCounted() throws {
        let store = MemoryCacheStore()
        let upstream = ScriptedUpstream { _, _ in .success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "x")) }
        let engine = engine(store: store, upstream: upstream)
        let request = FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/item"))
        for _ in 0..<3 { _ = fetch(engine, request) }
        let key = CacheKeyBuilder(secret: Array(repeating: 1, count: 32)).derive(for: request).key
        XCTAssertEqual(store.hitCount(key), 2)
        XCTAssertEqual(upstream.requests.withLock { $0.count }, 1)
    }
}

final class CancellationTests: XCTestCase {
    private final class Work: Sendable {}

    /// A finished exchange releases its cancellation's handlers, and with them the work they
    /// hold (found by scripts/soak: every /batch miss kept its exchange and body alive).
    func testReleaseDropsTheHandlersUnrunAndWhatTheyHold() {
        let cancellation = Cancellation()
        let ran = Atomic<Int>(0)
        weak var held: Work?
        do {
            let work = Work()
            held = work
            cancellation.onCancel {
                _ = work
                ran.add(1, ordering: .relaxed)
            }
        }
        XCTAssertNotNil(held, "the handler holds the work")
        cancellation.release()
        XCTAssertNil(held, "released with the handler")
        cancellation.cancel()
        XCTAssertEqual(ran.load(ordering: .relaxed), 0, "a released handler never runs")
    }
}

/// An upstream that answers at once and keeps every completion it was given, as a transfer
/// object outliving its answer would.
final class RetainingUpstream: Upstream {
    let kept = Locked<[@Sendable (Result<UpstreamResponse, LarderError>) -> Void]>([])

    func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        kept.withLock { $0.append(completion) }
        completion(.success(ScriptedUpstream.response(200, [("Cache-Control", "max-age=60")], body: "answer")))
    }
}

final class FinishedWorkTests: XCTestCase {
    /// Signals when it is freed.
    private final class Marker: Sendable {
        let freed: DispatchSemaphore
        init(_ freed: DispatchSemaphore) { self.freed = freed }
        deinit { freed.signal() }
    }

    /// A finished batch is not kept alive by whatever still holds its fetches' replies: the
    /// reply lets go of the run once called, so the answer it finished with (here a marker,
    /// in the server the rendered response) is freed.
    func testAFinishedBatchIsNotKeptByHeldReplies() throws {
        let upstream = RetainingUpstream()
        let engine = FetchEngine(
            store: MemoryCacheStore(), upstream: upstream, keys: CacheKeyBuilder(secret: Array(repeating: 1, count: 32)),
            clock: Clock { 1_000 }, logger: Logger(label: "engine-test"))
        let freed = DispatchSemaphore(value: 0)
        let finished = Locked<Int>(0)
        let ended = DispatchSemaphore(value: 0)
        do {
            let marker = Marker(freed)
            let items = try ["a", "b"].map { engine.prepare(FetchRequest(url: try UpstreamURL(parsing: "http://origin.test/\($0)"))) }
            let run = BatchRun(
                engine: engine, items: items, mode: .settle, concurrency: 4, clock: Clock { 1_000 },
                sink: .watching { _ in },
                onFinish: { outcomes in
                    _ = marker
                    finished.withLock { $0 = outcomes.filter { $0.state == .done }.count }
                    ended.signal()
                })
            run.start()
        }
        XCTAssertEqual(ended.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(finished.withLock { $0 }, 2, "both items were fetched and the batch finished")
        XCTAssertEqual(upstream.kept.withLock { $0.count }, 2, "the upstream still holds both completions")
        XCTAssertEqual(freed.wait(timeout: .now() + 10), .success, "nothing keeps the finished batch's work alive")
    }
}
