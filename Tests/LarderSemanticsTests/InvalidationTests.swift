// RFC 9111 §4.4: unsafe methods invalidate what is stored for the URIs they touch.

import Foundation
import LarderCore
import LarderTesting
import XCTest

final class InvalidationTests: SemanticsTestCase {
    func testAPostInvalidatesTheTargetURIEverywhere() throws {
        try onEachStore {
            let path = uniquePath()
            // Two entries for one URI: two namespaces.
            for namespace in ["a", "b"] {
                XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300, "namespace": namespace]]).outcome, "miss")
            }
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300, "namespace": "a"]]).outcome, "hit")
            let post = fetch(["url": url(path), "method": "POST", "body": ["change": 1]])
            XCTAssertEqual(post.outcome, "bypass")
            for namespace in ["a", "b"] {
                XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 300, "namespace": namespace]]).outcome, "miss", namespace)
            }
        }
    }

    func testLocationOnTheSameOriginIsInvalidatedButNotAnotherOrigin() throws {
        try onEachStore {
            let item = uniquePath("item")
            let elsewhere = "http://other.test\(item)"
            XCTAssertEqual(fetch(["url": url(item), "cache": ["ttl": 300]]).outcome, "miss")
            XCTAssertEqual(fetch(["url": elsewhere, "cache": ["ttl": 300]]).outcome, "miss")
            let collection = uniquePath("collection")
            _ = fetch(["url": url(collection, "status=201&location=\(item)"), "method": "POST", "body": [:] as [String: Any]])
            XCTAssertEqual(fetch(["url": url(item), "cache": ["ttl": 300]]).outcome, "miss", "same origin: invalidated")
            _ = fetch([
                "url": url(collection, "status=201&location=\(elsewhere.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"),
                "method": "POST", "body": [:] as [String: Any]
            ])
            XCTAssertEqual(fetch(["url": elsewhere, "cache": ["ttl": 300]]).outcome, "hit", "another origin: kept")
        }
    }

    func testErrorResponsesInvalidateNothing() throws {
        try onEachStore {
            for (status, expected) in [(500, "hit"), (404, "hit"), (204, "miss")] {
                let target = url(uniquePath("status\(status)"), "unsafe=\(status)")
                XCTAssertEqual(fetch(["url": target, "cache": ["ttl": 300]]).outcome, "miss")
                let delete = fetch(["url": target, "method": "DELETE"])
                XCTAssertEqual(delete.json["status"] as? Int, status)
                XCTAssertEqual(fetch(["url": target, "cache": ["ttl": 300]]).outcome, expected, "after a \(status)")
            }
        }
    }

    func testAPutThroughTheProxyInvalidates() throws {
        try onEachStore {
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D60"
            XCTAssertEqual(try proxy(target).outcome, .miss)
            XCTAssertEqual(try proxy(target).outcome, .hit)
            XCTAssertEqual(try proxy(target, method: .put, body: Array("new".utf8)).status, 200)
            XCTAssertEqual(try proxy(target).outcome, .miss)
            XCTAssertEqual(origin.count(path), 3)
        }
    }

    func testAMethodLarderDoesNotKnowIsForwardedAndInvalidates() throws {
        try onEachStore {
            // RFC 9111 §4.4: a method whose safety is unknown counts as unsafe.
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D60"
            _ = try proxy(target)
            XCTAssertEqual(try proxy(target).outcome, .hit)
            let search = try proxy(target, method: try XCTUnwrap(HTTPMethod(rawValue: "M-SEARCH")), body: Array("abc".utf8))
            XCTAssertEqual(search.status, 200)
            XCTAssertEqual(search.outcome, .bypass)
            let received = try XCTUnwrap(origin.requests(path).last)
            XCTAssertEqual(received.method, "M-SEARCH")
            XCTAssertEqual(String(decoding: received.body, as: UTF8.self), "abc")
            XCTAssertEqual(try proxy(target).outcome, .miss)

            // A safe method (OPTIONS) is forwarded too, and invalidates nothing.
            _ = try proxy(target, method: try XCTUnwrap(HTTPMethod(rawValue: "OPTIONS")))
            XCTAssertEqual(origin.requests(path).last?.method, "OPTIONS")
            XCTAssertEqual(try proxy(target).outcome, .hit)
        }
    }

    func testAPostResponseNamingItsOwnURIAnswersLaterGets() throws {
        try onEachStore {
            // RFC 9110 §9.3.3: explicit freshness and Content-Location = the target make a POST
            // response reusable for GET; without Content-Location the POST only invalidates.
            let path = uniquePath()
            let target = "\(path)?cc=max-age%3D60&clself=1"
            let post = try proxy(target, method: .post, body: Array("new".utf8))
            XCTAssertEqual(post.status, 200)
            let get = try proxy(target)
            XCTAssertEqual(get.outcome, .hit)
            XCTAssertEqual(get.text, post.text)
            XCTAssertEqual(origin.count(path), 1)

            let plain = uniquePath()
            _ = try proxy("\(plain)?cc=max-age%3D60")
            _ = try proxy("\(plain)?cc=max-age%3D60", method: .post, body: Array("new".utf8))
            XCTAssertEqual(try proxy("\(plain)?cc=max-age%3D60").outcome, .miss)
        }
    }
}
