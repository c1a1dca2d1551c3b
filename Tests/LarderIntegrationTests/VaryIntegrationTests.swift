// Vary end to end: variants per key, normalisation, the bound, coalescing mismatches, proxy.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import Synchronization
import XCTest

final class VaryIntegrationTests: IntegrationTestCase {
    private func fetch(_ client: TestConnection, _ path: String, language: String?) throws -> TestResponse {
        var request: [String: Any] = ["url": url(path, "cc=max-age%3D60&h=Vary:Accept-Language")]
        if let language { request["headers"] = ["Accept-Language": language] }
        return try client.fetch(request)
    }

    private func echoedLanguage(_ response: TestResponse) -> String? {
        (response.upstreamBody["headers"] as? [String: String])?["accept-language"]
    }

    func testEachVariantIsStoredAndServedToMatchingRequestsOnly() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        XCTAssertEqual(try fetch(client, path, language: "en").outcome, "miss")
        let french = try fetch(client, path, language: "fr")
        XCTAssertEqual(french.outcome, "miss", "another variant")
        XCTAssertEqual(echoedLanguage(french), "fr")
        let english = try fetch(client, path, language: "en")
        XCTAssertEqual(english.outcome, "hit")
        XCTAssertEqual(echoedLanguage(english), "en")
        XCTAssertEqual(try fetch(client, path, language: "fr").outcome, "hit")
        XCTAssertEqual(try fetch(client, path, language: nil).outcome, "miss", "absent is a variant of its own")
        XCTAssertEqual(try fetch(client, path, language: nil).outcome, "hit")
        XCTAssertEqual(origin.count(path), 3)
    }

    func testVaryStarIsNeverStored() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let response = try client.fetch(["url": url(path, "cc=max-age%3D60&h=Vary:*")])
        XCTAssertEqual(response.cache["notStoredBecause"] as? String, "response_varies")
    }

    func testTheOldestVariantIsReplacedBeyondTheLimit() throws {
        let larder = try startLarder { $0.maxVariants = 2 }
        let client = try larder.connection()
        let path = uniquePath()
        for language in ["en", "fr", "de"] {
            XCTAssertEqual(try fetch(client, path, language: language).outcome, "miss")
            clock.advance(by: 1)
        }
        XCTAssertEqual(try fetch(client, path, language: "de").outcome, "hit")
        XCTAssertEqual(try fetch(client, path, language: "fr").outcome, "hit")
        XCTAssertEqual(try fetch(client, path, language: "en").outcome, "miss", "the oldest variant was replaced")
    }

    func testVariantsSurviveARestart() throws {
        let first = try startLarder()
        let path = uniquePath()
        _ = try fetch(try first.connection(), path, language: "en")
        _ = try fetch(try first.connection(), path, language: "fr")
        stopLarder(first)
        let second = try startLarder()
        XCTAssertEqual(echoedLanguage(try fetch(try second.connection(), path, language: "fr")), "fr")
        XCTAssertEqual(try fetch(try second.connection(), path, language: "en").outcome, "hit")
        XCTAssertEqual(origin.count(path), 2)
    }

    func testCoalescedWaitersNeverGetAnotherVariant() throws {
        let larder = try startLarder()
        let path = uniquePath()
        let port = larder.port
        let target = url(path, "cc=max-age%3D60&h=Vary:Accept-Language&delay=200")
        let mismatches = Atomic<Int>(0)
        let answered = Atomic<Int>(0)
        XCTAssertTrue(
            concurrently(20) { index in
                let language = index % 2 == 0 ? "en" : "fr"
                guard let response = try? TestConnection(port: port).fetch(["url": target, "headers": ["Accept-Language": language]])
                else { return }
                answered.add(1, ordering: .relaxed)
                let echoed = (response.upstreamBody["headers"] as? [String: String])?["accept-language"]
                if echoed != language { mismatches.add(1, ordering: .relaxed) }
            })
        XCTAssertEqual(answered.load(ordering: .relaxed), 20)
        XCTAssertEqual(mismatches.load(ordering: .relaxed), 0, "every caller got its own language")
    }

    func testTheProxyHonoursVary() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60&h=Vary:Accept-Encoding"
        _ = try client.request("GET", target, headers: ["Accept-Encoding": "gzip"])
        XCTAssertTrue(
            try client.request("GET", target, headers: ["Accept-Encoding": "br"]).headers["cache-status"]?.contains("fwd=uri-miss") ?? false
        )
        XCTAssertTrue(
            try client.request("GET", target, headers: ["Accept-Encoding": "gzip"]).headers["cache-status"]?.hasPrefix("larder; hit")
                ?? false)
        XCTAssertEqual(origin.count(path), 2)
    }
}
