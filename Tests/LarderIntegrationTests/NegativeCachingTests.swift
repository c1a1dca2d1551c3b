// Negative caching (`--negative-ttl`, a named upstream's and a /fetch caller's
// `cache.negativeTtl`) and Larder's own targeted Cache-Control field (RFC 9213), end to end:
// the origin counts what reached it.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class NegativeCachingTests: IntegrationTestCase {
    private func startProxy(
        upstream negative: [Int: Double] = [:], _ configure: (inout LarderConfiguration) -> Void = { _ in }
    ) throws -> RunningLarder {
        try startLarder { configuration in
            var upstream = NamedUpstream(name: "origin", baseURL: origin.base + "/base")
            upstream.cache.negativeTTL = NegativeTTL(negative)
            configuration.upstreams = [upstream]
            configure(&configuration)
        }
    }

    func testTheProxyKeepsErrorsForTheOperatorsLifetimes() throws {
        let larder = try startProxy { $0.negativeTTL = NegativeTTL([404: 30, 502: 5]) }
        let client = try larder.connection()
        let path = uniquePath()
        let missing = "/proxy/origin\(path)?status=404"
        let first = try client.request("GET", missing)
        XCTAssertEqual(first.status, 404)
        XCTAssertEqual(first.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=404; stored; ttl=30")
        clock.advance(by: 29)
        let hit = try client.request("GET", missing)
        XCTAssertEqual(hit.status, 404)
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=1")
        XCTAssertEqual(origin.count("/base\(path)"), 1, "the second 404 never reached the origin")
        clock.advance(by: 2)
        XCTAssertEqual(try client.request("GET", missing).status, 404)
        XCTAssertEqual(origin.count("/base\(path)"), 2, "asked again once its lifetime ended")

        // A failing origin is asked once per lifetime, not by every request.
        let failing = "/proxy/origin\(path)/down?status=502"
        for _ in 0..<3 { XCTAssertEqual(try client.request("GET", failing).status, 502) }
        XCTAssertEqual(origin.count("/base\(path)/down"), 1)
        // A status without a lifetime is not kept.
        for _ in 0..<2 { XCTAssertEqual(try client.request("GET", "/proxy/origin\(path)/gone?status=410&h=X-A:1").status, 410) }
        XCTAssertEqual(origin.count("/base\(path)/gone"), 2)
    }

    func testAServerErrorNeverReplacesAStoredSuccess() throws {
        let larder = try startLarder { $0.negativeTTL = NegativeTTL([500: 30]) }
        let client = try larder.connection()
        let path = uniquePath()
        // One key for both URLs (`status` and `cc` are left out of it): the second stands for the
        // origin failing, with a 500 that says nothing of its freshness.
        let good: [String: Any] = ["url": url(path, "cc=max-age%3D1"), "cache": ["ignoreQuery": ["status", "cc"]]]
        let failing: [String: Any] = ["url": url(path, "status=500"), "cache": ["ignoreQuery": ["status", "cc"]]]
        XCTAssertEqual(try client.fetch(good).outcome, "miss")
        clock.advance(by: 2)
        for _ in 0..<2 {
            let failed = try client.fetch(failing)
            XCTAssertEqual(failed.json["status"] as? Int, 500)
            XCTAssertEqual(failed.cache["stored"] as? Bool, false, "the stale success is not replaced")
            XCTAssertEqual(failed.cache["notStoredBecause"] as? String, "stored_success_kept")
        }
        XCTAssertEqual(origin.count(path), 3)
        XCTAssertEqual(try client.fetch(good).json["status"] as? Int, 200)
        // Without a stored success, the 500 is kept for its lifetime.
        let fresh: [String: Any] = ["url": url(path + "/new", "status=500")]
        _ = try client.fetch(fresh)
        XCTAssertEqual(try client.fetch(fresh).outcome, "hit")
    }

    func testTheResponsesOwnFreshnessAndRefusalsWin() throws {
        let larder = try startProxy { $0.negativeTTL = NegativeTTL([404: 30]) }
        let client = try larder.connection()
        let path = uniquePath()
        let explicit = try client.request("GET", "/proxy/origin\(path)/a?status=404&cc=max-age%3D5")
        XCTAssertEqual(explicit.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=404; stored; ttl=5")
        for _ in 0..<2 { _ = try client.request("GET", "/proxy/origin\(path)/b?status=404&cc=no-store") }
        XCTAssertEqual(origin.count("/base\(path)/b"), 2, "no-store still refuses")
        for _ in 0..<2 { _ = try client.request("GET", "/proxy/origin\(path)/c?status=404&cc=private") }
        XCTAssertEqual(origin.count("/base\(path)/c"), 2, "private still refuses")
    }

    func testANamedUpstreamOverridesTheDeploymentStatusByStatus() throws {
        let larder = try startProxy(upstream: [404: 0, 503: 10]) { $0.negativeTTL = NegativeTTL([404: 30]) }
        let client = try larder.connection()
        let path = uniquePath()
        for _ in 0..<2 { _ = try client.request("GET", "/proxy/origin\(path)/a?status=404") }
        XCTAssertEqual(origin.count("/base\(path)/a"), 2, "the upstream turned 404 off")
        for _ in 0..<2 { _ = try client.request("GET", "/proxy/origin\(path)/b?status=503") }
        XCTAssertEqual(origin.count("/base\(path)/b"), 1, "and gave 503 a lifetime")
    }

    func testAFetchCallerChoosesLifetimesAndItsTTLNeverKeepsAnErrorLonger() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "status=404"), "cache": ["ttl": 3600, "negativeTtl": ["404": 10]]]
        let miss = try client.fetch(request)
        XCTAssertEqual(miss.json["status"] as? Int, 404)
        XCTAssertEqual(miss.cache["stored"] as? Bool, true)
        XCTAssertEqual(miss.cache["ttl"] as? Int, 10)
        clock.advance(by: 9)
        XCTAssertEqual(try client.fetch(request).outcome, "hit")
        XCTAssertEqual(origin.count(path), 1)
        clock.advance(by: 2)
        XCTAssertEqual(try client.fetch(request).outcome, "miss", "the hour of ttl is for the object, not its 404")
        XCTAssertEqual(origin.count(path), 2)

        // Without a lifetime for the status, a ttl keeps no error.
        let plain: [String: Any] = ["url": url(path + "/plain", "status=404"), "cache": ["ttl": 3600]]
        XCTAssertEqual(try client.fetch(plain).cache["stored"] as? Bool, false)
        XCTAssertEqual(try client.fetch(plain).outcome, "miss")
    }

    func testAFetchCallersBadLifetimesAreNamed() throws {
        let client = try startLarder().connection()
        for (negative, field) in [
            (["200": 5] as [String: Any], "cache.negativeTtl.200"), (["404": -1], "cache.negativeTtl.404"),
            (["404": "30s"], "cache.negativeTtl.404"), (["four": 5], "cache.negativeTtl")
        ] {
            let response = try client.fetch(["url": url("/x"), "cache": ["negativeTtl": negative]])
            XCTAssertEqual(response.status, 400)
            XCTAssertEqual(response.errorCode, "invalid_request")
            XCTAssertEqual(response.errorField, field)
        }
        XCTAssertEqual(try client.fetch(["url": url("/x"), "cache": ["negativeTtl": [404]]]).errorField, "cache.negativeTtl")
    }

    func testLarderCacheControlIsLardersAloneAndNotPassedOn() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D10&h=CDN-Cache-Control:max-age%3D100&h=Larder-Cache-Control:max-age%3D300"
        let first = try client.request("GET", target)
        XCTAssertEqual(first.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=300")
        XCTAssertNil(first.headers["larder-cache-control"], "meant for Larder alone")
        XCTAssertEqual(first.headers["cdn-cache-control"], "max-age=100", "for the CDNs after Larder")
        XCTAssertEqual(first.headers["cache-control"], "max-age=10", "for browsers")
        clock.advance(by: 200)
        let hit = try client.request("GET", target)
        XCTAssertEqual(hit.headers["cache-status"], "larder; hit; ttl=100")
        XCTAssertNil(hit.headers["larder-cache-control"])
        XCTAssertEqual(origin.count("/base\(path)"), 1)

        // Invalid, it is skipped for the next field (RFC 9213 §2.2).
        let invalid = try client.request(
            "GET", "/proxy/origin\(path)/b?cc=max-age%3D10&h=CDN-Cache-Control:max-age%3D100&h=Larder-Cache-Control:max-age%3D%22x")
        XCTAssertEqual(invalid.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=100")
        // Its no-store keeps a response out of Larder only.
        for _ in 0..<2 {
            let response = try client.request("GET", "/proxy/origin\(path)/c?cc=public,max-age%3D600&h=Larder-Cache-Control:no-store")
            XCTAssertEqual(response.headers["cache-control"], "public,max-age=600")
        }
        XCTAssertEqual(origin.count("/base\(path)/c"), 2)

        // Through /fetch as well.
        let fetched = try client.fetch(["url": url(path + "/d", "cc=max-age%3D10&h=Larder-Cache-Control:max-age%3D300")])
        XCTAssertEqual(fetched.cache["ttl"] as? Int, 300)
    }

    func testTheTargetedFieldsAreTheOperators() throws {
        let larder = try startProxy {
            $0.targetedCacheControl = ["edge-control"]
            $0.passOwnCacheControl = false
        }
        let client = try larder.connection()
        let path = uniquePath()
        let response = try client.request(
            "GET", "/proxy/origin\(path)?cc=max-age%3D10&h=Edge-Control:max-age%3D50&h=Larder-Cache-Control:max-age%3D300")
        XCTAssertEqual(response.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=50")
        XCTAssertNil(response.headers["edge-control"])
        XCTAssertEqual(response.headers["larder-cache-control"], "max-age=300", "not in the list: an ordinary field")

        let passing = try startProxy { $0.passOwnCacheControl = true }
        let passed = try passing.connection().request("GET", "/proxy/origin\(path)/b?h=Larder-Cache-Control:max-age%3D300")
        XCTAssertEqual(passed.headers["larder-cache-control"], "max-age=300")
        XCTAssertEqual(passed.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=300")
    }
}
