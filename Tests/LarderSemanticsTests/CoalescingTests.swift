// Request coalescing: concurrent misses on one key share one origin request, exactly, with the
// origin holding the first until the test has seen every other one join it.

import Foundation
import LarderCore
import LarderTesting
import XCTest

final class CoalescingTests: SemanticsTestCase {
    func test500ConcurrentColdRequestsMakeExactlyOneOriginRequest() throws {
        try onEachStore {
            let path = uniquePath()
            let pending = (0..<500).map { _ in fetchLater(["url": url(path, "hold=gate"), "cache": ["ttl": 300]]) }
            XCTAssertEqual(origin.holds.waiting(path), 1, "one upstream request")
            XCTAssertEqual(engine.coalescedCount, 499, "the others joined it")
            XCTAssertFalse(pending.contains { $0.isAnswered })
            origin.holds.release(path)
            let responses = pending.map { $0.wait() }
            XCTAssertEqual(responses.filter { $0?.status == 200 && $0?.json["status"] as? Int == 200 }.count, 500)
            XCTAssertEqual(origin.count(path), 1, "exactly one upstream request")
            let outcomes = responses.compactMap { $0?.outcome }
            XCTAssertEqual(outcomes.filter { $0 == "miss" }.count, 1)
            XCTAssertEqual(outcomes.filter { $0 == "hit" }.count, 499)
            XCTAssertEqual(Set(responses.filter { $0?.cache["coalesced"] as? Bool == true }.map { $0?.outcome }), ["hit"])
            XCTAssertEqual(responses.filter { $0?.cache["coalesced"] as? Bool == true }.count, 499, "all waited on the one fetch")
            XCTAssertNil(responses.first { $0?.outcome == "miss" }??.cache["coalesced"], "the leader did not join a flight")
            XCTAssertEqual(Set(responses.compactMap { $0?.originCount }), [1], "everyone got the one response")
            let counted = engine.traffic.snapshot()
            XCTAssertEqual(counted.misses, 1)
            XCTAssertEqual(counted.hits, 499)
            XCTAssertEqual(counted.coalesced, 499)
        }
    }

    func testNonShareableResponsesMakeWaitersFetchOnTheirOwn() throws {
        try onEachStore {
            let path = uniquePath()
            let pending = (0..<20).map { _ in fetchLater(["url": url(path, "hold=gate&cc=private")]) }
            XCTAssertEqual(engine.coalescedCount, 19, "the others wait on the first")
            XCTAssertEqual(origin.count(path), 1)
            origin.holds.release(path)
            let responses = pending.map { $0.wait() }
            XCTAssertEqual(responses.filter { $0?.json["status"] as? Int == 200 }.count, 20)
            XCTAssertEqual(origin.count(path), 20, "a private response is not shared: each waiter fetched on its own")
            XCTAssertTrue(responses.allSatisfy { $0?.cache["coalesced"] == nil })
        }
    }

    func testDifferentVersionsDoNotCoalesce() throws {
        try onEachStore {
            let path = uniquePath()
            let versions = [1, 2].map { version in
                fetchLater(["url": url(path, "hold=gate"), "cache": ["ttl": 60, "version": version]])
            }
            XCTAssertEqual(origin.holds.waiting(path), 2, "each version asked the origin")
            XCTAssertEqual(engine.coalescedCount, 0)
            origin.holds.release(path)
            XCTAssertEqual(versions.map { $0.wait()?.json["status"] as? Int }, [200, 200])

            // The control: the same two requests with one version share one upstream request.
            let control = uniquePath()
            let same = (0..<2).map { _ in fetchLater(["url": url(control, "hold=gate"), "cache": ["ttl": 60, "version": 1]]) }
            XCTAssertEqual(origin.holds.waiting(control), 1)
            XCTAssertEqual(engine.coalescedCount, 1)
            origin.holds.release(control)
            XCTAssertEqual(same.map { $0.wait()?.json["status"] as? Int }, [200, 200])
            XCTAssertEqual(origin.count(control), 1)
        }
    }

    func testAnUpstreamFailureIsSharedWithTheWaiters() throws {
        try onEachStore {
            let path = uniquePath()
            origin.fail(path, with: LarderError(.upstreamTimeout, "no answer within 1500 ms"))
            let pending = (0..<20).map { _ in fetchLater(["url": url(path, "hold=gate"), "cache": ["ttl": 60]]) }
            XCTAssertEqual(engine.coalescedCount, 19)
            origin.holds.release(path)
            XCTAssertEqual(pending.compactMap { $0.wait()?.errorCode }, Array(repeating: "upstream_timeout", count: 20))
            XCTAssertEqual(origin.count(path), 1)
        }
    }
}
