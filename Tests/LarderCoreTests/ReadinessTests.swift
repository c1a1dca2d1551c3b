// GET /readyz's rule: unready while the store is degraded and failed within the window; ready
// again without new failures, so that traffic can find out whether the store recovered.

import LarderCore
import XCTest

final class ReadinessTests: XCTestCase {
    func testAHealthyStoreIsReadyWhateverItsFailures() {
        var readiness = Readiness()
        XCTAssertTrue(readiness.isReady(storageHealthy: true, failures: 0, now: 0))
        XCTAssertTrue(readiness.isReady(storageHealthy: true, failures: 5, now: 1), "failures that did not degrade it")
    }

    func testADegradedStoreThatFailsNowIsUnreadyUntilTheWindowPassesWithoutAFailure() {
        var readiness = Readiness()
        XCTAssertTrue(readiness.isReady(storageHealthy: true, failures: 0, now: 100))
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 1, now: 101))
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 1, now: 101 + Readiness.failingWindow - 1))
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 2, now: 120), "a new failure starts the window again")
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 2, now: 120 + Readiness.failingWindow - 0.5))
        XCTAssertTrue(
            readiness.isReady(storageHealthy: false, failures: 2, now: 120 + Readiness.failingWindow),
            "still degraded, but no failure for the window: ready, so that traffic can probe the store")
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 3, now: 200), "and out again at the next failure")
        XCTAssertTrue(readiness.isReady(storageHealthy: true, failures: 3, now: 201), "healthy again: ready at once")
    }

    func testFailuresFromBeforeTheFirstProbeCountAsNow() {
        var readiness = Readiness()
        XCTAssertFalse(readiness.isReady(storageHealthy: false, failures: 4, now: 50))
        XCTAssertTrue(readiness.isReady(storageHealthy: false, failures: 4, now: 50 + Readiness.failingWindow))
    }

    func testADegradedStoreWithoutAnyFailureIsReady() {
        var readiness = Readiness()
        XCTAssertTrue(readiness.isReady(storageHealthy: false, failures: 0, now: 0))
    }
}
