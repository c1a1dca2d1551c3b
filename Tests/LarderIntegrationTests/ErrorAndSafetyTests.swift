// Every error code of /fetch, and the upstream access policy.

import Foundation
import LarderCore
import LarderServiceTesting
import XCTest

final class ErrorAndSafetyTests: IntegrationTestCase {
    private func assertError(
        _ response: TestResponse, status: Int, code: String, field: String? = nil,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertEqual(response.status, status, response.text, file: file, line: line)
        XCTAssertEqual(response.errorCode, code, response.text, file: file, line: line)
        XCTAssertEqual(response.headers["content-type"], "application/json", file: file, line: line)
        XCTAssertNotNil((response.json["error"] as? [String: Any])?["message"] as? String, file: file, line: line)
        if let field { XCTAssertEqual(response.errorField, field, response.text, file: file, line: line) }
    }

    func testInvalidRequestsAreRejectedNamingTheField() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        assertError(try client.fetchRaw("{not json"), status: 400, code: "invalid_request", field: "body")
        assertError(try client.fetchRaw(""), status: 400, code: "invalid_request", field: "body")
        assertError(try client.fetchRaw("[1,2]"), status: 400, code: "invalid_request")
        assertError(try client.fetch([:]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": 5]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": "/relative/path"]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": "file:///etc/passwd"]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": "gopher://example.test/"]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": "http://user:pw@example.test/"]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": "http://example.test:70000/"]), status: 400, code: "invalid_request", field: "url")
        assertError(try client.fetch(["url": url("/x"), "method": "BREW"]), status: 400, code: "invalid_request", field: "method")
        assertError(
            try client.fetch(["url": url("/x"), "cache": ["policy": "sometimes"]]), status: 400, code: "invalid_request",
            field: "cache.policy")
        assertError(try client.fetch(["url": url("/x"), "cache": ["ttl": -1]]), status: 400, code: "invalid_request", field: "cache.ttl")
        assertError(
            try client.fetch(["url": url("/x"), "cache": ["ttl": "soon"]]), status: 400, code: "invalid_request", field: "cache.ttl")
        assertError(
            try client.fetch(["url": url("/x"), "cache": ["version": 1.5]]), status: 400, code: "invalid_request", field: "cache.version")
        assertError(
            try client.fetch(["url": url("/x"), "cache": ["namespace": ""]]), status: 400, code: "invalid_request", field: "cache.namespace"
        )
        assertError(try client.fetch(["url": url("/x"), "timeoutMs": 0]), status: 400, code: "invalid_request", field: "timeoutMs")
        assertError(try client.fetch(["url": url("/x"), "headers": ["X-A": 1]]), status: 400, code: "invalid_request", field: "headers.X-A")
        assertError(
            try client.fetch(["url": url("/x"), "headers": ["Bad Name": "v"]]), status: 400, code: "invalid_request", field: "headers")
        assertError(try client.fetch(["url": url("/x"), "headers": ["X-A": "a\r\nInjected: yes"]]), status: 400, code: "invalid_request")
        assertError(
            try client.fetch(["url": url("/x"), "headers": ["Host": "internal"]]), status: 400, code: "invalid_request",
            field: "headers.Host")
        assertError(
            try client.fetch(["url": url("/x"), "body": [1], "bodyBase64": "AA=="]), status: 400, code: "invalid_request",
            field: "bodyBase64")
        assertError(
            try client.fetch(["url": url("/x"), "method": "POST", "bodyBase64": "***"]), status: 400, code: "invalid_request",
            field: "bodyBase64")
        assertError(
            try client.fetch(["url": url("/x"), "query": ["a": ["nested"]]]), status: 400, code: "invalid_request", field: "query.a")
        XCTAssertEqual(origin.count("/x"), 0)
        // The connection is still usable after all of that.
        XCTAssertEqual(try client.request("GET", "/healthz").status, 200)
    }

    func testRequestBodyOverOneMebibyteIsRejected() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let padding = String(repeating: "a", count: (1 << 20) + 10)
        let response = try client.fetchRaw(#"{"url":"\#(url("/big"))","headers":{"X-Pad":"\#(padding)"}}"#)
        assertError(response, status: 400, code: "invalid_request", field: "body")
        XCTAssertEqual(origin.count("/big"), 0)
    }

    func testLargeHeadersAreServedAndOversizedOnesRefusedCleanly() throws {
        let larder = try startLarder()
        XCTAssertEqual(
            try larder.connection().request("GET", "/healthz", headers: ["X-Big": String(repeating: "a", count: 12_000)]).status, 200)
        XCTAssertEqual(
            try larder.connection().request("GET", "/healthz", headers: ["X-Big": String(repeating: "a", count: 20_000)]).status, 431)
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200, "still serving")
    }

    func testRoutingErrors() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        assertError(try client.request("GET", "/nowhere"), status: 404, code: "not_found")
        let wrongMethod = try client.request("GET", "/fetch")
        assertError(wrongMethod, status: 405, code: "method_not_allowed")
        XCTAssertEqual(wrongMethod.headers["allow"], "POST")
        let health = try client.request("GET", "/healthz")
        XCTAssertEqual(health.status, 200)
        XCTAssertEqual(health.json["status"] as? String, "ok")
    }

    func testAnUnreadableUpstreamResponseIsNamed() throws {
        // An unknown transfer coding, and a body cut short: the upstream answered, unusably.
        let replies = [
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: abcdef\r\n\r\nhello",
            "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"
        ]
        for reply in replies {
            let raw = try RawOrigin(reply: Array(reply.utf8))
            let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "raw", baseURL: "http://127.0.0.1:\(raw.port)")] }
            let response = try larder.connection().request("GET", "/proxy/raw/x")
            assertError(response, status: 502, code: "upstream_error")
        }
    }

    func testUnreachableUpstream() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        // A port nothing listens on: bind one, learn its number, close it.
        let closedPort = try ephemeralClosedPort()
        assertError(try client.fetch(["url": "http://127.0.0.1:\(closedPort)/x"]), status: 502, code: "upstream_unreachable")
    }

    func testUpstreamTimeout() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let response = try client.fetch(["url": url(path, "delay=1000"), "timeoutMs": 100])
        assertError(response, status: 504, code: "upstream_timeout")
    }

    func testUpstreamBodyOverTheLimit() throws {
        let larder = try startLarder { $0.maxUpstreamBodyBytes = 4096 }
        let client = try larder.connection()
        assertError(try client.fetch(["url": url(uniquePath(), "size=10000")]), status: 502, code: "upstream_too_large")
        XCTAssertEqual(try client.fetch(["url": url(uniquePath("small"), "size=4000")]).status, 200)
    }

    func testLinkLocalAndMetadataAddressesAreAlwaysRefused() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        // Refused in the open-socket callback, before any packet is sent.
        assertError(try client.fetch(["url": "http://169.254.169.254/latest/meta-data/"]), status: 403, code: "upstream_forbidden")
        assertError(try client.fetch(["url": "http://[fe80::1]/"]), status: 403, code: "upstream_forbidden")
        assertError(try client.fetch(["url": "http://[::ffff:169.254.169.254]/"]), status: 403, code: "upstream_forbidden")
    }

    func testDenyPrivateRefusesLoopbackByAddressNotJustName() throws {
        let larder = try startLarder { $0.denyPrivate = true }
        let client = try larder.connection()
        let path = uniquePath()
        assertError(try client.fetch(["url": url(path)]), status: 403, code: "upstream_forbidden")
        assertError(try client.fetch(["url": "http://localhost:\(origin.port)\(path)"]), status: 403, code: "upstream_forbidden")
        XCTAssertEqual(origin.count(path), 0)
    }

    func testAllowHostPatterns() throws {
        let larder = try startLarder { $0.allowHosts = ["localhost", "*.example.test"] }
        let client = try larder.connection()
        let path = uniquePath()
        assertError(try client.fetch(["url": url(path)]), status: 403, code: "upstream_forbidden")
        XCTAssertEqual(try client.fetch(["url": "http://localhost:\(origin.port)\(path)"]).status, 200)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testEveryRedirectHopIsChecked() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let target = uniquePath("target")
        // A followed redirect.
        let followed = try client.fetch(["url": url(path, "status=302&location=\(target)"), "cache": ["ttl": 60]])
        XCTAssertEqual(followed.json["status"] as? Int, 200)
        XCTAssertEqual(followed.upstreamBody["path"] as? String, target)
        // Into the metadata service: refused at the hop.
        let metadata = "http%3A%2F%2F169.254.169.254%2Flatest"
        assertError(
            try client.fetch(["url": url(uniquePath("meta"), "status=302&location=\(metadata)")]), status: 403, code: "upstream_forbidden")
        // To another scheme: refused.
        assertError(
            try client.fetch(["url": url(uniquePath("scheme"), "status=301&location=file%3A%2F%2F%2Fetc%2Fpasswd")]),
            status: 403, code: "upstream_forbidden")
        // An endless loop stops after 5 hops.
        let loop = uniquePath("loop")
        assertError(
            try client.fetch(["url": url(loop, "status=307&loop=1")]),
            status: 502, code: "too_many_redirects")
        XCTAssertEqual(origin.count(loop), 6)
    }

    func testCredentialsDoNotFollowACrossOriginRedirect() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let target = uniquePath("target")
        let elsewhere = "http%3A%2F%2Flocalhost%3A\(origin.port)\(target)"
        _ = try client.fetch(["url": url(path, "status=302&location=\(elsewhere)"), "headers": ["Authorization": "Bearer t"]])
        XCTAssertEqual(origin.requests(path).first?.headers["authorization"], "Bearer t")
        XCTAssertNil(origin.requests(target).first?.headers["authorization"])
    }

    private func ephemeralClosedPort() throws -> Int {
        let probe = try TestOrigin.start()
        let port = probe.port
        probe.stop()
        return port
    }
}

/// RFC 8586 CDN-Loop: a request that comes back to the instance that sent it is refused at once.
final class LoopDetectionTests: IntegrationTestCase {
    func testAnUpstreamPointingBackAtLarderIsRefusedAtOnce() throws {
        // A loop through another cache (here a second Larder), which the address rules cannot
        // see: A forwards to B, B back to A. A pointing straight at itself is refused before
        // any connection (its own listener: OwnListenerTests).
        let port = Self.freeLoopbackPort()
        let otherPort = Self.freeLoopbackPort()
        let larder = try startLarder { configuration in
            configuration.port = port
            configuration.upstreams = [
                NamedUpstream(name: "self", baseURL: "http://127.0.0.1:\(otherPort)/proxy/back"),
                NamedUpstream(name: "direct", baseURL: "http://127.0.0.1:\(port)/proxy/direct"),
                NamedUpstream(name: "origin", baseURL: self.origin.base)
            ]
        }
        _ = try startLarder { configuration in
            configuration.port = otherPort
            configuration.databasePath = self.directory.appendingPathComponent("other.sqlite").path
            configuration.upstreams = [NamedUpstream(name: "back", baseURL: "http://127.0.0.1:\(port)/proxy/self")]
        }
        let client = try larder.connection()
        let started = Date()
        let proxied = try client.request("GET", "/proxy/self/x")
        XCTAssertEqual(proxied.status, 508, proxied.text)
        XCTAssertEqual(proxied.errorCode, "loop_detected")
        let fetched = try client.fetch(["url": "http://127.0.0.1:\(otherPort)/proxy/back/y"])
        XCTAssertEqual(fetched.json["status"] as? Int, 508, fetched.text)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "answered at once, not after the upstream timeout")
        XCTAssertEqual(try client.request("GET", "/proxy/direct/z").errorCode, "upstream_forbidden")

        // The token is this instance's: another cache's entry in CDN-Loop is no loop, and what
        // reaches the origin carries Larder's own token (the test origin keeps a field's last line).
        let passed = try client.request("GET", "/proxy/origin\(uniquePath())", headers: ["CDN-Loop": "larder-someoneelse, other-cdn; v=1"])
        XCTAssertEqual(passed.status, 200)
        let sent = (passed.json["headers"] as? [String: String])?["cdn-loop"] ?? ""
        XCTAssertTrue(sent.hasPrefix("larder-") && sent != "larder-someoneelse", sent)
        let direct = try client.request(
            "POST", "/fetch", headers: ["CDN-Loop": "other-cdn, \(sent); v=2"],
            body: Array(try JSONSerialization.data(withJSONObject: ["url": url(uniquePath())])))
        XCTAssertEqual(direct.status, 508, "its own token, among others, with a parameter")
    }
}

/// Slow and stalled clients, and the connection limit.
final class ClientLimitTests: IntegrationTestCase {
    func testAClientThatStallsMidBodyIsCutAfterTheClientTimeout() throws {
        let larder = try startLarder { $0.clientTimeoutSeconds = 1 }
        let stalled = try TestConnection(port: larder.port, timeoutSeconds: 10)
        try stalled.sendAll(Array("POST /fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"url\"".utf8))
        let started = Date()
        // Meanwhile others are served.
        XCTAssertEqual(try larder.connection().fetch(["url": url(uniquePath())]).status, 200)
        XCTAssertTrue(stalled.awaitClose(), "the stalled connection was closed")
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "after about the client timeout, not the receive timeout")
    }

    func testConnectionsBeyondTheLimitWaitUntilOneCloses() throws {
        let larder = try startLarder { $0.maxConnections = 16 }
        var held = try (0..<16).map { _ in try TestConnection(port: larder.port, timeoutSeconds: 5) }
        // Each of them works (and stays open: keep-alive).
        for connection in held { XCTAssertEqual(try connection.request("GET", "/healthz").status, 200) }
        // The 17th is not served while all 16 are open (it waits in the listen backlog)...
        let beyond = try TestConnection(port: larder.port, timeoutSeconds: 1)
        XCTAssertThrowsError(try beyond.request("GET", "/healthz"), "not served while the limit is reached")
        beyond.closeSocket()
        // ...and once one closes, new connections are served again.
        held.removeLast().closeSocket()
        // The server's own count of the closed connection is not visible: a new one is tried
        // until it is served (each attempt waits up to a second for its answer).
        let served = try eventually {
            let attempt = try TestConnection(port: larder.port, timeoutSeconds: 1)
            defer { attempt.closeSocket() }
            return (try? attempt.request("GET", "/healthz").status) == 200
        }
        XCTAssertTrue(served, "a freed slot is used again")
        XCTAssertEqual(try held[0].request("GET", "/healthz").status, 200)
    }
}
