// stale-while-revalidate and stale-if-error, by response directive and by request option.

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
        let asking: [String: Any] = [
            "url": url(path, "status=500"), "headers": ["Cache-Control": "stale-if-error=60"],
            "cache": ["ttl": 10, "ignoreQuery": ["status"]]
        ]
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

/// `--stale-on-error` (issue 11): the deployment's own allowance to answer from the cache when
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

    func testServerErrorsCountAndDirectivesThatForbidStaleAreObeyed() throws {
        let larder = try startProxy(600)
        let client = try larder.connection()
        let path = uniquePath()
        // The status parameter is ignored by the key, so the 503 meets the stored 200.
        let spec = { (cc: String, status: String) -> [String: Any] in
            ["url": self.url(path + cc.filter(\.isLetter), "cc=\(cc)\(status)"), "cache": ["ignoreQuery": ["status"]]]
        }
        for cc in ["max-age%3D10", "max-age%3D10,must-revalidate", "max-age%3D10,proxy-revalidate", "no-cache"] {
            XCTAssertEqual(try client.fetch(spec(cc, "")).json["status"] as? Int, 200, cc)
        }
        clock.advance(by: 60)
        let allowed = try client.fetch(spec("max-age%3D10", "&status=503"))
        XCTAssertEqual(allowed.outcome, "stale")
        XCTAssertEqual(allowed.cache["upstreamError"] as? String, "upstream_status_503")
        for cc in ["max-age%3D10,must-revalidate", "max-age%3D10,proxy-revalidate", "no-cache"] {
            XCTAssertEqual(try client.fetch(spec(cc, "&status=503")).json["status"] as? Int, 503, "\(cc) forbids serving stale")
        }
    }

    func testSMaxageForbidsItInTheSharedCacheAndAnUpstreamMayTurnItOff() throws {
        let larder = try startLarder { configuration in
            var quiet = NamedUpstream(name: "quiet", baseURL: origin.base)
            quiet.cache.staleOnError = 0
            configuration.upstreams = [NamedUpstream(name: "o", baseURL: origin.base), quiet]
            configuration.staleOnErrorSeconds = 600
        }
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try client.request("GET", "/proxy/o\(path)-s?cc=s-maxage%3D10").status, 200)
        XCTAssertEqual(try client.request("GET", "/proxy/quiet\(path)-q?cc=max-age%3D10").status, 200)
        origin.stop()
        clock.advance(by: 60)
        XCTAssertEqual(
            try client.request("GET", "/proxy/o\(path)-s?cc=s-maxage%3D10").status, 502, "s-maxage: proxy-revalidate for a shared cache")
        XCTAssertEqual(try client.request("GET", "/proxy/quiet\(path)-q?cc=max-age%3D10").status, 502, "the upstream's own setting wins")
        origin = try TestOrigin.start(clock: clock)
    }

    func testOffByDefault() throws {
        let larder = try startProxy(0)
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try client.request("GET", "/proxy/o\(path)?cc=max-age%3D10").status, 200)
        origin.stop()
        clock.advance(by: 60)
        XCTAssertEqual(try client.request("GET", "/proxy/o\(path)?cc=max-age%3D10").status, 502)
        origin = try TestOrigin.start(clock: clock)
    }
}
