// RFC 9111 §4.4: unsafe methods invalidate what is stored for the URIs they touch.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class InvalidationTests: IntegrationTestCase {
    func testAPostInvalidatesTheTargetURIEverywhere() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // Two entries for one URI: two namespaces.
        for namespace in ["a", "b"] {
            XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300, "namespace": namespace]]).outcome, "miss")
        }
        XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300, "namespace": "a"]]).outcome, "hit")
        let post = try client.fetch(["url": url(path), "method": "POST", "body": ["change": 1]])
        XCTAssertEqual(post.outcome, "bypass")
        for namespace in ["a", "b"] {
            XCTAssertEqual(try client.fetch(["url": url(path), "cache": ["ttl": 300, "namespace": namespace]]).outcome, "miss", namespace)
        }
    }

    func testLocationOnTheSameOriginIsInvalidatedButNotAnotherOrigin() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let item = uniquePath("item")
        let elsewhere = "http://localhost:\(origin.port)\(item)"
        XCTAssertEqual(try client.fetch(["url": url(item), "cache": ["ttl": 300]]).outcome, "miss")
        XCTAssertEqual(try client.fetch(["url": elsewhere, "cache": ["ttl": 300]]).outcome, "miss")
        let collection = uniquePath("collection")
        _ = try client.fetch(["url": url(collection, "status=201&location=\(item)"), "method": "POST", "body": [:] as [String: Any]])
        XCTAssertEqual(try client.fetch(["url": url(item), "cache": ["ttl": 300]]).outcome, "miss", "same origin: invalidated")
        _ = try client.fetch([
            "url": url(collection, "status=201&location=\(elsewhere.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"),
            "method": "POST", "body": [:] as [String: Any]
        ])
        XCTAssertEqual(try client.fetch(["url": elsewhere, "cache": ["ttl": 300]]).outcome, "hit", "another origin: kept")
    }

    func testErrorResponsesInvalidateNothing() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        for (status, expected) in [(500, "hit"), (404, "hit"), (204, "miss")] {
            let target = url(uniquePath("status\(status)"), "unsafe=\(status)")
            XCTAssertEqual(try client.fetch(["url": target, "cache": ["ttl": 300]]).outcome, "miss")
            let delete = try client.fetch(["url": target, "method": "DELETE"])
            XCTAssertEqual(delete.json["status"] as? Int, status)
            XCTAssertEqual(try client.fetch(["url": target, "cache": ["ttl": 300]]).outcome, expected, "after a \(status)")
        }
    }

    func testAPutThroughTheProxyInvalidates() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60")
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
        _ = try client.request("PUT", "/proxy/origin\(path)?cc=max-age%3D60", body: Array("new".utf8))
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?.contains("fwd=uri-miss") ?? false)
    }

    func testAMethodLarderDoesNotKnowIsForwardedAndInvalidates() throws {
        // RFC 9111 §4.4: a method whose safety is unknown counts as unsafe.
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60")
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
        let search = try client.request("M-SEARCH", "/proxy/origin\(path)?cc=max-age%3D60", body: Array("abc".utf8))
        XCTAssertEqual(search.status, 200)
        XCTAssertEqual(search.headers["cache-status"], "larder; fwd=method; fwd-status=200")
        let received = try XCTUnwrap(origin.requests(path).last)
        XCTAssertEqual(received.method, "M-SEARCH")
        XCTAssertEqual(String(decoding: received.body, as: UTF8.self), "abc")
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?.contains("fwd=uri-miss") ?? false)

        // A safe method (OPTIONS) is forwarded too, and invalidates nothing.
        _ = try client.request("OPTIONS", "/proxy/origin\(path)?cc=max-age%3D60")
        XCTAssertEqual(origin.requests(path).last?.method, "OPTIONS")
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"]?.hasPrefix("larder; hit") ?? false)
    }

    func testAPostResponseNamingItsOwnURIAnswersLaterGets() throws {
        // RFC 9110 §9.3.3: explicit freshness and Content-Location = the target make a POST
        // response reusable for GET; without Content-Location the POST only invalidates.
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        let target = "/proxy/origin\(path)?cc=max-age%3D60&clself=1"
        let post = try client.request("POST", target, body: Array("new".utf8))
        XCTAssertEqual(post.status, 200)
        let get = try client.request("GET", target)
        XCTAssertTrue(get.headers["cache-status"]?.hasPrefix("larder; hit") ?? false, get.headers["cache-status"] ?? "")
        XCTAssertEqual(get.body, post.body)
        XCTAssertEqual(origin.count(path), 1)

        let plain = uniquePath()
        _ = try client.request("POST", "/proxy/origin\(plain)?cc=max-age%3D60", body: Array("new".utf8))
        XCTAssertTrue(
            try client.request("GET", "/proxy/origin\(plain)?cc=max-age%3D60").headers["cache-status"]?.contains("fwd=uri-miss") ?? false)
    }
}
