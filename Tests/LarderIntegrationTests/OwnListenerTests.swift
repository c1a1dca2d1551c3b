// Regression tests for the second security review (issue 32, item 1): no upstream request may
// reach one of Larder's own listeners, whatever --deny-private says. Each attack goes through
// the real server; the proof is what the admin API did (nothing): the stored entry is still a
// hit, no entry was planted, no namespace was bumped, no warm job was started.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class OwnListenerTests: IntegrationTestCase {
    /// Stores one entry through /fetch (one origin request) and returns its spec.
    private func storeVictim(_ client: TestConnection, _ path: String) throws -> [String: Any] {
        let spec: [String: Any] = ["url": url(path), "cache": ["ttl": 600]]
        XCTAssertEqual(try client.fetch(spec).outcome, "miss")
        XCTAssertEqual(try client.fetch(spec).outcome, "hit")
        return spec
    }

    private func assertRefusedAsOwnListener(
        _ response: TestResponse, _ name: String, listener: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(response.status, 403, "\(name): \(response.text)", file: file, line: line)
        XCTAssertEqual(response.errorCode, "upstream_forbidden", name, file: file, line: line)
        XCTAssertTrue(response.text.contains("own \(listener) listener"), "\(name): \(response.text)", file: file, line: line)
    }

    private func query(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
    }

    func testFetchCannotDriveTheAdminListenerByAddressNameOrRedirect() throws {
        let adminPort = Self.freeLoopbackPort()
        let larder = try startLarder { configuration in
            configuration.adminPort = adminPort
            // A name for the admin listener, as an operator's or an attacker's DNS might give.
            configuration.resolve = ["admin.test:\(adminPort):127.0.0.1"]
        }
        XCTAssertEqual(larder.adminPort, adminPort)
        let client = try larder.connection()
        let victim = try storeVictim(client, uniquePath())
        let admin = "127.0.0.1:\(adminPort)"
        let plant = #"{"request":{"url":"http://o.test/x","cache":{"sensitive":"alice"}},"response":{"status":200,"body":"planted"}}"#
        let attacks: [(String, [String: Any])] = [
            ("purge by IP", ["url": "http://\(admin)/cache?all=true", "method": "DELETE"]),
            ("purge by name", ["url": "http://admin.test:\(adminPort)/cache?all=true", "method": "DELETE"]),
            (
                "purge by redirect",
                [
                    "url": url(uniquePath(), "status=307&location=" + query("http://\(admin)/cache?all=true")),
                    "method": "DELETE"
                ]
            ),
            (
                "purge by a 302 to a name",
                [
                    "url": url(uniquePath(), "status=302&location=" + query("http://admin.test:\(adminPort)/cache/purge")),
                    "method": "POST", "body": #"{"all":true}"#
                ]
            ),
            (
                "purge through POST /cache/purge",
                [
                    "url": "http://\(admin)/cache/purge", "method": "POST", "body": #"{"all":true}"#,
                    "headers": ["Content-Type": "application/json"]
                ]
            ),
            (
                "plant an entry",
                [
                    "url": "http://\(admin)/cache/entries", "method": "PUT", "body": plant,
                    "headers": ["Content-Type": "application/json"]
                ]
            ),
            (
                "start a warm job",
                [
                    "url": "http://\(admin)/cache/warm", "method": "POST",
                    "body": #"{"requests":[{"url":"http://o.test/w"}]}"#, "headers": ["Content-Type": "application/json"]
                ]
            ),
            (
                "bump a namespace by 0.0.0.0",
                [
                    "url": "http://0.0.0.0:\(adminPort)/cache/namespaces/pages/version", "method": "POST",
                    "body": #"{"bump":true}"#, "headers": ["Content-Type": "application/json"]
                ]
            ),
            ("metrics by localhost", ["url": "http://localhost:\(adminPort)/metrics"]),
            ("an IPv4-mapped IPv6 address", ["url": "http://[::ffff:127.0.0.1]:\(adminPort)/cache?all=true", "method": "DELETE"])
        ]
        for (name, spec) in attacks {
            assertRefusedAsOwnListener(try client.fetch(spec), name, listener: "admin")
        }

        XCTAssertEqual(try client.fetch(victim).outcome, "hit", "nothing was purged")
        let adminClient = try TestConnection(port: adminPort)
        let entries = try adminClient.request("GET", "/cache/entries").json
        XCTAssertEqual((entries["entries"] as? [[String: Any]])?.count, 1, "no entry was planted: \(entries)")
        let namespaces = try adminClient.request("GET", "/cache/namespaces").text
        XCTAssertFalse(namespaces.contains("pages"), namespaces)
        let jobs = try adminClient.request("GET", "/cache/warm").json["jobs"] as? [[String: Any]]
        XCTAssertEqual(jobs?.count, 0, "no warm job was started")
        // The rule is about Larder's own listeners only: the origin (another loopback port) is reached.
        XCTAssertEqual(try client.fetch(["url": url(uniquePath())]).status, 200)
    }

    func testFetchCannotReachTheMainOrProxyListener() throws {
        let proxyPort = Self.freeLoopbackPort()
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "o", baseURL: origin.base)]
            configuration.proxyRoot = "o"
            configuration.proxyPort = proxyPort
        }
        let client = try larder.connection()
        let victim = try storeVictim(client, uniquePath())
        let attacks: [(String, String, [String: Any])] = [
            ("purge on the main listener", "main", ["url": "http://127.0.0.1:\(larder.port)/cache?all=true", "method": "DELETE"]),
            (
                "a /fetch of itself", "main",
                [
                    "url": "http://127.0.0.1:\(larder.port)/fetch", "method": "POST",
                    "body": #"{"url":"http://127.0.0.1:1/"}"#
                ]
            ),
            ("the proxy listener", "proxy", ["url": "http://127.0.0.1:\(proxyPort)/anything"]),
            (
                "the proxy listener by redirect", "proxy",
                ["url": url(uniquePath(), "status=302&location=" + query("http://127.0.0.1:\(proxyPort)/x"))]
            )
        ]
        for (name, listener, spec) in attacks {
            assertRefusedAsOwnListener(try client.fetch(spec), name, listener: listener)
        }
        XCTAssertEqual(try client.fetch(victim).outcome, "hit", "nothing was purged")
        // /batch runs its items through the same upstream rules.
        let batch = try client.request(
            "POST", "/batch", headers: ["Content-Type": "application/json"],
            body: Array(
                #"{"mode":"settle","requests":[{"url":"http://127.0.0.1:\#(larder.port)/cache?all=true","method":"DELETE"}]}"#.utf8))
        XCTAssertTrue(batch.text.contains("upstream_forbidden"), batch.text)
        XCTAssertEqual(try client.fetch(victim).outcome, "hit", "nothing was purged through /batch")
    }

    func testAListenerOnEveryAddressIsRefusedOnEveryLocalAddress() throws {
        let larder = try startLarder { $0.host = "0.0.0.0" }
        let client = try larder.connection()
        let victim = try storeVictim(client, uniquePath())
        // 127.0.0.2 is not the address Larder named, but a wildcard listener accepts it.
        for host in ["127.0.0.1", "127.0.0.2", "0.0.0.0", "[::1]", "[::ffff:127.0.0.3]"] {
            let response = try client.fetch(["url": "http://\(host):\(larder.port)/cache?all=true", "method": "DELETE"])
            assertRefusedAsOwnListener(response, host, listener: "main")
        }
        XCTAssertEqual(try client.fetch(victim).outcome, "hit", "nothing was purged")
    }

    func testARequestCarryingThisInstancesLoopTokenIsRefusedOnTheAdminRoutes() throws {
        let larder = try startLarder { $0.metricsToken = nil }
        let client = try larder.connection()
        let path = uniquePath()
        let victim = try storeVictim(client, path)
        // The token Larder adds to every upstream request (RFC 8586), as the origin saw it.
        let token = try XCTUnwrap(origin.requests(path).first?.headers["cdn-loop"])
        for (method, target) in [
            ("DELETE", "/cache?all=true"), ("POST", "/cache/purge"), ("GET", "/metrics"),
            ("GET", "/cache/stats"), ("POST", "/cache/warm")
        ] {
            let response = try larder.connection().request(
                method, target, headers: ["CDN-Loop": "other, \(token)"],
                body: method == "GET" || method == "DELETE" ? [] : Array(#"{"all":true}"#.utf8))
            XCTAssertEqual(response.status, 508, "\(method) \(target): \(response.text)")
            XCTAssertEqual(response.errorCode, "loop_detected", "\(method) \(target)")
        }
        XCTAssertEqual(try client.fetch(victim).outcome, "hit", "nothing was purged")
        XCTAssertEqual(
            try client.request("GET", "/cache/stats", headers: ["CDN-Loop": "someone-else"]).status, 200,
            "another instance's token is no loop")
    }
}
