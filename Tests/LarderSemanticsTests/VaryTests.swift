// Vary (RFC 9111 §4.1): variants per key, the bound on them, coalesced waiters, the proxy.

import Foundation
import LarderCore
import LarderTesting
import XCTest

final class VaryTests: SemanticsTestCase {
    private func fetch(_ path: String, language: String?, query: String = "cc=max-age%3D60&h=Vary:Accept-Language") -> TestResponse {
        var request: [String: Any] = ["url": url(path, query)]
        if let language { request["headers"] = ["Accept-Language": language] }
        return fetch(request)
    }

    private func echoedLanguage(_ response: TestResponse?) -> String? {
        (response?.upstreamBody["headers"] as? [String: String])?["accept-language"]
    }

    func testEachVariantIsStoredAndServedToMatchingRequestsOnly() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(fetch(path, language: "en").outcome, "miss")
            let french = fetch(path, language: "fr")
            XCTAssertEqual(french.outcome, "miss", "another variant")
            XCTAssertEqual(echoedLanguage(french), "fr")
            let english = fetch(path, language: "en")
            XCTAssertEqual(english.outcome, "hit")
            XCTAssertEqual(echoedLanguage(english), "en")
            XCTAssertEqual(fetch(path, language: "fr").outcome, "hit")
            XCTAssertEqual(fetch(path, language: nil).outcome, "miss", "absent is a variant of its own")
            XCTAssertEqual(fetch(path, language: nil).outcome, "hit")
            XCTAssertEqual(origin.count(path), 3)
        }
    }

    func testVaryStarIsNeverStored() throws {
        try onEachStore {
            let path = uniquePath()
            let response = fetch(["url": url(path, "cc=max-age%3D60&h=Vary:*")])
            XCTAssertEqual(response.cache["notStoredBecause"] as? String, "response_varies")
            XCTAssertEqual(fetch(["url": url(path, "cc=max-age%3D60&h=Vary:*")]).outcome, "miss")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testTheOldestVariantIsReplacedBeyondTheLimit() throws {
        storeSettings.maxVariants = 2
        try onEachStore {
            let path = uniquePath()
            for language in ["en", "fr", "de"] {
                XCTAssertEqual(fetch(path, language: language).outcome, "miss")
                clock.advance(by: 1)
            }
            XCTAssertEqual(fetch(path, language: "de").outcome, "hit")
            XCTAssertEqual(fetch(path, language: "fr").outcome, "hit")
            XCTAssertEqual(fetch(path, language: "en").outcome, "miss", "the oldest variant was replaced")
        }
    }

    func testVariantsSurviveARestart() throws {
        try onEachStore(persistent: true) {
            let path = uniquePath()
            _ = fetch(path, language: "en")
            _ = fetch(path, language: "fr")
            try reopenStore()
            XCTAssertEqual(echoedLanguage(fetch(path, language: "fr")), "fr")
            XCTAssertEqual(fetch(path, language: "en").outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    /// Twenty callers in two languages wait on one held origin request: each gets its own
    /// language, whichever request led the flight.
    func testCoalescedWaitersNeverGetAnotherVariant() throws {
        try onEachStore {
            let path = uniquePath()
            let query = "cc=max-age%3D60&h=Vary:Accept-Language&hold=gate"
            let languages = (0..<20).map { $0 % 2 == 0 ? "en" : "fr" }
            let pending = languages.map { language in
                fetchLater(["url": url(path, query), "headers": ["Accept-Language": language]])
            }
            XCTAssertTrue(origin.holds.waitForHeld(path, count: 1))
            XCTAssertEqual(engine.coalescedCount, 19, "all but the first wait on its flight")
            origin.holds.release(path)
            let echoed = pending.map { echoedLanguage($0.wait()) }
            XCTAssertEqual(echoed, languages, "every caller got its own language")
            XCTAssertEqual(origin.count(path), 2, "the other language was fetched once for its waiters")
        }
    }

    func testTheProxyHonoursVary() throws {
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D60&h=Vary:Accept-Encoding"
            XCTAssertEqual(try proxy(target, headers: [("Accept-Encoding", "gzip")]).outcome, .miss)
            XCTAssertEqual(try proxy(target, headers: [("Accept-Encoding", "br")]).outcome, .miss)
            XCTAssertEqual(try proxy(target, headers: [("Accept-Encoding", "gzip")]).outcome, .hit)
            XCTAssertEqual(origin.count(path), 2)
        }
    }
}
