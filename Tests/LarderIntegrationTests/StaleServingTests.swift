// stale-while-revalidate and stale-if-error, by response directive and by request option.

import Foundation
import Synchronization
import XCTest

final class StaleServingTests: IntegrationTestCase {
    func testStaleWhileRevalidateAnswersAtOnceAndRefreshesOnce() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // The origin answers slowly, so the refresh is still in flight while the 20 requests
        // arrive (generous, for loaded machines).
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-while-revalidate%3D60&delay=1500")]
        XCTAssertEqual(try client.fetch(request).outcome, "miss")
        clock.advance(by: 30)

        // 20 requests inside the window: all answered with the stale entry, one refresh.
        let port = larder.port
        let body = Array(try JSONSerialization.data(withJSONObject: request))
        let outcomes = Mutex<[String]>([])
        XCTAssertTrue(concurrently(20) { _ in
            let response = try? TestConnection(port: port).request("POST", "/fetch", headers: [:], body: body)
            outcomes.withLock { $0.append(response?.outcome ?? "error") }
        })
        XCTAssertEqual(outcomes.withLock { $0 }, Array(repeating: "stale", count: 20))
        XCTAssertTrue(origin.waitForCount(path, atLeast: 2), "the background refresh reached the origin")

        // A request that allows no stale window either joins the refresh still in flight
        // (coalescing) or finds it stored: both ways it gets the refreshed response, at once.
        var noWindow = request
        noWindow["cache"] = ["staleWhileRevalidate": 0]
        let latest = try client.fetch(noWindow)
        XCTAssertEqual(latest.outcome, "hit")
        XCTAssertEqual(latest.originCount, 2)
        XCTAssertEqual(origin.count(path), 2, "exactly one background refresh")
    }

    func testPastTheWindowTheRequestWaitsForTheOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-while-revalidate%3D5")]
        XCTAssertEqual(try client.fetch(request).outcome, "miss")
        clock.advance(by: 16)
        let response = try client.fetch(request)
        XCTAssertEqual(response.outcome, "miss")
        XCTAssertEqual(response.originCount, 2)
    }

    func testRequestOptionEnablesStaleWhileRevalidate() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "staleWhileRevalidate": 100]]
        XCTAssertEqual(try client.fetch(request).outcome, "miss")
        clock.advance(by: 50)
        XCTAssertEqual(try client.fetch(request).outcome, "stale")
        XCTAssertTrue(origin.waitForCount(path, atLeast: 2))
    }

    func testStaleIfErrorServesTheEntryWhenTheOriginIsDown() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-if-error%3D600")]
        let first = try client.fetch(request)
        XCTAssertEqual(first.outcome, "miss")
        origin.stop()
        clock.advance(by: 60)
        let stale = try client.fetch(request)
        XCTAssertEqual(stale.status, 200, stale.text)
        XCTAssertEqual(stale.outcome, "stale")
        XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_unreachable")
        XCTAssertEqual(stale.originCount, 1)
        // Past the window, the failure is the answer.
        clock.advance(by: 600)
        XCTAssertEqual(try client.fetch(request).errorCode, "upstream_unreachable")
        origin = try TestOrigin.start(clock: clock)
    }

    func testStaleIfErrorOnServerErrorStatuses() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // `status` is left out of the key, so both URLs share one entry.
        let healthy: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "ignoreQuery": ["status"]]]
        let failing: [String: Any] = ["url": url(path, "status=503"), "cache": ["ttl": 10, "staleIfError": 3600, "ignoreQuery": ["status"]]]
        XCTAssertEqual(try client.fetch(healthy).outcome, "miss")
        clock.advance(by: 20)
        let stale = try client.fetch(failing)
        XCTAssertEqual(stale.outcome, "stale")
        XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_status_503")
        XCTAssertEqual(stale.json["status"] as? Int, 200, "the stored response, not the 503")
        // Without a stale-if-error window the 503 is passed through.
        let plain = try client.fetch(["url": url(path, "status=503"), "cache": ["ttl": 10, "ignoreQuery": ["status"]]])
        XCTAssertEqual(plain.json["status"] as? Int, 503)
    }

    func testTheRequestsOwnStaleIfErrorDirectiveAllowsStale() throws {
        // RFC 5861 §4: stale-if-error may come from the request too.
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let healthy: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "ignoreQuery": ["status"]]]
        XCTAssertEqual(try client.fetch(healthy).outcome, "miss")
        clock.advance(by: 20)
        let asking: [String: Any] = ["url": url(path, "status=500"), "headers": ["Cache-Control": "stale-if-error=60"],
                                     "cache": ["ttl": 10, "ignoreQuery": ["status"]]]
        let stale = try client.fetch(asking)
        XCTAssertEqual(stale.outcome, "stale")
        XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_status_500")
        clock.advance(by: 60)
        XCTAssertEqual(try client.fetch(asking).json["status"] as? Int, 500, "past the request's window")
    }

    func testMustRevalidateForbidsServingStale() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,must-revalidate,stale-while-revalidate%3D600,stale-if-error%3D600")]
        XCTAssertEqual(try client.fetch(request).outcome, "miss")
        clock.advance(by: 20)
        XCTAssertEqual(try client.fetch(request).outcome, "miss", "no stale-while-revalidate")
        origin.stop()
        clock.advance(by: 20)
        XCTAssertEqual(try client.fetch(request).errorCode, "upstream_unreachable", "no stale-if-error")
        origin = try TestOrigin.start(clock: clock)
    }
}
