// Why a request went upstream (RFC 9211 §2.2 `fwd`), the upstream's status and the key: in the
// proxy's Cache-Status and in the /fetch envelope's `cache` object.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class CacheStatusTests: IntegrationTestCase {
    private func startProxy(_ configure: (inout LarderConfiguration) -> Void = { _ in }) throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base)]
            configure(&configuration)
        }
    }

    func testTheProxySaysWhyItWentUpstream() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        func status(_ target: String, _ headers: [String: String] = [:]) throws -> String? {
            try client.request("GET", "/proxy/origin\(path)\(target)", headers: headers).headers["cache-status"]
        }
        XCTAssertEqual(try status("/a?cc=max-age%3D60"), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=60")
        // A fresh entry the request will not take (§5.2.1.4 no-cache).
        XCTAssertEqual(
            try status("/a?cc=max-age%3D60", ["Cache-Control": "no-cache"]), "larder; fwd=request; fwd-status=200; stored; ttl=60")
        // Stale, revalidated with its validator.
        XCTAssertEqual(try status("/b?cc=max-age%3D1&etag=%22v1%22"), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=1")
        clock.advance(by: 2)
        XCTAssertEqual(try status("/b?cc=max-age%3D1&etag=%22v1%22"), "larder; fwd=stale; fwd-status=304; stored; ttl=1")
        // Stale without one: fetched again.
        XCTAssertEqual(try status("/c?cc=max-age%3D1"), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=1")
        clock.advance(by: 2)
        XCTAssertEqual(try status("/c?cc=max-age%3D1"), "larder; fwd=stale; fwd-status=200; stored; ttl=1")
        // Stored for another language (§4.1).
        let varying = "/d?cc=max-age%3D60&h=Vary:Accept-Language"
        XCTAssertEqual(try status(varying, ["Accept-Language": "en"]), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=60")
        XCTAssertEqual(try status(varying, ["Accept-Language": "fr"]), "larder; fwd=vary-miss; fwd-status=200; stored; ttl=60")
        XCTAssertEqual(try status(varying, ["Accept-Language": "fr"]), "larder; hit; ttl=60")
        // The upstream's status, not the answer's: a 304 to the client from a 200 upstream.
        let conditional = try client.request(
            "GET", "/proxy/origin\(path)/e?cc=max-age%3D60&etag=%22v2%22", headers: ["If-None-Match": "\"v2\""])
        XCTAssertEqual(conditional.status, 304)
        XCTAssertEqual(conditional.headers["cache-status"], "larder; fwd=uri-miss; fwd-status=200; stored; ttl=60")
    }

    func testTheKeyIsNamedWhenTheOperatorAsks() throws {
        let plain = try startProxy()
        XCTAssertFalse(try plain.connection().request("GET", "/proxy/origin/k?cc=max-age%3D60").headers["cache-status"]!.contains("key="))
        let larder = try startProxy { $0.cacheStatusKey = true }
        let client = try larder.connection()
        let path = uniquePath()
        let miss = try XCTUnwrap(try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"])
        let hit = try XCTUnwrap(try client.request("GET", "/proxy/origin\(path)?cc=max-age%3D60").headers["cache-status"])
        let key = try XCTUnwrap(hit.split(separator: "; ").first { $0.hasPrefix("key=") })
        XCTAssertTrue(hit.hasPrefix("larder; hit; ttl=60; key=\""), hit)
        XCTAssertTrue(miss.hasSuffix("; \(key)"), miss)
        XCTAssertEqual(key.count, 64 + 6)
        XCTAssertTrue(key.dropFirst(5).dropLast().allSatisfy(\.isHexDigit))
        XCTAssertNotEqual(
            try client.request("GET", "/proxy/origin\(path)/other?cc=max-age%3D60").headers["cache-status"]?.hasSuffix("; \(key)"), true)
    }

    func testTheEnvelopeSaysTheSame() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D1&etag=%22v1%22")]
        let miss = try client.fetch(request)
        XCTAssertEqual(miss.cache["forward"] as? String, "uri-miss")
        XCTAssertEqual(miss.cache["upstreamStatus"] as? Int, 200)
        let hit = try client.fetch(request)
        XCTAssertNil(hit.cache["forward"])
        XCTAssertNil(hit.cache["upstreamStatus"])
        clock.advance(by: 2)
        let revalidated = try client.fetch(request)
        XCTAssertEqual(revalidated.outcome, "revalidated")
        XCTAssertEqual(revalidated.cache["forward"] as? String, "stale")
        XCTAssertEqual(revalidated.cache["upstreamStatus"] as? Int, 304)
        XCTAssertEqual(revalidated.json["status"] as? Int, 200)

        let versioned: [String: Any] = ["url": url(path + "/v", "cc=max-age%3D60"), "cache": ["version": 1]]
        _ = try client.fetch(versioned)
        let other = try client.fetch(["url": url(path + "/v", "cc=max-age%3D60"), "cache": ["version": 2]])
        XCTAssertEqual(other.cache["forward"] as? String, "miss", "stored under another version")
        let reload = try client.fetch(["url": url(path + "/v", "cc=max-age%3D60"), "cache": ["version": 2, "policy": "reload"]])
        XCTAssertEqual(reload.cache["forward"] as? String, "request")
        let bypass = try client.fetch(["url": url(path + "/n", "status=404"), "cache": ["policy": "no-store"]])
        XCTAssertEqual(bypass.cache["forward"] as? String, "bypass")
        XCTAssertEqual(bypass.cache["upstreamStatus"] as? Int, 404)
        let put = try client.fetch(["url": url(path + "/p"), "method": "PUT", "body": "x"])
        XCTAssertEqual(put.cache["forward"] as? String, "method")
    }
}
