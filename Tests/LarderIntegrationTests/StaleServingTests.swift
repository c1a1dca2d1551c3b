// Stale answers end to end: twenty callers on their own connections during one refresh, and the
// deployment's stale-on-error as the proxy reports it (Cache-Status). The rules themselves are
// tested through the engine (LarderSemanticsTests/StaleServingTests).

import Foundation
import LarderCore
import LarderServiceTesting
import LarderSync
import XCTest

final class StaleServingTests: IntegrationTestCase {
    func testStaleWhileRevalidateAnswersAtOnceAndRefreshesOnce() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // The origin holds every request until the test answers it: the first one at once, the
        // refresh only after the requests that must not wait for it.
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-while-revalidate%3D60&hold=gate")]
        try client.sendFetch(request)
        XCTAssertTrue(origin.holds.waitForHeld(path, count: 1))
        origin.holds.answerWaiting(path)
        XCTAssertEqual(try client.readResponse(method: "POST").outcome, "miss")
        clock.advance(by: 30)

        // 20 requests inside the window: all answered with the stale entry while the one
        // refresh waits at the origin.
        let port = larder.port
        let body = Array(try JSONSerialization.data(withJSONObject: request))
        let outcomes = Locked<[String]>([])
        XCTAssertTrue(
            concurrently(20) { _ in
                let response = try? TestConnection(port: port).request("POST", "/fetch", headers: [:], body: body)
                outcomes.withLock { $0.append(response?.outcome ?? "error") }
            })
        XCTAssertEqual(outcomes.withLock { $0 }, Array(repeating: "stale", count: 20))
        XCTAssertTrue(origin.holds.waitForHeld(path, count: 1), "the background refresh reached the origin")
        XCTAssertEqual(origin.count(path), 2, "one background refresh")

        // A request that allows no stale window joins the refresh still in flight (coalescing),
        // and gets the refreshed response when it lands.
        var noWindow = request
        noWindow["cache"] = ["staleWhileRevalidate": 0]
        try client.sendFetch(noWindow)
        XCTAssertTrue(eventually { larder.service.coalescedCount == 1 }, "it joined the refresh")
        origin.holds.release(path)
        let latest = try client.readResponse(method: "POST")
        XCTAssertEqual(latest.outcome, "hit")
        XCTAssertEqual(latest.cache["coalesced"] as? Bool, true)
        XCTAssertEqual(latest.originCount, 2)
        XCTAssertEqual(origin.count(path), 2, "exactly one background refresh")
    }

}

/// `--stale-on-error`: the deployment's own allowance to answer from the cache when
/// the origin is down, within what the response allows (RFC 9111 §4.2.4).
final class StaleOnErrorTests: IntegrationTestCase {
    private func startProxy(_ window: Double, upstreamWindow: Double? = nil) throws -> RunningLarder {
        try startLarder { configuration in
            var upstream = NamedUpstream(name: "o", baseURL: origin.base)
            upstream.cache.staleOnError = upstreamWindow
            configuration.upstreams = [upstream]
            configuration.staleOnErrorSeconds = window
        }
    }

    func testAStoredResponseAnswersWhileTheOriginIsDown() throws {
        let larder = try startProxy(600)
        let client = try larder.connection()
        let path = uniquePath()
        let fresh = try client.request("GET", "/proxy/o\(path)?cc=max-age%3D10")
        XCTAssertEqual(fresh.status, 200)
        let fetched = try client.fetch(["url": url(path + "-fetch", "cc=max-age%3D10")])
        XCTAssertEqual(fetched.outcome, "miss")
        origin.stop()
        clock.advance(by: 120)
        let stale = try client.request("GET", "/proxy/o\(path)?cc=max-age%3D10")
        XCTAssertEqual(stale.status, 200, stale.text)
        XCTAssertEqual(stale.body, fresh.body)
        XCTAssertEqual(stale.headers["cache-status"], "larder; hit; ttl=0; detail=stale-on-error")
        let staleFetch = try client.fetch(["url": url(path + "-fetch", "cc=max-age%3D10")])
        XCTAssertEqual(staleFetch.outcome, "stale")
        XCTAssertEqual(staleFetch.cache["upstreamError"] as? String, "upstream_unreachable")
        // Past the window, the failure is the answer.
        clock.advance(by: 600)
        XCTAssertEqual(try client.request("GET", "/proxy/o\(path)?cc=max-age%3D10").errorCode, "upstream_unreachable")
        origin = try TestOrigin.start(clock: clock)
    }

}
