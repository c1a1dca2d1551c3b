// Soft purges: entries marked stale rather than removed, revalidated on their next request,
// their stale windows still answering an origin that fails; through the admin API, the CLI and
// the metrics. (Redis: SharedStoreTests.)

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class SoftPurgeTests: IntegrationTestCase {
    func testAfterASoftPurgeOfATagEveryEntryIsRevalidatedAndNoBodyIsSentAgain() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)] }
        let client = try larder.connection()
        let path = uniquePath()
        let targets = (0..<20).map { "/proxy/origin\(path)/\($0)?cc=max-age%3D600&etag=%22v\($0)%22&h=Surrogate-Key:soft-group" }
        for target in targets { XCTAssertEqual(try client.request("GET", target).status, 200) }
        XCTAssertEqual(try client.request("GET", targets[0]).headers["cache-status"], "larder; hit; ttl=600")

        let purge = try client.request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/json"],
            body: Array(#"{"tags": ["soft-group"], "soft": true}"#.utf8))
        XCTAssertEqual(purge.status, 200, purge.text)
        XCTAssertEqual(purge.json["invalidated"] as? Int, 20)
        XCTAssertEqual(purge.json["removed"] as? Int, 0)

        for (index, target) in targets.enumerated() {
            let response = try client.request("GET", target)
            XCTAssertEqual(response.status, 200)
            XCTAssertEqual(response.headers["cache-status"], "larder; fwd=stale; fwd-status=304; stored; ttl=600")
            let sent = origin.requests("\(path)/\(index)")
            XCTAssertEqual(sent.count, 2)
            XCTAssertEqual(sent.last?.headers["if-none-match"], "\"v\(index)\"", "revalidated with its validator")
        }
        // Revalidated, each is fresh again.
        XCTAssertEqual(try client.request("GET", targets[3]).headers["cache-status"], "larder; hit; ttl=600")
        XCTAssertEqual(origin.count("\(path)/3"), 2)
        let metrics = try client.request("GET", "/metrics").text
        XCTAssertTrue(metrics.contains(#"larder_cache_purged_total{mode="soft"} 20"#), metrics)
    }

    func testASoftPurgedEntryStillAnswersAnOriginFailureWithinItsStaleWindow() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        // One key for both URLs (`status` is left out of it): the second stands for the origin failing.
        let healthy: [String: Any] = ["url": url(path, "cc=max-age%3D600,stale-if-error%3D60"), "cache": ["ignoreQuery": ["status"]]]
        let failing: [String: Any] = [
            "url": url(path, "cc=max-age%3D600,stale-if-error%3D60&status=503"), "cache": ["ignoreQuery": ["status"]]
        ]
        XCTAssertEqual(try client.fetch(healthy).outcome, "miss")
        XCTAssertEqual(try client.fetch(failing).outcome, "hit", "fresh: the origin is not asked")
        let purged = try client.request(
            "DELETE", "/cache?urlPrefix=\(url(path).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)&soft=true")
        XCTAssertEqual(purged.json["invalidated"] as? Int, 1, purged.text)
        let stale = try client.fetch(failing)
        XCTAssertEqual(stale.outcome, "stale", "stale-if-error counts from the purge")
        XCTAssertEqual(stale.cache["upstreamError"] as? String, "upstream_status_503")
        XCTAssertEqual(stale.upstreamBody["n"] as? Int, 1)
        clock.advance(by: 61)
        XCTAssertEqual(try client.fetch(failing).json["status"] as? Int, 503, "past the window: the origin's answer")
    }

    func testAnEntryWithoutValidatorsIsFetchedAnewAndAHardPurgeStillRemoves() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let request: [String: Any] = ["url": url(path, "cc=max-age%3D600"), "cache": ["namespace": "soft-ns"]]
        _ = try client.fetch(request)
        XCTAssertEqual(try client.request("DELETE", "/cache?namespace=soft-ns&soft=true").json["invalidated"] as? Int, 1)
        let again = try client.fetch(request)
        XCTAssertEqual(again.outcome, "miss")
        XCTAssertEqual(again.cache["forward"] as? String, "stale")
        XCTAssertEqual(again.upstreamBody["n"] as? Int, 2)
        XCTAssertEqual(try client.fetch(request).outcome, "hit")
        // A caller's ttl does not make a soft-purged entry fresh.
        let withTTL: [String: Any] = ["url": url(path + "/ttl"), "cache": ["ttl": 3600, "namespace": "soft-ns"]]
        _ = try client.fetch(withTTL)
        XCTAssertEqual(try client.request("DELETE", "/cache?all=true&soft=true").json["invalidated"] as? Int, 2)
        XCTAssertEqual(try client.fetch(withTTL).outcome, "miss")

        let hard = try client.request("DELETE", "/cache?namespace=soft-ns")
        XCTAssertEqual(hard.json["removed"] as? Int, 2)
        XCTAssertEqual(hard.json["invalidated"] as? Int, 0)
        XCTAssertEqual(try client.request("DELETE", "/cache?namespace=soft-ns&soft=maybe").status, 400)
        XCTAssertEqual(try client.request("DELETE", "/cache?soft=true").status, 400, "a filter is still needed")
        // Routes that cannot purge softly refuse to be asked to, rather than remove.
        let key = try XCTUnwrap(try client.fetch(request).cache["key"] as? String)
        let one = try client.request("DELETE", "/cache/entries/\(key)?soft=true")
        XCTAssertEqual(one.status, 400)
        XCTAssertEqual(one.errorField, "soft")
        XCTAssertEqual(try client.fetch(request).outcome, "hit", "not removed")
        let byBody = try client.request(
            "POST", "/cache/purge?soft=true", headers: ["Content-Type": "application/json"],
            body: Array(#"{"urls": ["http://a.example/"]}"#.utf8))
        XCTAssertEqual(byBody.errorField, "soft")
    }

    func testTheCLIPurgesSoftly() throws {
        let larder = try startLarder { $0.adminToken = "cli-token" }
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path, "cc=max-age%3D600&etag=%22a%22"), "cache": ["tags": ["cli-soft"]]])
        let auth = ["LARDER_ADMIN_TOKEN": "cli-token", "LARDER_SERVER": "http://127.0.0.1:\(larder.port)"]
        let soft = try runExecutable(["cache", "purge", "--tag", "cli-soft", "--soft"], environment: auth)
        XCTAssertEqual(soft.0, 0, soft.2)
        XCTAssertTrue(soft.1.hasPrefix("marked 1 entry stale"), soft.1)
        XCTAssertEqual(
            try client.fetch(["url": url(path, "cc=max-age%3D600&etag=%22a%22"), "cache": ["tags": ["cli-soft"]]]).outcome, "revalidated")
    }
}
