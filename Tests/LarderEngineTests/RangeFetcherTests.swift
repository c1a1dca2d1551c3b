// Range requests through the engine with an in-memory store and a scripted upstream: no
// sockets, no threads.

import LarderCore
import LarderEngine
import LarderSync
import Logging
import XCTest

/// Records the upstream exchanges the engine reports (what the metrics count per upstream).
final class ExchangeLog: TrafficObserver {
    let exchanges = Locked<[(upstream: String, status: Int?)]>([])
    func answered(outcome: CacheOutcome?, coalesced: Bool, errorCode: String?, namespace: String, loop: Int) {}
    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double) {
        exchanges.withLock { $0.append((upstream, status)) }
    }
}

final class RangeFetcherTests: XCTestCase {
    /// Issue 35: range requests went upstream without being counted in the per-upstream traffic.
    func testARangeRequestIsCountedInItsUpstreamsTraffic() throws {
        let upstream = ScriptedUpstream { sent, _ in
            XCTAssertEqual(sent.headers.values("range"), ["bytes=0-3"])
            XCTAssertEqual(sent.headers.values("cdn-loop"), ["larder-test"])
            XCTAssertFalse(sent.followRedirects)
            return .success(
                ScriptedUpstream.response(
                    206, [("Content-Range", "bytes 0-3/10"), ("Cache-Control", "max-age=60")],
                    body: "0123"))
        }
        var limits = FetchEngine.Limits()
        limits.loopToken = "larder-test"
        let engine = FetchEngine(
            store: MemoryCacheStore(), upstream: upstream,
            keys: CacheKeyBuilder(secret: Array(repeating: 1, count: 32)), clock: Clock { 1_000 },
            limits: limits, logger: Logger(label: "range-test"))
        let log = ExchangeLog()
        engine.traffic.observe(with: log)
        var cache = CacheOptions()
        cache.namespace = FetchRequest.reservedNamespacePrefix + "origin"
        let request = FetchRequest(
            url: try UpstreamURL(parsing: "http://origin.test/file"),
            headers: [HeaderField("Range", "bytes=0-3")], cache: cache, shared: true)
        let answered = Locked<CacheAnswer?>(nil)
        let immediate = engine.ranges.fetch(engine.prepare(request), range: "bytes=0-3") { answer in
            answered.withLock { $0 = answer }
        }
        XCTAssertNil(immediate)
        guard case .served(let served)? = answered.withLock({ $0 }) else { return XCTFail("no answer") }
        XCTAssertEqual(served.status, 206)
        let exchanges = log.exchanges.withLock { $0 }
        XCTAssertEqual(exchanges.map(\.upstream), ["origin"])
        XCTAssertEqual(exchanges.map(\.status), [206])
    }
}
