// HeaderDeadlines on a clock the test moves: the first header section's deadline, the next
// one's on a kept-alive connection (idle timeout plus header timeout, stamped by a later check),
// none while a request is answered. Sockets are "shut down" into a list; none is real.

import XCTest

@testable import LarderHTTP

final class HeaderDeadlinesTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000
    /// An arbitrary monotonic start, well past zero.
    private let start: UInt64 = 1_000 * 1_000_000_000

    private func check(_ deadlines: HeaderDeadlines, at now: UInt64) -> [Int32] {
        var shut: [Int32] = []
        let any = deadlines.check(now: now) { shut.append($0) }
        XCTAssertEqual(any, !shut.isEmpty)
        return shut
    }

    func testFirstHeaderSectionMustBeCompleteWithinTheHeaderTimeout() {
        let deadlines = HeaderDeadlines(headerTimeoutSeconds: 10, idleTimeoutSeconds: 60)
        _ = deadlines.add(fd: 7, now: start)
        XCTAssertEqual(deadlines.millisecondsToNextCheck(now: start), 10_000)
        XCTAssertEqual(check(deadlines, at: start + 10 * second - 1), [])
        XCTAssertEqual(check(deadlines, at: start + 10 * second), [7])
        XCTAssertNil(deadlines.millisecondsToNextCheck(now: start + 11 * second), "nothing left to check")
        XCTAssertEqual(check(deadlines, at: start + 20 * second), [], "shut down once")
    }

    func testNoDeadlineWhileARequestIsAnswered() {
        let deadlines = HeaderDeadlines(headerTimeoutSeconds: 10, idleTimeoutSeconds: 60)
        let deadline = deadlines.add(fd: 7, now: start)
        deadline.headerSectionComplete()
        XCTAssertEqual(check(deadlines, at: start + 10 * second), [])
        XCTAssertEqual(check(deadlines, at: start + 1_000 * second), [])
    }

    func testKeptAliveConnectionHasTheIdleTimeoutPlusTheHeaderTimeout() {
        let deadlines = HeaderDeadlines(headerTimeoutSeconds: 10, idleTimeoutSeconds: 60)
        let deadline = deadlines.add(fd: 7, now: start)
        deadline.headerSectionComplete()
        XCTAssertEqual(check(deadlines, at: start + second), [], "not due yet; the clock was read")
        deadline.awaitNextRequest()
        // Stamped by the check within `stampInterval` of the last look at the clock.
        XCTAssertEqual(deadlines.nextCheck, start + second + HeaderDeadlines.stampInterval)
        let stampedAt = start + 2 * second
        XCTAssertEqual(check(deadlines, at: stampedAt), [])
        XCTAssertEqual(deadlines.nextCheck, stampedAt + 70 * second)
        XCTAssertEqual(check(deadlines, at: stampedAt + 70 * second - 1), [])
        XCTAssertEqual(check(deadlines, at: stampedAt + 70 * second), [7])
    }

    func testClosedConnectionIsNoLongerWatched() {
        let deadlines = HeaderDeadlines(headerTimeoutSeconds: 10, idleTimeoutSeconds: 60)
        let first = deadlines.add(fd: 7, now: start)
        _ = deadlines.add(fd: 8, now: start)
        _ = deadlines.add(fd: 9, now: start)
        first.closed()
        XCTAssertEqual(check(deadlines, at: start + 10 * second).sorted(), [8, 9])
    }

    func testDeadlinesCloseTogetherAreCheckedInOnePass() {
        let deadlines = HeaderDeadlines(headerTimeoutSeconds: 10, idleTimeoutSeconds: 60)
        _ = deadlines.add(fd: 7, now: start)
        _ = deadlines.add(fd: 8, now: start + 1)
        XCTAssertEqual(check(deadlines, at: start + 10 * second), [7])
        // The next is 1 ns later, but checks are at least `granularity` apart.
        XCTAssertEqual(deadlines.nextCheck, start + 10 * second + HeaderDeadlines.granularity)
        XCTAssertEqual(check(deadlines, at: start + 10 * second + HeaderDeadlines.granularity), [8])
    }
}
