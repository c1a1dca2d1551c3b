import LarderCore
import XCTest

final class ByteRangeTests: XCTestCase {
    private func answer(
        _ range: String?, ifRange: String? = nil, length: Int = 100, etag: String? = "\"v1\"",
        lastModified: String? = "Sun, 06 Nov 1994 08:49:37 GMT"
    ) -> RangeAnswer {
        ByteRange.answer(range: range, ifRange: ifRange, length: length, etag: etag, lastModified: lastModified)
    }

    func testSingleRanges() {
        XCTAssertEqual(answer("bytes=0-9"), .partial(0...9))
        XCTAssertEqual(answer("bytes=90-"), .partial(90...99))
        XCTAssertEqual(answer("bytes=-10"), .partial(90...99))
        XCTAssertEqual(answer("bytes=-500"), .partial(0...99))
        XCTAssertEqual(answer("bytes=50-500"), .partial(50...99), "clipped to the length")
        XCTAssertEqual(answer("BYTES=1-1"), .partial(1...1))
    }

    func testUnsatisfiableAndIgnoredRanges() {
        XCTAssertEqual(answer("bytes=100-"), .unsatisfiable)
        XCTAssertEqual(answer("bytes=-0"), .unsatisfiable)
        XCTAssertEqual(answer("bytes=0-1", length: 0), .unsatisfiable)
        XCTAssertEqual(answer(nil), .full)
        XCTAssertEqual(answer("bytes=0-1,5-6"), .full, "several ranges: the whole response")
        XCTAssertEqual(answer("bytes=9-1"), .full, "invalid: ignored")
        XCTAssertEqual(answer("items=0-1"), .full)
        XCTAssertEqual(answer("bytes=a-b"), .full)
    }

    func testIfRange() {
        XCTAssertEqual(answer("bytes=0-9", ifRange: "\"v1\""), .partial(0...9))
        XCTAssertEqual(answer("bytes=0-9", ifRange: "\"v2\""), .full)
        XCTAssertEqual(answer("bytes=0-9", ifRange: "W/\"v1\""), .full, "weak tags never match")
        XCTAssertEqual(answer("bytes=0-9", ifRange: "\"v1\"", etag: "W/\"v1\""), .full)
        XCTAssertEqual(answer("bytes=0-9", ifRange: "Sun, 06 Nov 1994 08:49:37 GMT"), .partial(0...9))
        XCTAssertEqual(answer("bytes=0-9", ifRange: "Sun, 06 Nov 1994 08:49:38 GMT"), .full)
    }
}
