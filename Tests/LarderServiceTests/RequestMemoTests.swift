// The request memos are bounded in bytes however many distinct requests arrive, and their
// estimate of what an entry costs is not below what the heap really gives it.

import LarderCore
import LarderEngine
import LarderServiceTesting
import XCTest

@testable import LarderService

final class RequestMemoTests: XCTestCase {
    private let keys = CacheKeyBuilder(secret: Array(repeating: 7, count: 32))

    /// A /fetch body like the ones callers send, distinct per `index`.
    private func body(_ index: Int) -> [UInt8] {
        Array(
            (#"{"url":"https://api.example.test/v1/items/\#(index)?fields=name,price&lang=en","#
                + #""headers":{"accept":"application/json","x-request-source":"checkout"},"#
                + #""cache":{"ttl":300,"sensitive":"user-\#(index % 97)"}}"#)
                .utf8)
    }

    /// The smallest body, and one near the size limit (a long query), distinct per `index`.
    private func shortBody(_ index: Int) -> [UInt8] { Array(#"{"url":"http://a.test/\#(index)"}"#.utf8) }
    private func longBody(_ index: Int) -> [UInt8] {
        Array(#"{"url":"https://api.example.test/search?id=\#(index)&q=\#(String(repeating: "term+", count: 700))"}"#.utf8)
    }

    private func prepared(_ body: [UInt8]) throws -> Memoized {
        let request = try FetchRequest.parse(json: body)
        return .fetch(PreparedFetch(request: request, derived: keys.derive(for: request)))
    }

    func testKeepsAShareOfAWorkingSetLargerThanItself() throws {
        // About 700 entries' worth of budget, 1,000 requests polled in turn: emptying a full shard
        // or dropping the least recently used would keep none of them for their next turn.
        let bodies = (0..<1_000).map(body)
        let values = try bodies.map(prepared)
        let each = RequestMemo.cost(keyBytes: bodies[0].count, values[0])
        let memo = RequestMemo(budgetBytes: 700 * each)
        var hits = 0
        for round in 0..<6 {
            for (bytes, value) in zip(bodies, values) {
                if memo.lookup(bytes) != nil {
                    if round >= 3 { hits += 1 }
                } else {
                    memo.insert(bytes) { value }
                }
            }
        }
        let ratio = Double(hits) / 3_000
        print("memo: \(memo.usage.entries) entries held, hit ratio \(ratio) over a set of 1,000 polled in turn")
        XCTAssertGreaterThan(ratio, 0.3)
        XCTAssertLessThanOrEqual(memo.usage.bytes, 700 * each)
    }

    func testHoldsNoMoreThanItsBudgetAndKeepsTheLatest() throws {
        let budget = 256 << 10
        let memo = RequestMemo(budgetBytes: budget, admitsOnSecondSight: false)
        var costs = 0
        for index in 0..<20_000 {
            let bytes = body(index)
            let value = try prepared(bytes)
            costs += RequestMemo.cost(keyBytes: bytes.count, value)
            memo.insert(bytes) { value }
            XCTAssertLessThanOrEqual(memo.usage.bytes, budget)
        }
        XCTAssertGreaterThan(costs, 10 * budget, "the test must offer far more than the budget")
        XCTAssertNotNil(memo.lookup(body(19_999)), "the latest entry is kept")
        XCTAssertNil(memo.lookup(body(0)), "the first entries made room long ago")
        XCTAssertGreaterThan(memo.usage.entries, 0)
    }

    func testRemembersARequestTheSecondTimeSoOneOffRequestsDisplaceNothing() throws {
        let hot = (0..<500).map(body)
        let hotValues = try hot.map(prepared)
        let each = RequestMemo.cost(keyBytes: hot[0].count, hotValues[0])
        let memo = RequestMemo(budgetBytes: 2_000 * each)
        for (bytes, value) in zip(hot, hotValues) { memo.insert(bytes) { value } }
        // The doorkeeper is a Bloom filter hashed with the process's random seed: now and then
        // one of 500 requests is wrongly "seen before" (1 run in 90 has one, simulated).
        XCTAssertLessThanOrEqual(memo.usage.entries, 3, "seen once: not remembered")
        for (bytes, value) in zip(hot, hotValues) { memo.insert(bytes) { value } }
        XCTAssertEqual(memo.usage.entries, 500, "seen twice: remembered")
        // A scan of 20,000 requests seen once each (the doorkeeper is cleared several times on
        // the way) leaves the requests that came back where they were.
        let value = try prepared(body(1_000_000))
        var made = 0
        for index in 1_000..<21_000 {
            memo.insert(body(index)) {
                made += 1
                return value
            }
        }
        let kept = hot.filter { memo.lookup($0) != nil }.count
        XCTAssertEqual(kept, 500, "one-off requests displaced requests that came back")
        // A false "seen before" (the filter's false positives) lets a few of them in.
        let scanned = memo.usage.entries - 500
        XCTAssertLessThan(scanned, 20_000 / 10, "one-off requests were remembered")
        XCTAssertEqual(made, scanned, "the value is made only for a request remembered")
        // Requests that do come back are remembered.
        for index in 30_000..<30_100 {
            memo.insert(body(index)) { value }
            memo.insert(body(index)) { value }
        }
        XCTAssertEqual((30_000..<30_100).filter { memo.lookup(body($0)) != nil }.count, 100)
    }

    func testEstimateCoversWhatTheHeapHolds() throws {
        try checkEstimate(body, count: 20_000)
        try checkEstimate(shortBody, count: 20_000)
        try checkEstimate(longBody, count: 4_000)
    }

    private func checkEstimate(_ body: (Int) -> [UInt8], count: Int) throws {
        let bodies = (0..<count).map(body)
        let values = try bodies.map(prepared)
        let estimated = zip(bodies, values).reduce(0) { $0 + RequestMemo.cost(keyBytes: $1.0.count, $1.1) }
        // The heap is the process's: a thread left over from another test may allocate while this
        // one measures, which only adds. So measure up to three times and keep the least.
        var least = Int.max
        for _ in 0..<3 where least > estimated {
            least = min(least, try heapHeld(bodies: bodies, values: values))
        }
        print("memo: \(count) entries of \(bodies[0].count) B, estimated \(estimated / count) B each, heap \(least / count) B each")
        XCTAssertGreaterThanOrEqual(estimated, least, "the estimate must not be below what the heap holds")
    }

    /// What a memo holding `values` under copies of `bodies` takes on the heap, with the values.
    private func heapHeld(bodies: [[UInt8]], values: [Memoized]) throws -> Int {
        // The values are built before and kept alive after, so what is allocated here is the
        // table and the key bytes (copies, as a route keeps the request's own bytes); the values
        // are measured apart, built again.
        let memo = RequestMemo(budgetBytes: Int.max / 2, admitsOnSecondSight: false)
        var copies: [[UInt8]] = []
        copies.reserveCapacity(bodies.count)
        let before = glibcHeapInUse()
        for (bytes, value) in zip(bodies, values) {
            let copy = bytes.withUnsafeBufferPointer { Array($0) }
            copies.append(copy)
            memo.insert(copy) { value }
        }
        let memoHeap = glibcHeapInUse() - before
        XCTAssertEqual(memo.usage.entries, bodies.count)
        // The values themselves (parsed request, derived key) as a memo keeps them alive.
        let valuesBefore = glibcHeapInUse()
        let fresh = try bodies.map(prepared)
        let valueHeap = glibcHeapInUse() - valuesBefore
        withExtendedLifetime((memo, fresh, copies)) {}
        return memoHeap + valueHeap
    }
}
