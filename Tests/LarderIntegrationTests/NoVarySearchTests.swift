// No-Vary-Search: requests that differ only in query parameters a stored response declared
// irrelevant find it, through the proxy and /fetch; the key of responses without it is the same.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class NoVarySearchTests: IntegrationTestCase {
    func testRequestsThatDifferOnlyInIgnoredParametersShareTheEntry() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        let rule = "cc=max-age%3D600&h=No-Vary-Search:params%3D(%22utm%22%20%22ref%22)"
        func status(_ query: String) throws -> String? {
            try client.request("GET", "/proxy/origin\(path)?\(rule)&\(query)").headers["cache-status"]
        }
        XCTAssertEqual(try status("q=1&utm=a"), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=600")
        XCTAssertEqual(try status("q=1&utm=b"), "larder; hit; ttl=600", "only utm differs")
        XCTAssertEqual(try status("ref=x&q=1"), "larder; hit; ttl=600")
        XCTAssertEqual(try status("q=1"), "larder; hit; ttl=600")
        XCTAssertEqual(origin.count(path), 1)
        XCTAssertEqual(try status("q=2&utm=a"), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=600", "q matters")
        XCTAssertEqual(origin.count(path), 2)

        // Only these matter; the rest are ignored.
        let only = "cc=max-age%3D600&h=No-Vary-Search:params,%20except%3D(%22id%22)"
        XCTAssertEqual(
            try client.request("GET", "/proxy/origin\(path)/o?\(only)&id=1&x=1").headers["cache-status"]?.hasPrefix("larder; fwd=uri-miss"),
            true)
        XCTAssertEqual(try client.request("GET", "/proxy/origin\(path)/o?\(only)&id=1&y=2").headers["cache-status"], "larder; hit; ttl=600")
        XCTAssertEqual(
            try client.request("GET", "/proxy/origin\(path)/o?\(only)&id=2").headers["cache-status"]?.hasPrefix("larder; fwd=uri-miss"),
            true)

        // A malformed field is ignored: every parameter matters.
        let malformed = "cc=max-age%3D600&h=No-Vary-Search:params%3D(utm)"
        _ = try client.request("GET", "/proxy/origin\(path)/m?\(malformed)&utm=a")
        XCTAssertEqual(
            try client.request("GET", "/proxy/origin\(path)/m?\(malformed)&utm=b").headers["cache-status"]?.hasPrefix(
                "larder; fwd=uri-miss"),
            true)
    }

    func testTheSameThroughFetchAndAResponseWithoutItForgetsTheRule() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let rule = "cc=max-age%3D1&h=No-Vary-Search:params%3D(%22session%22)"
        let first = try client.fetch(["url": url(path, "\(rule)&session=1")])
        let second = try client.fetch(["url": url(path, "\(rule)&session=2")])
        XCTAssertEqual(second.outcome, "hit")
        XCTAssertEqual(second.cache["key"] as? String, first.cache["key"] as? String)
        // The key is the one the URL without the ignored parameter has.
        XCTAssertEqual(try client.fetch(["url": url(path, rule)]).cache["key"] as? String, first.cache["key"] as? String)
        // The origin stops declaring it (the stored response expired, the next one has none).
        clock.advance(by: 2)
        _ = try client.fetch(["url": url(path, "cc=max-age%3D1&h=No-Vary-Search:params%3D(%22session%22)&session=3")])
        _ = try client.fetch(["url": url(path, "cc=max-age%3D600&session=4")])
        XCTAssertEqual(try client.fetch(["url": url(path, "cc=max-age%3D600&session=5")]).outcome, "miss", "the rule was forgotten")
        XCTAssertEqual(try client.fetch(["url": url(path, "cc=max-age%3D600&session=4")]).outcome, "hit", "stored under its own key")
    }
}
