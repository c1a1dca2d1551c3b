// HTTP Cache Groups (RFC 9875): a response's `Cache-Groups` make it a member of groups of its
// origin; `Cache-Group-Invalidation` on the answer to an unsafe request marks the members of
// those groups of the same origin stale; the admin API purges by group.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class CacheGroupsTests: IntegrationTestCase {
    private func startProxy() throws -> RunningLarder {
        try startLarder { configuration in
            configuration.upstreams = [
                NamedUpstream(name: "origin", baseURL: origin.base),
                // The same server under another host name: another origin (RFC 6454).
                NamedUpstream(name: "other", baseURL: "http://localhost:\(origin.port)")
            ]
        }
    }

    func testAnUnsafeRequestsAnswerInvalidatesItsOriginsGroups() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        func get(_ upstream: String, _ name: String, groups: String) throws -> String? {
            try client.request("GET", "/proxy/\(upstream)\(path)/\(name)?cc=max-age%3D600&etag=%22\(name)%22&h=Cache-Groups:\(groups)")
                .headers["cache-status"]
        }
        let products = "%22products%22,%20%22x%22"
        XCTAssertEqual(try get("origin", "a", groups: products), "larder; fwd=uri-miss; fwd-status=200; stored; ttl=600")
        _ = try get("origin", "b", groups: "%22products%22")
        _ = try get("origin", "c", groups: "%22other%22")
        _ = try get("other", "d", groups: "%22products%22")
        XCTAssertEqual(try get("origin", "a", groups: products), "larder; hit; ttl=600")

        // Ignored on a safe method and on an error.
        _ = try client.request("GET", "/proxy/origin\(path)/read?h=Cache-Group-Invalidation:%22products%22")
        _ = try client.request("POST", "/proxy/origin\(path)/fails?unsafe=500&h=Cache-Group-Invalidation:%22products%22", body: [1])
        XCTAssertEqual(try get("origin", "a", groups: products), "larder; hit; ttl=600")

        let post = try client.request(
            "POST", "/proxy/origin\(path)/items?h=Cache-Group-Invalidation:%22products%22", body: Array("new".utf8))
        XCTAssertEqual(post.status, 200)
        XCTAssertEqual(try get("origin", "a", groups: products), "larder; fwd=stale; fwd-status=304; stored; ttl=600")
        XCTAssertEqual(try get("origin", "b", groups: "%22products%22"), "larder; fwd=stale; fwd-status=304; stored; ttl=600")
        XCTAssertEqual(try get("origin", "c", groups: "%22other%22"), "larder; hit; ttl=600", "another group")
        XCTAssertEqual(try get("other", "d", groups: "%22products%22"), "larder; hit; ttl=600", "another origin's group (§2.1)")
        XCTAssertEqual(origin.requests("\(path)/a").last?.headers["if-none-match"], "\"a\"")

        // Through /fetch as well, and a malformed field lists no group.
        let fetched = try client.fetch(["url": url(path + "/e", "cc=max-age%3D600&h=Cache-Groups:%22feed%22")])
        XCTAssertEqual(fetched.cache["stored"] as? Bool, true)
        _ = try client.fetch(["url": url(path + "/w", "h=Cache-Group-Invalidation:feed"), "method": "PUT", "body": "x"])
        XCTAssertEqual(try client.fetch(["url": url(path + "/e", "cc=max-age%3D600&h=Cache-Groups:%22feed%22")]).outcome, "hit")
        _ = try client.fetch(["url": url(path + "/w", "h=Cache-Group-Invalidation:%22feed%22"), "method": "PUT", "body": "x"])
        let after = try client.fetch(["url": url(path + "/e", "cc=max-age%3D600&h=Cache-Groups:%22feed%22")])
        XCTAssertEqual(after.outcome, "miss", "no validator: fetched anew")
        XCTAssertEqual(after.cache["forward"] as? String, "stale")
    }

    func testTheAdminAPIPurgesByGroup() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        for name in ["a", "b"] {
            _ = try client.request("GET", "/proxy/origin\(path)/\(name)?cc=max-age%3D600&h=Cache-Groups:%22team%20one%22")
        }
        _ = try client.request("GET", "/proxy/other\(path)/c?cc=max-age%3D600&h=Cache-Groups:%22team%20one%22")
        let listed = try client.request("GET", "/cache/entries?tag=cg:\(origin.base)/team%2520one")
        XCTAssertEqual((listed.json["entries"] as? [Any])?.count, 2, listed.text)

        func purge(_ body: String) throws -> TestResponse {
            try client.request("POST", "/cache/purge", headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        }
        let purged = try purge(#"{"groups": [{"origin": "\#(origin.base)", "group": "team one"}]}"#)
        XCTAssertEqual(purged.json["removed"] as? Int, 2, purged.text)
        XCTAssertEqual(
            try client.request("GET", "/proxy/other\(path)/c?cc=max-age%3D600&h=Cache-Groups:%22team%20one%22").headers["cache-status"],
            "larder; hit; ttl=600")
        for (body, field) in [
            (#"{"groups": [{"origin": "\#(origin.base)/path", "group": "g"}]}"#, "groups[0].origin"),
            (#"{"groups": [{"origin": "ftp://x", "group": "g"}]}"#, "groups[0].origin"),
            (#"{"groups": [{"origin": "\#(origin.base)"}]}"#, "groups[0].group"),
            (#"{"groups": [{"origin": "\#(origin.base)", "group": "é"}]}"#, "groups[0].group"),
            (#"{"groups": [{"origin": "\#(origin.base)", "group": "g", "x": 1}]}"#, "groups[0].x"),
            (#"{"groups": []}"#, "groups")
        ] {
            let refused = try purge(body)
            XCTAssertEqual(refused.status, 400, body)
            XCTAssertEqual(refused.errorField, field, body)
        }
    }
}
