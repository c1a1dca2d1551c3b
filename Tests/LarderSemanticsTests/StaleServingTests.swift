// stale-while-revalidate and stale-if-error, by response directive and by request option.

import Foundation
import LarderCore
import LarderEngine
import LarderTesting
import XCTest

final class StaleServingTests: SemanticsTestCase {
    func testStaleWhileRevalidateAnswersAtOnceAndRefreshesOnce() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-while-revalidate%3D60&hold=gate")]
            // The first request goes through; the origin holds the ones after it.
            let first = fetchLater(request)
            origin.holds.answerWaiting(path)
            XCTAssertEqual(first.wait()?.outcome, "miss")
            clock.advance(by: 30)

            // The origin holds the refresh, so it is still in flight while 20 requests arrive
            // inside the window: all answered with the stale entry, one refresh.
            let outcomes = (0..<20).map { _ in fetch(request).outcome }
            XCTAssertEqual(outcomes, Array(repeating: "stale", count: 20))
            XCTAssertTrue(origin.holds.waitForHeld(path, count: 1), "the background refresh reached the origin")
            XCTAssertEqual(origin.count(path), 2)

            // A request that allows no stale window joins the refresh still in flight: it gets
            // the refreshed response when the origin answers.
            var noWindow = request
            noWindow["cache"] = ["staleWhileRevalidate": 0]
            let latest = fetchLater(noWindow)
            XCTAssertFalse(latest.isAnswered, "it waits for the refresh")
            origin.holds.release(path)
            let refreshed = latest.wait()
            XCTAssertEqual(refreshed?.outcome, "hit")
            XCTAssertEqual(refreshed?.cache["coalesced"] as? Bool, true)
            XCTAssertEqual(refreshed?.originCount, 2)
            XCTAssertEqual(origin.count(path), 2, "exactly one background refresh")
        }
    }

    func testPastTheWindowTheRequestWaitsForTheOrigin() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-while-revalidate%3D5")]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 16)
            let response = fetch(request)
            XCTAssertEqual(response.outcome, "miss")
            XCTAssertEqual(response.originCount, 2)
        }
    }

    func testRequestOptionEnablesStaleWhileRevalidate() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "staleWhileRevalidate": 100]]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 50)
            XCTAssertEqual(fetch(request).outcome, "stale")
            XCTAssertTrue(origin.waitForCount(path, atLeast: 2))
        }
    }

    func testStaleIfErrorServesTheEntryWhenTheOriginIsDown() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D10,stale-if-error%3D600")]
            let first = fetch(request)
            XCTAssertEqual(first.outcome, "miss")
            origin.stop()
            clock.advance(by: 60)
            let stale = fetch(request)
            XCTAssertEqual(stale.status, 200, stale.text)
            XCTAssertEqual(stale.outcome, "stale")
            XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_unreachable")
            XCTAssertEqual(stale.originCount, 1)
            // Past the window, the failure is the answer.
            clock.advance(by: 600)
            XCTAssertEqual(fetch(request).errorCode, "upstream_unreachable")
        }
    }

    func testStaleIfErrorOnServerErrorStatuses() throws {
        try onEachStore {
            let path = uniquePath()
            // `status` is left out of the key, so both URLs share one entry.
            let healthy: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "ignoreQuery": ["status"]]]
            let failing: [String: Any] = [
                "url": url(path, "status=503"), "cache": ["ttl": 10, "staleIfError": 3600, "ignoreQuery": ["status"]]
            ]
            XCTAssertEqual(fetch(healthy).outcome, "miss")
            clock.advance(by: 20)
            let stale = fetch(failing)
            XCTAssertEqual(stale.outcome, "stale")
            XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_status_503")
            XCTAssertEqual(stale.json["status"] as? Int, 200, "the stored response, not the 503")
            // Without a stale-if-error window the 503 is passed through.
            let plain = fetch(["url": url(path, "status=503"), "cache": ["ttl": 10, "ignoreQuery": ["status"]]])
            XCTAssertEqual(plain.json["status"] as? Int, 503)
        }
    }

    func testTheRequestsOwnStaleIfErrorDirectiveAllowsStale() throws {
        try onEachStore {
            // RFC 5861 §4: stale-if-error may come from the request too.
            let path = uniquePath()
            let healthy: [String: Any] = ["url": url(path), "cache": ["ttl": 10, "ignoreQuery": ["status"]]]
            XCTAssertEqual(fetch(healthy).outcome, "miss")
            clock.advance(by: 20)
            let asking: [String: Any] = [
                "url": url(path, "status=500"), "headers": ["Cache-Control": "stale-if-error=60"],
                "cache": ["ttl": 10, "ignoreQuery": ["status"]]
            ]
            let stale = fetch(asking)
            XCTAssertEqual(stale.outcome, "stale")
            XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_status_500")
            clock.advance(by: 60)
            XCTAssertEqual(fetch(asking).json["status"] as? Int, 500, "past the request's window")
        }
    }

    func testMustRevalidateForbidsServingStale() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = [
                "url": url(path, "cc=max-age%3D10,must-revalidate,stale-while-revalidate%3D600,stale-if-error%3D600")
            ]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 20)
            XCTAssertEqual(fetch(request).outcome, "miss", "no stale-while-revalidate")
            origin.stop()
            clock.advance(by: 20)
            XCTAssertEqual(fetch(request).errorCode, "upstream_unreachable", "no stale-if-error")
        }
    }
}

/// `--stale-on-error`: the deployment's own allowance to answer from the cache when
/// the origin is down, within what the response allows (RFC 9111 §4.2.4).
final class StaleOnErrorTests: SemanticsTestCase {
    private var staleOnError: FetchEngine.Limits {
        var limits = FetchEngine.Limits()
        limits.staleOnError = 600
        return limits
    }

    func testAStoredResponseAnswersWhileTheOriginIsDown() throws {
        try onEachStore {
            engine.setLimits(staleOnError)
            let path = uniquePath()
            let fresh = try proxy("\(path)?cc=max-age%3D10")
            XCTAssertEqual(fresh.status, 200)
            let fetched = fetch(["url": url(path + "-fetch", "cc=max-age%3D10")])
            XCTAssertEqual(fetched.outcome, "miss")
            origin.stop()
            clock.advance(by: 120)
            let stale = try proxy("\(path)?cc=max-age%3D10")
            XCTAssertEqual(stale.status, 200)
            XCTAssertEqual(stale.text, fresh.text)
            XCTAssertEqual(stale.outcome, .stale)
            XCTAssertEqual(stale.served?.report.staleOnErrorPolicy, true, "served by the deployment's allowance")
            let staleFetch = fetch(["url": url(path + "-fetch", "cc=max-age%3D10")])
            XCTAssertEqual(staleFetch.outcome, "stale")
            XCTAssertEqual(staleFetch.cache["upstreamError"] as? String, "upstream_unreachable")
            // Past the window, the failure is the answer.
            clock.advance(by: 600)
            XCTAssertEqual(try proxy("\(path)?cc=max-age%3D10").error?.code, .upstreamUnreachable)
        }
    }

    func testServerErrorsCountAndDirectivesThatForbidStaleAreObeyed() throws {
        try onEachStore {
            engine.setLimits(staleOnError)
            let path = uniquePath()
            // The status parameter is ignored by the key, so the 503 meets the stored 200.
            let spec = { (cc: String, status: String) -> [String: Any] in
                ["url": self.url(path + cc.filter(\.isLetter), "cc=\(cc)\(status)"), "cache": ["ignoreQuery": ["status"]]]
            }
            for cc in ["max-age%3D10", "max-age%3D10,must-revalidate", "max-age%3D10,proxy-revalidate", "no-cache"] {
                XCTAssertEqual(fetch(spec(cc, "")).json["status"] as? Int, 200, cc)
            }
            clock.advance(by: 60)
            let allowed = fetch(spec("max-age%3D10", "&status=503"))
            XCTAssertEqual(allowed.outcome, "stale")
            XCTAssertEqual(allowed.cache["upstreamError"] as? String, "upstream_status_503")
            for cc in ["max-age%3D10,must-revalidate", "max-age%3D10,proxy-revalidate", "no-cache"] {
                XCTAssertEqual(fetch(spec(cc, "&status=503")).json["status"] as? Int, 503, "\(cc) forbids serving stale")
            }
        }
    }

    func testSMaxageForbidsItInTheSharedCacheAndAnUpstreamMayTurnItOff() throws {
        try onEachStore {
            engine.setLimits(staleOnError)
            let path = uniquePath()
            XCTAssertEqual(try proxy("\(path)-s?cc=s-maxage%3D10").status, 200)
            XCTAssertEqual(try proxy("\(path)-q?cc=max-age%3D10", upstream: "quiet", staleOnError: 0).status, 200)
            origin.stop()
            clock.advance(by: 60)
            XCTAssertEqual(
                try proxy("\(path)-s?cc=s-maxage%3D10").error?.status, 502, "s-maxage: proxy-revalidate for a shared cache")
            XCTAssertEqual(
                try proxy("\(path)-q?cc=max-age%3D10", upstream: "quiet", staleOnError: 0).error?.status, 502,
                "the upstream's own setting wins")
        }
    }

    func testOffByDefault() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(try proxy("\(path)?cc=max-age%3D10").status, 200)
            origin.stop()
            clock.advance(by: 60)
            XCTAssertEqual(try proxy("\(path)?cc=max-age%3D10").error?.status, 502)
        }
    }
}
