// POST /fetch's caching rules through the engine: keys, versions, partitions, methods,
// policies, what is stored. A hit is proven by the origin's counter not moving.

import Foundation
import LarderTesting
import XCTest

final class FetchCachingTests: SemanticsTestCase {
    func testSecondCallWithinTTLIsAHitThatNeverReachesTheOrigin() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "page=1"), "cache": ["ttl": 300, "version": 2]]

            let first = fetch(request)
            XCTAssertEqual(first.status, 200)
            XCTAssertEqual(first.outcome, "miss")
            XCTAssertEqual(first.headers["x-cache"], "MISS")
            XCTAssertEqual(first.cache["stored"] as? Bool, true)
            XCTAssertEqual(first.cache["ttl"] as? Int, 300)
            XCTAssertEqual(first.cache["version"] as? Int, 2)
            XCTAssertEqual(first.json["status"] as? Int, 200)
            XCTAssertEqual(first.upstreamBody["path"] as? String, path)
            XCTAssertNotNil((first.json["timing"] as? [String: Any])?["upstreamMs"] as? Double)

            clock.advance(by: 12)
            let second = fetch(request)
            XCTAssertEqual(second.outcome, "hit")
            XCTAssertEqual(second.headers["x-cache"], "HIT")
            XCTAssertEqual(second.cache["age"] as? Int, 12)
            XCTAssertEqual(second.cache["ttl"] as? Int, 288)
            XCTAssertEqual(second.cache["key"] as? String, first.cache["key"] as? String)
            XCTAssertTrue((second.json["timing"] as? [String: Any])?["upstreamMs"] is NSNull)
            XCTAssertEqual(second.upstreamBody["n"] as? Int, 1)
            XCTAssertEqual(origin.count(path), 1)
        }
    }

    func testTTLExpiryGoesBackToTheOrigin() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path), "cache": ["ttl": 60]]
            XCTAssertEqual(fetch(request).outcome, "miss")
            clock.advance(by: 59)
            XCTAssertEqual(fetch(request).outcome, "hit")
            clock.advance(by: 2)
            let expired = fetch(request)
            XCTAssertEqual(expired.outcome, "miss")
            XCTAssertEqual(expired.originCount, 2)
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testVersionChangeMissesAndReplacesTheEntry() throws {
        try onEachStore {
            let path = uniquePath()
            func fetch(version: Int) throws -> TestResponse {
                self.fetch(["url": url(path), "cache": ["ttl": 300, "version": version]])
            }
            XCTAssertEqual(try fetch(version: 1).outcome, "miss")
            XCTAssertEqual(try fetch(version: 1).outcome, "hit")
            let upgraded = try fetch(version: 2)
            XCTAssertEqual(upgraded.outcome, "miss")
            XCTAssertEqual(upgraded.originCount, 2)
            XCTAssertEqual(try fetch(version: 2).outcome, "hit")
            // Version 1 was replaced, so asking for it again is a miss too.
            XCTAssertEqual(try fetch(version: 1).outcome, "miss")
            XCTAssertEqual(origin.count(path), 3)
            XCTAssertEqual(self.fetch(["url": url(path), "cache": ["policy": "cache-only", "version": 2]]).errorCode, "not_cached")
        }
    }

    func testSensitiveValuesPartitionEntries() throws {
        try onEachStore {
            let path = uniquePath()
            func fetch(user: Int) throws -> TestResponse {
                self.fetch(["url": url(path), "cache": ["ttl": 300, "sensitive": ["user": user]]])
            }
            let alice = try fetch(user: 1)
            let bob = try fetch(user: 2)
            XCTAssertEqual(alice.outcome, "miss")
            XCTAssertEqual(bob.outcome, "miss")
            XCTAssertNotEqual(alice.cache["key"] as? String, bob.cache["key"] as? String)
            XCTAssertEqual(try fetch(user: 1).originCount, 1)
            XCTAssertEqual(try fetch(user: 2).originCount, 2)
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testCredentialsPartitionEntriesAutomatically() throws {
        try onEachStore {
            let path = uniquePath()
            func fetch(_ headers: [String: String]) throws -> TestResponse {
                self.fetch(["url": url(path), "headers": headers, "cache": ["ttl": 300]])
            }
            XCTAssertEqual(try fetch(["Authorization": "Bearer alice"]).outcome, "miss")
            XCTAssertEqual(try fetch(["Authorization": "Bearer bob"]).outcome, "miss")
            XCTAssertEqual(try fetch(["Cookie": "session=carol"]).outcome, "miss")
            XCTAssertEqual(try fetch([:]).outcome, "miss")
            XCTAssertEqual(try fetch(["Authorization": "Bearer alice"]).originCount, 1)
            XCTAssertEqual(try fetch(["Authorization": "Bearer bob"]).originCount, 2)
            XCTAssertEqual(origin.count(path), 4)
            XCTAssertEqual(origin.requests(path)[0].headers["authorization"], "Bearer alice")
        }
    }

    func testPostBodiesNeverShareAnEntry() throws {
        try onEachStore {
            let path = uniquePath()
            func post(_ body: [String: Any], ttl: Int? = 300) throws -> TestResponse {
                var request: [String: Any] = ["url": url(path), "method": "POST", "body": body]
                if let ttl { request["cache"] = ["ttl": ttl] }
                return fetch(request)
            }
            XCTAssertEqual(try post(["q": "a"]).outcome, "miss")
            let other = try post(["q": "b"])
            XCTAssertEqual(other.outcome, "miss")
            XCTAssertEqual(other.upstreamBody["body"] as? String, #"{"q":"b"}"#)
            XCTAssertEqual(try post(["q": "a"]).outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
            XCTAssertEqual(origin.requests(path)[0].headers["content-type"], "application/json")

            // POST without a ttl is not cached at all (YTKNetwork caches POST only by time).
            let bypass = try post(["q": "a"], ttl: nil)
            XCTAssertEqual(bypass.outcome, "bypass")
            XCTAssertEqual(bypass.cache["stored"] as? Bool, false)
            XCTAssertEqual(try post(["q": "a"], ttl: nil).outcome, "bypass")
            XCTAssertEqual(origin.count(path), 4)
        }
    }

    func testPutPatchDeleteAreNeverCached() throws {
        try onEachStore {
            let path = uniquePath()
            for method in ["PUT", "PATCH", "DELETE", "PUT"] {
                let response = fetch(["url": url(path), "method": method, "body": ["x": 1], "cache": ["ttl": 300]])
                XCTAssertEqual(response.outcome, "bypass", method)
                XCTAssertEqual(response.upstreamBody["method"] as? String, method)
            }
            XCTAssertEqual(origin.count(path), 4)
        }
    }

    func testHeadIsAnsweredFromAStoredGet() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 60]]).outcome, "miss")
            let head = fetch(["url": url(path), "method": "HEAD", "cache": ["ttl": 60]])
            XCTAssertEqual(head.outcome, "hit")
            XCTAssertEqual(head.json["bodyText"] as? String, "", "no body for a HEAD")
            XCTAssertEqual((head.json["headers"] as? [String: String])?["content-type"], "application/json")
            XCTAssertEqual(origin.requests(path).map(\.method), ["GET"])

            // Nothing stored: the HEAD goes upstream, and is cached as a HEAD; it never triggers a GET.
            let cold = uniquePath("cold")
            XCTAssertEqual(fetch(["url": url(cold), "method": "HEAD", "cache": ["ttl": 60]]).outcome, "miss")
            XCTAssertEqual(fetch(["url": url(cold), "method": "HEAD", "cache": ["ttl": 60]]).outcome, "hit")
            XCTAssertEqual(
                self.fetch(["url": url(cold), "method": "HEAD", "cache": ["policy": "cache-else-load"]]).outcome, "stale",
                "served, never fetched")
            XCTAssertEqual(origin.requests(cold).map(\.method), ["HEAD"])
        }
    }

    func testProtocolPolicyFollowsCacheControl() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=max-age%3D100")]
            let first = fetch(request)
            XCTAssertEqual(first.outcome, "miss")
            XCTAssertEqual(first.cache["ttl"] as? Int, 100)
            clock.advance(by: 99)
            XCTAssertEqual(fetch(request).outcome, "hit")
            clock.advance(by: 2)
            XCTAssertEqual(fetch(request).outcome, "miss")

            // No freshness information: stored (for cache-else-load and offline use) but never fresh.
            let plain = uniquePath("plain")
            XCTAssertEqual(fetch(["url": url(plain)]).outcome, "miss")
            XCTAssertEqual(fetch(["url": url(plain)]).outcome, "miss")
            XCTAssertEqual(origin.count(plain), 2)

            // s-maxage wins over max-age for a shared cache.
            let shared = uniquePath("shared")
            XCTAssertEqual(fetch(["url": url(shared, "cc=max-age%3D10,s-maxage%3D500")]).cache["ttl"] as? Int, 500)
        }
    }

    func testUpstreamNoStoreIsNeverStoredEvenWithTTL() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "cc=no-store"), "cache": ["ttl": 300]]
            let first = fetch(request)
            XCTAssertEqual(first.outcome, "miss")
            XCTAssertEqual(first.cache["stored"] as? Bool, false)
            XCTAssertEqual(first.cache["notStoredBecause"] as? String, "response_no_store")
            XCTAssertEqual(fetch(request).outcome, "miss")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testPrivateResponsesAreStoredOnlyInsideAPartition() throws {
        try onEachStore {
            let path = uniquePath()
            let shared = fetch(["url": url(path, "cc=private,max-age%3D60")])
            XCTAssertEqual(shared.cache["notStoredBecause"] as? String, "response_private")
            let mine = fetch(["url": url(path, "cc=private,max-age%3D60"), "cache": ["sensitive": "user-7"]])
            XCTAssertEqual(mine.cache["stored"] as? Bool, true)
            XCTAssertEqual(fetch(["url": url(path, "cc=private,max-age%3D60"), "cache": ["sensitive": "user-7"]]).outcome, "hit")
        }
    }

    func testOnly2xxIsStored() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "status=404"), "cache": ["ttl": 300]]
            let first = fetch(request)
            XCTAssertEqual(first.status, 200, "the envelope itself succeeds")
            XCTAssertEqual(first.json["status"] as? Int, 404)
            XCTAssertEqual(first.cache["notStoredBecause"] as? String, "status_not_cacheable")
            XCTAssertEqual(fetch(request).outcome, "miss")
            XCTAssertEqual(origin.count(path), 2)
        }
    }

    func testIgnoreQueryAndParameterOrderShareAnEntry() throws {
        try onEachStore {
            let path = uniquePath()
            let first = fetch(["url": url(path, "b=2&a=1&ts=100"), "cache": ["ttl": 300, "ignoreQuery": ["ts"]]])
            XCTAssertEqual(first.outcome, "miss")
            let second = fetch([
                "url": ScriptedOrigin.base.uppercased().replacingOccurrences(of: "HTTP://", with: "http://") + path + "?a=1&ts=200",
                "query": ["b": "2"], "cache": ["ttl": 300, "ignoreQuery": ["ts"]]
            ])
            XCTAssertEqual(second.outcome, "hit")
            XCTAssertEqual(second.cache["key"] as? String, first.cache["key"] as? String)
            // Without ignoreQuery the timestamp is part of the key.
            XCTAssertEqual(fetch(["url": url(path, "b=2&a=1&ts=300"), "cache": ["ttl": 300]]).outcome, "miss")
            XCTAssertEqual(origin.count(path), 2)
            // `query` is merged into what is sent upstream.
            let sent = fetch(["url": url(path, "a=1"), "query": ["extra": "x y"], "cache": ["policy": "no-store"]])
            XCTAssertEqual((sent.upstreamBody["query"] as? [String: String])?["extra"], "x y")
        }
    }

    func testNamespacesSeparateEntries() throws {
        try onEachStore {
            let path = uniquePath()
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 60, "namespace": "a"]]).outcome, "miss")
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 60, "namespace": "b"]]).outcome, "miss")
            XCTAssertEqual(fetch(["url": url(path), "cache": ["ttl": 60, "namespace": "a"]]).outcome, "hit")
        }
    }

    func testBodiesAreCarriedAsJSONTextOrBase64() throws {
        try onEachStore {
            let json = fetch(["url": url(uniquePath("json")), "cache": ["ttl": 60]])
            XCTAssertNotNil(json.json["body"] as? [String: Any])
            let text = fetch(["url": url(uniquePath("text"), "size=5"), "cache": ["ttl": 60]])
            XCTAssertEqual(text.json["bodyText"] as? String, "aaaaa")
            let binaryPath = uniquePath("binary")
            let binary = fetch(["url": url(binaryPath, "binary=1"), "cache": ["ttl": 60]])
            XCTAssertEqual(binary.json["bodyBase64"] as? String, Data([0xFF, 0x00, 0xFE, 0x01, 0x80]).base64EncodedString())
            let binaryHit = fetch(["url": url(binaryPath, "binary=1"), "cache": ["ttl": 60]])
            XCTAssertEqual(binaryHit.outcome, "hit")
            XCTAssertEqual(binaryHit.json["bodyBase64"] as? String, binary.json["bodyBase64"] as? String)
            // Declared JSON that does not parse is carried as text, never spliced in raw.
            let broken = fetch(["url": url(uniquePath("broken"), "size=3&ct=application/json"), "cache": ["ttl": 60]])
            XCTAssertEqual(broken.json["bodyText"] as? String, "aaa")
        }
    }

    func testBase64RequestBodyIsSentAsIs() throws {
        try onEachStore {
            let path = uniquePath()
            let response = fetch([
                "url": url(path), "method": "POST", "bodyBase64": Data("raw=1&b=2".utf8).base64EncodedString(),
                "headers": ["Content-Type": "application/x-www-form-urlencoded"]
            ])
            XCTAssertEqual(response.upstreamBody["body"] as? String, "raw=1&b=2")
            XCTAssertEqual(origin.requests(path).first?.headers["content-type"], "application/x-www-form-urlencoded")
        }
    }

    func testCallerHeadersAreForwarded() throws {
        try onEachStore {
            let path = uniquePath()
            _ = fetch(["url": url(path), "headers": ["X-Trace": "abc", "Accept": "application/json"]])
            let received = try XCTUnwrap(origin.requests(path).first)
            XCTAssertEqual(received.headers["x-trace"], "abc")
            XCTAssertEqual(received.headers["accept"], "application/json")
        }
    }

    func testSetCookieIsPassedOnAMissButNeverStored() throws {
        try onEachStore {
            let path = uniquePath()
            let request: [String: Any] = ["url": url(path, "h=Set-Cookie:session%3Dsecret-cookie-value"), "cache": ["ttl": 60]]
            let miss = fetch(request)
            XCTAssertEqual((miss.json["headers"] as? [String: String])?["set-cookie"], "session=secret-cookie-value")
            let hit = fetch(request)
            XCTAssertEqual(hit.outcome, "hit")
            XCTAssertNil((hit.json["headers"] as? [String: String])?["set-cookie"])
        }
    }
}
