// WriteHealth: while writes fail, saves pass through but for one probe every 2 s, and failures
// are reported once a minute at most. Times are given, not read.

import XCTest

@testable import LarderSQLite

final class WriteHealthTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000

    func testWhileWritesSucceedEverySaveGoesAhead() {
        let health = WriteHealth()
        XCTAssertTrue(health.writesSucceed)
        XCTAssertTrue(health.admitsSave(now: 100 * second))
        XCTAssertTrue(health.admitsSave(now: 100 * second))
    }

    func testWhileWritesFailOneSaveEveryTwoSecondsGoesAheadAsAProbe() {
        let health = WriteHealth()
        _ = health.recordFailure(now: 100 * second)
        XCTAssertFalse(health.writesSucceed)
        XCTAssertTrue(health.admitsSave(now: 100 * second), "the first probe")
        XCTAssertFalse(health.admitsSave(now: 101 * second))
        XCTAssertFalse(health.admitsSave(now: 102 * second), "2 s exactly is not past the interval")
        XCTAssertTrue(health.admitsSave(now: 102 * second + 1))
        XCTAssertTrue(health.recordSuccess(), "writes were failing until now")
        XCTAssertFalse(health.recordSuccess(), "said once")
        XCTAssertTrue(health.admitsSave(now: 102 * second + 2))
    }

    func testFailuresAreReportedAtOnceThenOnceAMinuteWithTheirCount() {
        let health = WriteHealth()
        XCTAssertEqual(health.recordFailure(now: 100 * second), 1, "the first failure is reported at once")
        XCTAssertNil(health.recordFailure(now: 110 * second))
        XCTAssertNil(health.recordFailure(now: 159 * second))
        XCTAssertEqual(health.recordFailure(now: 161 * second), 3, "past a minute: the failures since the last report")
        XCTAssertEqual(health.failures.load(ordering: .relaxed), 4)
    }
}
