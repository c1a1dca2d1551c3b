// Which stored bodies are compressed: by type, size, the origin's own encoding and status.

import LarderCore
import XCTest

final class CompressionRulesTests: XCTestCase {
    private let rules = CompressionRules()

    private func compresses(_ contentType: String?, size: Int = 4096, status: Int = 200, encoding: String? = nil) -> Bool {
        var headers: [HeaderField] = []
        if let contentType { headers.append(HeaderField("content-type", contentType)) }
        if let encoding { headers.append(HeaderField("content-encoding", encoding)) }
        return rules.compresses(status: status, headers: headers, bodyCount: size)
    }

    func testTheTypesServicesExchangeAreCompressed() {
        XCTAssertTrue(compresses("application/json"))
        XCTAssertTrue(compresses("Application/JSON; charset=utf-8"))
        XCTAssertTrue(compresses("application/problem+json"), "a +json suffix")
        XCTAssertTrue(compresses("application/atom+xml"))
        XCTAssertTrue(compresses("text/html"))
        XCTAssertTrue(compresses("text/csv;header=present"))
        XCTAssertTrue(compresses("image/svg+xml"))
    }

    func testOtherTypesAndNoTypeAreNot() {
        XCTAssertFalse(compresses("image/png"))
        XCTAssertFalse(compresses("application/octet-stream"))
        XCTAssertFalse(compresses("application/+json"), "a suffix with no subtype before it")
        XCTAssertFalse(compresses("json"))
        XCTAssertFalse(compresses(nil))
    }

    func testWhatTheOriginEncodedIsKeptAsItCame() {
        XCTAssertFalse(compresses("application/json", encoding: "gzip"))
        XCTAssertFalse(compresses("application/json", encoding: "identity, br"))
        XCTAssertTrue(compresses("application/json", encoding: "identity"))
    }

    func testSmallBodiesPartsAndOffAreNot() {
        XCTAssertFalse(compresses("application/json", size: CompressionRules.defaultMinBytes - 1))
        XCTAssertTrue(compresses("application/json", size: CompressionRules.defaultMinBytes))
        XCTAssertFalse(compresses("application/json", status: 206), "a stored part is joined to others as it came")
        XCTAssertFalse(
            CompressionRules.off.compresses(status: 200, headers: [HeaderField("content-type", "text/plain")], bodyCount: 1 << 20))
        XCTAssertTrue(CompressionRules(minBytes: 0, contentTypes: ["text/*"]).isOff, "0 bytes is off")
    }

    func testItPaysWhenAnEighthIsSaved() {
        XCTAssertTrue(CompressionRules.pays(original: 800, compressed: 700))
        XCTAssertFalse(CompressionRules.pays(original: 800, compressed: 701))
        XCTAssertFalse(CompressionRules.pays(original: 5, compressed: 14))
    }

    func testPatternsAreCheckedAsMediaTypes() {
        for good in ["application/json", "text/*", "application/*+json", "application/vnd.api+json"] {
            XCTAssertNil(CompressionRules.refusal(pattern: good), good)
        }
        for bad in ["json", "*/*", "text/", "/json", "application/*json", "text/plain; charset=utf-8", "Text/Plain", "a/b/c"] {
            XCTAssertNotNil(CompressionRules.refusal(pattern: bad), bad)
        }
    }
}
