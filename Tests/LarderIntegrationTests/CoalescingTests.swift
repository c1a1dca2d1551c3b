// Request coalescing: concurrent misses on one key share one upstream request.

import Foundation
import LarderCore
import LarderServiceTesting
import LarderSync
import XCTest

final class CoalescingTests: IntegrationTestCase {
    /// Sends `count` concurrent /fetch requests, each on its own connection, all released at
    /// once; returns the responses (nil for a transport failure).
    private func concurrently(_ count: Int, port: Int, _ request: [String: Any]) -> [TestResponse?] {
        let body = Array(try! JSONSerialization.data(withJSONObject: request))
        let responses = Locked<[TestResponse?]>([])
        XCTAssertTrue(
            concurrently(count) { _ in
                let response = try? TestConnection(port: port).request(
                    "POST", "/fetch", headers: ["Content-Type": "application/json"], body: body)
                responses.withLock { $0.append(response) }
            })
        return responses.withLock { $0 }
    }

    func test500ConcurrentColdRequestsMakeExactlyOneOriginRequest() throws {
        let larder = try startLarder()
        let path = uniquePath()
        // The origin answers once the 499 others joined the first request's fetch: all 500 overlap.
        let released = release([path], whenCoalesced: 499, on: larder.service)
        let responses = concurrently(500, port: larder.port, ["url": url(path, "hold=gate"), "cache": ["ttl": 300]])
        XCTAssertTrue(released.waitForRelease(), "the requests overlapped")
        XCTAssertEqual(responses.count, 500)
        XCTAssertEqual(responses.filter { $0?.status == 200 && $0?.json["status"] as? Int == 200 }.count, 500)
        XCTAssertEqual(origin.count(path), 1, "exactly one upstream request")
        let outcomes = responses.compactMap { $0?.outcome }
        XCTAssertEqual(outcomes.filter { $0 == "miss" }.count, 1)
        let coalesced = responses.filter { $0?.cache["coalesced"] as? Bool == true }.count
        XCTAssertEqual(outcomes.filter { $0 == "hit" }.count, 499, "the others were coalesced or arrived after the store")
        XCTAssertGreaterThan(coalesced, 0)
        XCTAssertEqual(coalesced, 499, "all waited on the one fetch")
        XCTAssertEqual(Set(responses.compactMap { $0?.originCount }), [1], "everyone got the one response")
        // Exact counts (issue 35): the joiners are hits marked coalesced, the leader is not, and
        // the server counted each answer as its client saw it (answers are counted before they
        // are sent).
        XCTAssertEqual(Set(responses.filter { $0?.cache["coalesced"] as? Bool == true }.map { $0?.outcome }), ["hit"])
        XCTAssertNil(responses.first { $0?.outcome == "miss" }??.cache["coalesced"], "the leader did not join a flight")
        let sinceStart = try XCTUnwrap(try larder.connection().request("GET", "/cache/stats").json["sinceStart"] as? [String: Any])
        XCTAssertEqual(sinceStart["misses"] as? Int, 1)
        XCTAssertEqual(sinceStart["hits"] as? Int, 499)
        XCTAssertEqual(sinceStart["coalesced"] as? Int, coalesced)
    }

    func testNonShareableResponsesMakeWaitersFetchOnTheirOwn() throws {
        let larder = try startLarder()
        let path = uniquePath()
        // The first request's answer comes once the 19 others are waiting on it.
        let released = release([path], whenCoalesced: 19, on: larder.service)
        let responses = concurrently(20, port: larder.port, ["url": url(path, "hold=gate&cc=private")])
        XCTAssertTrue(released.waitForRelease(), "the requests overlapped")
        XCTAssertEqual(larder.service.coalescedCount, 19, "the others waited on the first before fetching on their own")
        XCTAssertEqual(responses.filter { $0?.json["status"] as? Int == 200 }.count, 20)
        XCTAssertEqual(origin.count(path), 20, "a private response is not shared")
        XCTAssertTrue(responses.allSatisfy { $0?.cache["coalesced"] == nil })
    }

    /// A metric's value from /metrics (a family without labels), nil when absent.
    private func metric(_ name: String, _ larder: RunningLarder) throws -> Double? {
        let text = try larder.connection().request("GET", "/metrics").text
        return text.split(separator: "\n").first { $0.hasPrefix(name + " ") || $0.hasPrefix(name + "{} ") }
            .flatMap { $0.split(separator: " ").last.flatMap { Double($0) } }
    }

    func testAURLRememberedUncacheableIsFetchedAtOnceAndInParallel() throws {
        let larder = try startLarder()
        let port = larder.port
        let path = uniquePath()
        let remembered = url(path, "cc=private&hold=10")
        // The first answer is private: the key is remembered as uncacheable.
        XCTAssertEqual(try larder.connection().fetch(["url": url(path, "cc=private"), "cache": ["ignoreQuery": ["hold"]]]).outcome, "miss")
        // Ten at once: the origin answers only once all ten reach it, so none waited on another.
        XCTAssertTrue(
            concurrently(10) { _ in
                let response = try? TestConnection(port: port).fetch(["url": remembered, "cache": ["ignoreQuery": ["hold"]]])
                XCTAssertEqual(response?.json["status"] as? Int, 200, response?.text ?? "no answer")
            })
        XCTAssertEqual(origin.count(path), 11)
        XCTAssertEqual(larder.service.coalescedCount, 0)
        XCTAssertEqual(try metric("larder_uncacheable_passes_total", larder), 10)
        XCTAssertEqual(try metric("larder_uncacheable_keys", larder), 1)

        // A cacheable answer for the key ends it; then a hit.
        let client = try larder.connection()
        let cacheable: [String: Any] = ["url": url(path, "cc=max-age%3D60"), "cache": ["ignoreQuery": ["hold", "cc"]]]
        _ = try client.fetch(["url": url(path, "cc=private"), "cache": ["ignoreQuery": ["hold", "cc"]]])
        XCTAssertEqual(try metric("larder_uncacheable_keys", larder), 2)
        XCTAssertEqual(try client.fetch(cacheable).cache["stored"] as? Bool, true)
        XCTAssertEqual(try metric("larder_uncacheable_keys", larder), 1)
        XCTAssertEqual(try client.fetch(cacheable).outcome, "hit")

        // Through the proxy too: each of ten at once goes straight to the origin.
        let proxy = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let target = "/proxy/origin\(path)/p?cc=private"
        XCTAssertEqual(try proxy.connection().request("GET", target).status, 200)
        let proxyPort = proxy.port
        XCTAssertTrue(concurrently(10) { _ in XCTAssertEqual(try? TestConnection(port: proxyPort).request("GET", target).status, 200) })
        XCTAssertEqual(origin.count(path + "/p"), 11)
        XCTAssertEqual(proxy.service.coalescedCount, 0)
        XCTAssertEqual(try metric("larder_uncacheable_passes_total", proxy), 10)
    }

    func testOnlyTheResponsesOwnReasonsAreRemembered() throws {
        let larder = try startLarder { $0.uncacheableMemorySeconds = 30 }
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path + "/a", "status=503")])
        _ = try client.fetch(["url": url(path + "/b"), "cache": ["policy": "no-store"]])
        _ = try client.fetch(["url": url(path + "/c"), "headers": ["Cache-Control": "no-store"]])
        XCTAssertEqual(try metric("larder_uncacheable_keys", larder), 0, "a 5xx passes, and the caller's no-store is its own")
        _ = try client.fetch(["url": url(path + "/d", "cc=no-store")])
        _ = try client.fetch(["url": url(path + "/e", "status=403")])
        XCTAssertEqual(try metric("larder_uncacheable_keys", larder), 2)
        // Remembered for the time set, then coalescing again.
        clock.advance(by: 31)
        _ = try client.fetch(["url": url(path + "/d", "cc=no-store")])
        XCTAssertEqual(try metric("larder_uncacheable_passes_total", larder), 0, "lapsed: not sent straight")

        let off = try startLarder { $0.uncacheableMemorySeconds = 0 }
        _ = try off.connection().fetch(["url": url(path + "/f", "cc=private")])
        XCTAssertEqual(try metric("larder_uncacheable_keys", off), 0)
    }

    func testDifferentVersionsDoNotCoalesce() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let port = larder.port
        // The origin answers once both requests reach it: had they coalesced, one never would.
        let first = url(path, "hold=2")
        XCTAssertTrue(
            concurrently(2) { index in
                let response = try? TestConnection(port: port).fetch(["url": first, "cache": ["ttl": 60, "version": index + 1]])
                XCTAssertEqual(response?.json["status"] as? Int, 200)
            })
        XCTAssertEqual(origin.count(path), 2)
        XCTAssertEqual(larder.service.coalescedCount, 0)
        // The control (issue 35): the same two requests with one version share one upstream
        // request, so the two above were two because their versions differ. The origin answers
        // once the second joined the first's fetch.
        let control = uniquePath()
        let released = release([control], whenCoalesced: 1, on: larder.service)
        let responses = concurrently(2, port: port, ["url": url(control, "hold=gate"), "cache": ["ttl": 60, "version": 1]])
        XCTAssertTrue(released.waitForRelease(), "the second request joined the first's fetch")
        XCTAssertEqual(responses.map { $0?.status }, [200, 200])
        XCTAssertEqual(origin.count(control), 1)
        XCTAssertEqual(responses.filter { $0?.cache["coalesced"] as? Bool == true }.count, 1)
    }

    func testAnUpstreamFailureIsSharedWithTheWaiters() throws {
        let larder = try startLarder { $0.maxUpstreamBodyBytes = 1000 }
        let path = uniquePath()
        // The origin answers once the 19 others joined the first request's fetch, with a body
        // over --max-upstream-body-bytes: the fetch fails, and its failure is every waiter's.
        let released = release([path], whenCoalesced: 19, on: larder.service)
        let responses = concurrently(20, port: larder.port, ["url": url(path, "hold=gate&size=5000"), "cache": ["ttl": 60]])
        XCTAssertTrue(released.waitForRelease(), "the requests overlapped")
        XCTAssertEqual(responses.compactMap { $0?.errorCode }, Array(repeating: "upstream_too_large", count: 20))
        XCTAssertEqual(origin.count(path), 1, "the waiters did not fetch on their own")
        XCTAssertEqual(larder.service.coalescedCount, 19)
    }
}
