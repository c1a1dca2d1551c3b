// The one format of times in admin answers: RFC 3339, UTC, milliseconds.

import LarderCore
import XCTest

final class RFC3339TimeTests: XCTestCase {
    func testFormatsUTCWithMilliseconds() {
        XCTAssertEqual(RFC3339Time.format(0), "1970-01-01T00:00:00.000Z")
        XCTAssertEqual(RFC3339Time.format(1_795_684_558.123), "2026-11-26T09:15:58.123Z")
        XCTAssertEqual(RFC3339Time.format(951_782_400), "2000-02-29T00:00:00.000Z", "a leap day")
        XCTAssertEqual(RFC3339Time.format(1_795_684_558.9996), "2026-11-26T09:15:59.000Z", "rounded to the millisecond")
        XCTAssertEqual(RFC3339Time.format(-0.5), "1969-12-31T23:59:59.500Z")
        XCTAssertEqual(RFC3339Time.format(1e15), "9999-12-31T23:59:59.999Z", "clamped to four-digit years")
        XCTAssertEqual(RFC3339Time.format(.infinity), "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(RFC3339Time.format(-1e15), "0000-01-01T00:00:00.000Z")
    }

    func testAgreesWithHTTPDateAcrossYears() {
        // Every 37 days and some seconds over 60 years: read back, and the same instant as the
        // HTTP date of it (written and read by HTTPDate, on its own calendar code).
        var time = 0.0
        while time < 60 * 365 * 86_400 {
            let text = RFC3339Time.format(time)
            XCTAssertEqual(RFC3339Time.parse(text), time, text)
            XCTAssertEqual(HTTPDate.parse(HTTPDate.format(time)), RFC3339Time.parse(text), text)
            time += 37 * 86_400 + 4_321
        }
        XCTAssertEqual(RFC3339Time.parse(RFC3339Time.format(1_795_684_558.123))!, 1_795_684_558.123, accuracy: 0.000_5)
    }

    func testParsesRFC3339WithOffsetsAndFractions() {
        XCTAssertEqual(RFC3339Time.parse("2026-11-26T09:15:58Z"), 1_795_684_558)
        XCTAssertEqual(RFC3339Time.parse("2026-11-26t09:15:58z"), 1_795_684_558)
        XCTAssertEqual(RFC3339Time.parse("2026-11-26T10:15:58+01:00"), 1_795_684_558)
        XCTAssertEqual(RFC3339Time.parse("2026-11-26T08:45:58-00:30"), 1_795_684_558)
        XCTAssertEqual(RFC3339Time.parse("2026-11-26T09:15:58.5Z"), 1_795_684_558.5)
        for invalid in [
            "", "2026-11-26", "2026-11-26T09:15:58", "2026-13-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-11-26T24:00:00Z",
            "2026-11-26T09:15:58.Z", "2026-11-26T09:15:58+0100", "2026-11-26T09:15:58Z ", "1795684558", "2026-11-26 09:15:58Z"
        ] {
            XCTAssertNil(RFC3339Time.parse(invalid), invalid)
        }
    }
}
