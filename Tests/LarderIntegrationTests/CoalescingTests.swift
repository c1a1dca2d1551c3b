// Request coalescing: concurrent misses on one key share one upstream request.

import Foundation
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
