// The budget on upstream bodies being received (--max-inflight-mb): many large bodies at once
// hold at most the budget plus one body, whatever the number of transfers.

import Foundation
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class InflightBudgetTests: IntegrationTestCase {
    func testManyLargeBodiesAtOnceStayWithinTheBudgetPlusOneBody() throws {
        let budget = 1 << 20
        let bodyBytes = 1 << 20
        let count = 16
        let larder = try startLarder { $0.maxInflightBodyBytes = budget }
        let path = uniquePath()
        let port = larder.port
        // The origin answers none until all 16 wait on it: the 16 bodies are sent at once.
        let target = url(path, "size=\(bodyBytes)&hold=\(count)")
        let whole = Atomic<Int>(0)
        XCTAssertTrue(
            concurrently(count) { index in
                let response = try? TestConnection(port: port).fetch(["url": target + "&i=\(index)"])
                if response?.json["status"] as? Int == 200, (response?.json["bodyText"] as? String)?.utf8.count == bodyBytes {
                    whole.add(1, ordering: .relaxed)
                }
            })
        XCTAssertEqual(whole.load(ordering: .relaxed), count, "every body arrived whole")
        XCTAssertEqual(origin.count(path), count)
        let peak = larder.service.peakInflightBodyBytes
        XCTAssertGreaterThanOrEqual(peak, bodyBytes, "the bodies were counted as they arrived")
        XCTAssertLessThanOrEqual(peak, budget + bodyBytes, "at most the budget plus the oldest transfer's body at once")
    }
}
