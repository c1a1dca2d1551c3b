// What a web page could make a browser send to a Larder without an admin token, through the real
// server: a cross-site form POST (text/plain, a foreign Origin), Fetch Metadata's cross-site
// requests, a DNS-rebinding page's Host, an opaque Origin. Refused on the routes that act on the
// cache or read it; clients that are not browsers (curl's form type, no Origin), same-origin
// calls, the probes and the proxy pass (BrowserRequestRules).

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class BrowserRequestTests: IntegrationTestCase {
    /// An entry stored through /fetch, and the origin path it came from.
    private func storedEntry(_ larder: RunningLarder) throws -> String {
        let path = uniquePath()
        let stored = try larder.connection().fetch(["url": url(path), "cache": ["ttl": 300]])
        XCTAssertEqual(stored.outcome, "miss", stored.text)
        return path
    }

    private func entryCount(_ larder: RunningLarder) throws -> Int? {
        (try larder.connection().request("GET", "/cache/stats").json["stored"] as? [String: Any])?["entries"] as? Int
    }

    func testACrossSiteFormPostCannotPurgeOrPlant() throws {
        let larder = try startLarder()
        let path = try storedEntry(larder)
        XCTAssertEqual(try entryCount(larder), 1)
        let planted = uniquePath("planted")
        let purge = Array(#"{"urls":["\#(url(path))"]}"#.utf8)
        let form: [String: String] = ["Content-Type": "text/plain", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"]
        let refused = try larder.connection().request("POST", "/cache/purge", headers: form, body: purge)
        XCTAssertEqual(refused.status, 403, refused.text)
        XCTAssertEqual(refused.errorCode, "cross_site_refused")
        // The Origin alone, as a browser without Fetch Metadata sends it.
        let originOnly = try larder.connection().request(
            "POST", "/cache/purge", headers: ["Content-Type": "text/plain", "Origin": "http://evil.example"], body: purge)
        XCTAssertEqual(originOnly.errorCode, "cross_site_refused", originOnly.text)
        let plant = try larder.connection().request(
            "POST", "/fetch", headers: form, body: Array(#"{"url":"\#(url(planted))"}"#.utf8))
        XCTAssertEqual(plant.errorCode, "cross_site_refused", plant.text)
        let sandboxed = try larder.connection().request("DELETE", "/cache?all=true", headers: ["Origin": "null"])
        XCTAssertEqual(sandboxed.errorCode, "cross_site_refused", "an opaque origin is no same origin")
        let sameSite = try larder.connection().request("GET", "/cache/entries", headers: ["Sec-Fetch-Site": "same-site"])
        XCTAssertEqual(sameSite.errorCode, "cross_site_refused", "a sibling site's page is another site's")
        XCTAssertEqual(try entryCount(larder), 1, "nothing purged, nothing planted")
        XCTAssertEqual(origin.count(path), 1)
        XCTAssertEqual(origin.count(planted), 0, "the page's /fetch never reached the origin")
        let curl = try larder.connection().request(
            "POST", "/cache/purge", headers: ["Content-Type": "application/x-www-form-urlencoded"], body: purge)
        XCTAssertEqual(curl.json["removed"] as? Int, 1, "the same purge from curl: \(curl.text)")
    }

    func testARebindingPagesHostIsRefusedAndTheServersOwnNamesPass() throws {
        let larder = try startLarder { $0.serverNames = ["larder.internal", "*.cache.example"] }
        let path = try storedEntry(larder)
        let port = larder.port
        for target in ["/cache/entries", "/cache/stats", "/metrics"] {
            let rebound = try larder.connection().request("GET", target, host: "rebind.evil.example:\(port)")
            XCTAssertEqual(rebound.status, 421, "\(target): \(rebound.text)")
            XCTAssertEqual(rebound.errorCode, "host_not_allowed")
        }
        let fetch = try larder.connection().request(
            "POST", "/fetch", headers: ["Content-Type": "application/json"],
            body: Array(#"{"url":"\#(url(path))","cache":{"ttl":300}}"#.utf8), host: "rebind.evil.example")
        XCTAssertEqual(fetch.errorCode, "host_not_allowed", "a rebinding page reads no stored body")
        XCTAssertEqual(
            try larder.connection().request("GET", "/cache/stats", host: "192.168.1.9").errorCode, "host_not_allowed",
            "bound to loopback, only loopback literals")
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "[::1]:\(port)", "LARDER.internal", "a.cache.example:\(port)"] {
            let accepted = try larder.connection().request("GET", "/cache/stats", host: host)
            XCTAssertEqual(accepted.status, 200, "\(host): \(accepted.text)")
        }
        XCTAssertEqual(try larder.connection().request("GET", "/cache/stats", host: "cache.example").errorCode, "host_not_allowed")
        for host in ["².0.0.1", "１２７.0.0.1", "2130706433", "localhost:+80"] {
            XCTAssertEqual(try larder.connection().request("GET", "/metrics", host: host).errorCode, "host_not_allowed", host)
        }
        let twice = try larder.connection().request("GET", "/cache/stats", rawHeaderLines: Array("Host: localhost\r\n".utf8))
        XCTAssertEqual(twice.errorCode, "host_not_allowed", "two Host fields: \(twice.text)")
        XCTAssertEqual(try larder.connection().request("GET", "/healthz", host: "rebind.evil.example").status, 200, "a probe holds no data")
        XCTAssertEqual(origin.count(path), 1)
    }

    func testABrowsersBodyMustBeJSONWhileCurlsFormTypePasses() throws {
        let larder = try startLarder()
        let port = larder.port
        let path = uniquePath()
        let body = Array(#"{"url":"\#(url(path))","cache":{"ttl":60}}"#.utf8)
        let sameOrigin = ["Origin": "http://127.0.0.1:\(port)", "Sec-Fetch-Site": "same-origin"]
        let plain = try larder.connection().request(
            "POST", "/fetch", headers: sameOrigin.merging(["Content-Type": "text/plain"]) { $1 }, body: body, host: "127.0.0.1:\(port)")
        XCTAssertEqual(plain.status, 415, plain.text)
        XCTAssertEqual(plain.errorCode, "unsupported_media_type")
        XCTAssertEqual(origin.count(path), 0)
        let json = try larder.connection().request(
            "POST", "/fetch", headers: sameOrigin.merging(["Content-Type": "application/json; charset=utf-8"]) { $1 }, body: body,
            host: "127.0.0.1:\(port)")
        XCTAssertEqual(json.outcome, "miss", "a same-origin JSON call: \(json.text)")
        let curl = try larder.connection().request(
            "POST", "/fetch", headers: ["Content-Type": "application/x-www-form-urlencoded"], body: body)
        XCTAssertEqual(curl.outcome, "hit", "curl -d: a form type and no Origin: \(curl.text)")
        XCTAssertEqual(origin.count(path), 1)
    }

    /// The proxy serves pages of other sites (they are its callers), but not to a rebinding
    /// page's Host: that would read a named upstream from a browser.
    func testTheProxyServesBrowsersOfOtherSitesUnderItsOwnName() throws {
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "origin", baseURL: origin.base)] }
        let path = uniquePath()
        let response = try larder.connection().request(
            "GET", "/proxy/origin\(path)", headers: ["Origin": "https://shop.example", "Sec-Fetch-Site": "cross-site"],
            host: "127.0.0.1:\(larder.port)")
        XCTAssertEqual(response.status, 200, response.text)
        let rebound = try larder.connection().request("GET", "/proxy/origin\(path)", host: "rebind.evil.example")
        XCTAssertEqual(rebound.errorCode, "host_not_allowed", rebound.text)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testAdminRoutesWithoutATokenAreNamedInAWarning() throws {
        let lines = LogLines()
        _ = try startLarder(logLines: lines)
        XCTAssertTrue(
            lines.all.contains { $0.contains("the /cache admin routes have no token") }, "warned on loopback too: \(lines.all)")
        let tokened = LogLines()
        _ = try startLarder(logLines: tokened) { $0.adminToken = "a-token-of-the-test" }
        XCTAssertFalse(tokened.all.contains { $0.contains("admin routes have no token") })
    }
}
