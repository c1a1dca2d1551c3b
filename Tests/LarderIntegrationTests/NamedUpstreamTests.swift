// Named upstreams: --upstream / the config file, and /fetch with "upstream" and "path".

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class NamedUpstreamTests: IntegrationTestCase {
    private func startWithUpstream() throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [
                NamedUpstream(
                    name: "origin", baseURL: origin.base + "/api", cdnURL: origin.base + "/cdn",
                    headers: [HeaderField("X-Api-Key", "k-1")], query: ["v": "2"],
                    cache: CacheDefaults(ttl: 60, namespace: "origin"))
            ]
        }
    }

    func testUpstreamDefaultsApplyToEveryRequest() throws {
        let larder = try startWithUpstream()
        let client = try larder.connection()
        let first = try client.fetch(["upstream": "origin", "path": "/cities?page=1"])
        XCTAssertEqual(first.status, 200, first.text)
        XCTAssertEqual(first.outcome, "miss")
        XCTAssertEqual(first.cache["ttl"] as? Int, 60, "the upstream's default ttl")
        let received = try XCTUnwrap(origin.requests("/api/cities").first)
        XCTAssertEqual(received.headers["x-api-key"], "k-1")
        XCTAssertEqual(received.target, "/api/cities?page=1&v=2")
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/cities?page=1"]).outcome, "hit")
        XCTAssertEqual(origin.count("/api/cities"), 1)
    }

    func testRequestValuesWinOverUpstreamDefaults() throws {
        let larder = try startWithUpstream()
        let client = try larder.connection()
        let response = try client.fetch([
            "upstream": "origin", "path": "/x", "query": ["v": "3"], "headers": ["X-Api-Key": "mine"],
            "cache": ["ttl": 5]
        ])
        XCTAssertEqual(response.cache["ttl"] as? Int, 5)
        let received = try XCTUnwrap(origin.requests("/api/x").first)
        XCTAssertEqual(received.headers["x-api-key"], "mine")
        XCTAssertEqual(received.target, "/api/x?v=3")
    }

    func testCDNURLIsUsedOnRequest() throws {
        let larder = try startWithUpstream()
        let client = try larder.connection()
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/img", "cdn": true]).status, 200)
        XCTAssertEqual(origin.count("/cdn/img"), 1)
        XCTAssertEqual(origin.count("/api/img"), 0)
    }

    func testUnknownOrConflictingUpstreamFields() throws {
        let larder = try startWithUpstream()
        let client = try larder.connection()
        let unknown = try client.fetch(["upstream": "nope", "path": "/x"])
        XCTAssertEqual(unknown.status, 404)
        XCTAssertEqual(unknown.errorCode, "unknown_upstream")
        XCTAssertEqual(try client.fetch(["upstream": "origin", "url": url("/x")]).errorField, "upstream")
        XCTAssertEqual(try client.fetch(["url": url("/x"), "path": "/y"]).errorField, "path")
    }

    func testPathsCannotClimbOutOfTheBasePath() throws {
        let larder = try startWithUpstream()
        let client = try larder.connection()
        let escape = try client.fetch(["upstream": "origin", "path": "/../secret"])
        XCTAssertEqual(escape.status, 400)
        XCTAssertEqual(escape.errorField, "path")
        XCTAssertEqual(try client.fetch(["upstream": "origin", "path": "/a/../b"]).status, 200, "inside the base path is fine")
        let proxied = try client.request("GET", "/proxy/origin/x/../../secret")
        XCTAssertEqual(proxied.status, 400)
        XCTAssertEqual(origin.count("/secret"), 0)
    }

    func testUpstreamWithoutCDNRefusesCDNRequests() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "plain", baseURL: self.origin.base)] }
        let response = try larder.connection().fetch(["upstream": "plain", "path": "/x", "cdn": true])
        XCTAssertEqual(response.status, 400)
        XCTAssertEqual(response.errorField, "cdn")
    }
}
