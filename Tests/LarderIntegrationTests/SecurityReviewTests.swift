// Regression tests for the security review (issue 13): each sends the attack through the real
// server and checks what reached the origin, the cache, the next client or the log.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class SecurityReviewTests: IntegrationTestCase {
    private func startProxy(
        logLines: LogLines? = nil,
        _ configure: (inout LarderConfiguration) -> Void = { _ in }
    ) throws -> RunningLarder {
        try startLarder(logLines: logLines) { configuration in
            configuration.upstreams = [NamedUpstream(name: "o", baseURL: origin.base + "/base")]
            configure(&configuration)
        }
    }

    private func head(_ target: String, _ lines: String, method: String = "GET") -> [UInt8] {
        Array("\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(lines)\r\n".utf8)
    }

    // MARK: 1. Smuggling through /proxy

    func testAmbiguousHeaderSectionsAreRefusedAndTheConnectionClosed() throws {
        let larder = try startProxy()
        let path = uniquePath()
        let attacks: [(String, [UInt8], Int)] = [
            ("space before the colon", head("/proxy/o\(path)", "Transfer-Encoding : chunked\r\n") + Array("0\r\n\r\n".utf8), 400),
            ("tab before the colon", head("/proxy/o\(path)", "X-A\t: 1\r\n"), 400),
            ("bare CR in a value", head("/proxy/o\(path)", "X-A: a\rGET /evil HTTP/1.1\r\n"), 400),
            ("control byte in a value", head("/proxy/o\(path)", "X-A: a\u{1}b\r\n"), 400),
            (
                "two different lengths",
                head("/proxy/o\(path)", "Content-Length: 3\r\nContent-Length: 5\r\n", method: "POST")
                    + Array("abcde".utf8), 400
            ),
            (
                "length and chunked",
                head("/proxy/o\(path)", "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", method: "POST")
                    + Array("3\r\nabc\r\n0\r\n\r\n".utf8), 400
            ),
            ("identity coding", head("/proxy/o\(path)", "Transfer-Encoding: identity\r\n", method: "POST") + Array("abc".utf8), 400),
            ("unknown coding", head("/proxy/o\(path)", "Transfer-Encoding: gzip, chunked\r\n", method: "POST"), 501),
            ("on /fetch too", head("/fetch", "Content-Length: 2\r\nContent-Length: 20\r\n", method: "POST") + Array("{}".utf8), 400)
        ]
        for (name, bytes, status) in attacks {
            let client = try larder.connection()
            let response = try client.raw(bytes)
            XCTAssertEqual(response.status, status, name)
            XCTAssertEqual(response.errorCode, status == 501 ? "not_implemented" : "invalid_request", name)
            XCTAssertEqual(response.headers["connection"]?.lowercased(), "close", name)
            XCTAssertTrue(client.awaitClose(), "\(name): the connection is closed after the refusal")
        }
        XCTAssertEqual(origin.totalCount, 0, "nothing reached the origin")
        XCTAssertEqual(try larder.connection().request("GET", "/healthz").status, 200)
    }

    func testWhatIsForwardedIsOneFieldPerLineWithNoControls() throws {
        // libmicrohttpd folds continuation lines into the name and ends a value at NUL before
        // Larder sees them; what goes upstream must be exactly what Larder read, in plain form.
        let raw = try RawOrigin(reply: Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8))
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "raw", baseURL: "http://127.0.0.1:\(raw.port)")] }
        let folded = try larder.connection().raw(
            head("/proxy/raw/folded", "X-A:\r\n Transfer-Encoding\r\n\tchunked\r\nX-B: a\u{0}\r\n evil\r\n"))
        XCTAssertEqual(folded.status, 200)
        let sent = try XCTUnwrap(raw.requests.last)
        let text = String(decoding: sent, as: UTF8.self)
        XCTAssertFalse(text.contains("\r\n "), text)
        XCTAssertFalse(text.contains("\r\n\t"), text)
        XCTAssertFalse(sent.contains(0), "no NUL goes upstream")
        XCTAssertFalse(text.lowercased().contains("\r\ntransfer-encoding:"), text)
        for line in text.components(separatedBy: "\r\n").dropFirst() where !line.isEmpty {
            let name = line.prefix { $0 != ":" }
            XCTAssertTrue(HTTPToken.isValidName(String(name)), "field name '\(name)' in \(text)")
        }
    }

    func testRequestFieldsGoUpstreamByteForByteAndNoLibcurlDefaultsAreAdded() throws {
        // RFC 9110 §5.5: obs-text in a request field goes upstream as the byte that came in.
        let raw = try RawOrigin(reply: Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8))
        let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "raw", baseURL: "http://127.0.0.1:\(raw.port)")] }
        let latin =
            Array("GET /proxy/raw/latin HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: abc".utf8) + [0xFC] + Array("\r\nX-Empty:\r\n\r\n".utf8)
        XCTAssertEqual(try larder.connection().raw(latin).status, 200)
        let sent = try XCTUnwrap(raw.requests.last)
        let note = Array("\r\nX-Note: abc".utf8) + [0xFC, 0x0D, 0x0A]
        XCTAssertTrue(sent.indices.contains { Array(sent[$0...].prefix(note.count)) == note }, String(decoding: sent, as: UTF8.self))
        let text = String(decoding: sent, as: UTF8.self).lowercased()
        XCTAssertTrue(text.contains("\r\nx-empty:\r\n") || text.contains("\r\nx-empty: \r\n"), "an empty value is sent empty: \(text)")
        XCTAssertTrue(text.contains("\r\nuser-agent: "), text)
        // A GET has no body: libcurl adds neither Expect nor a form Content-Type to it.
        XCTAssertFalse(text.contains("\r\nexpect:"), text)
        XCTAssertFalse(text.contains("\r\ncontent-type:"), text)
        // A POST without a type gets none from libcurl (it would say x-www-form-urlencoded).
        let post = Array("POST /proxy/raw/post HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello".utf8)
        XCTAssertEqual(try larder.connection().raw(post).status, 200)
        let posted = String(decoding: try XCTUnwrap(raw.requests.last), as: UTF8.self).lowercased()
        XCTAssertTrue(posted.hasPrefix("post /"), posted)
        XCTAssertFalse(posted.contains("content-type:"), posted)
        XCTAssertFalse(posted.contains("expect:"), posted)
    }

    func testAHeadAnsweredUpstreamPassesOnOnlyAPlainContentLength() throws {
        // RFC 9110 §8.6: a HEAD response's Content-Length is the GET's. An upstream's value
        // that is not one plain number is not passed on, and never breaks the server.
        for (value, expected) in [("12345", "12345"), ("-5", "0"), ("7, 7", "0"), ("99999999999999999999999", "0")] {
            let raw = try RawOrigin(reply: Array("HTTP/1.1 200 OK\r\nContent-Length: \(value)\r\n\r\n".utf8))
            let larder = try startLarder { $0.upstreams = [NamedUpstream(name: "raw", baseURL: "http://127.0.0.1:\(raw.port)")] }
            let client = try larder.connection()
            let head = try client.request("HEAD", "/proxy/raw/h")
            if value == "12345" { XCTAssertEqual(head.status, 200) }
            if head.status == 200 {
                XCTAssertEqual(head.headers["content-length"], expected, value)
            } else {
                XCTAssertEqual(head.status, 502, "refused by libcurl, then named: \(value)")
            }
            XCTAssertEqual(try client.request("GET", "/healthz").status, 200, "the connection goes on: \(value)")
            stopLarder(larder)
        }
    }

    // MARK: 2, 3. JSON costs

    func testLargeUpstreamJSONIsPassedAsTextAndTheProxyDoesNotClassify() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let small = try client.fetch(["url": url(uniquePath(), "jsonsize=1000")])
        XCTAssertNotNil(small.json["body"] as? [Any], "small JSON is embedded")
        let big = try client.fetch(["url": url(uniquePath(), "jsonsize=3000000")])
        XCTAssertEqual(big.status, 200)
        XCTAssertNil(big.json["body"], "JSON over 1 MiB is not embedded")
        XCTAssertGreaterThan((big.json["bodyText"] as? String)?.utf8.count ?? 0, 2_900_000)
        let proxied = try client.request("GET", "/proxy/o\(uniquePath())?jsonsize=3000000")
        XCTAssertEqual(proxied.status, 200)
        XCTAssertEqual(proxied.body.prefix(5), Array("[123,".utf8)[...])
        XCTAssertGreaterThan(proxied.body.count, 2_900_000)
    }

    func testDeeplyNestedRequestBodiesAreRefusedCheaply() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let deep = String(repeating: "[{\"a\":", count: 250) + "1" + String(repeating: "}]", count: 250)
        for _ in 0..<4 {
            let response = try client.fetchRaw(#"{"url":"\#(url("/deep"))","method":"POST","body":\#(deep)}"#)
            XCTAssertEqual(response.status, 400)
            XCTAssertEqual(response.errorField, "body")
            XCTAssertTrue((response.json["error"] as? [String: Any])?["message"].map { "\($0)" }?.contains("64") == true, response.text)
        }
        let fine = String(repeating: "[", count: 30) + String(repeating: "]", count: 30)
        XCTAssertEqual(try client.fetchRaw(#"{"url":"\#(url("/deep"))","method":"POST","body":\#(fine)}"#).status, 200)
        XCTAssertEqual(origin.count("/deep"), 1)
    }

    // MARK: 4. Poisoning the proxy's and other callers' entries

    func testFetchCannotWriteIntoTheProxyOrAnotherURLsEntry() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let reserved = try client.fetch([
            "url": url("/base\(path)", "a=good&a=EVIL"),
            "cache": ["namespace": "proxy:o", "ignoreQuery": ["a"], "ttl": 600]
        ])
        XCTAssertEqual(reserved.status, 400)
        XCTAssertEqual(reserved.errorField, "cache.namespace")

        // An ignored parameter does not let a response answer for the URL without it.
        let poisoned = try client.fetch(["url": url(path, "a=EVIL"), "cache": ["ignoreQuery": ["a"], "ttl": 600]])
        XCTAssertEqual(poisoned.outcome, "miss")
        let clean = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        XCTAssertEqual(clean.outcome, "miss")
        XCTAssertEqual((clean.upstreamBody["query"] as? [String: Any])?.isEmpty, true)
        XCTAssertEqual(origin.count(path), 2)
        // The proxy never sees /fetch's entry for its URL either.
        let proxied = try client.request("GET", "/proxy/o\(path)")
        XCTAssertTrue(proxied.headers["cache-status"]?.contains("fwd=uri-miss") == true)
        XCTAssertEqual(origin.count("/base\(path)"), 1)
    }

    // MARK: 5. Cookies in the shared cache

    func testAResponseToARequestWithACookieIsNotSharedUnlessMarkedPublic() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        let personal = try client.request("GET", "/proxy/o\(path)", headers: ["Cookie": "sid=alice"])
        XCTAssertEqual(personal.status, 200)
        XCTAssertFalse(personal.headers["cache-status"]?.contains("stored") == true, personal.headers["cache-status"] ?? "")
        let stranger = try client.request("GET", "/proxy/o\(path)", headers: ["Cache-Control": "max-stale=3600"])
        XCTAssertEqual(stranger.status, 200)
        XCTAssertEqual(origin.count("/base\(path)"), 2, "the stranger did not get Alice's response")
        XCTAssertEqual(origin.requests("/base\(path)").last?.headers["cookie"], nil)

        let shared = uniquePath()
        _ = try client.request("GET", "/proxy/o\(shared)?cc=public%2C%20max-age%3D60", headers: ["Cookie": "sid=alice"])
        let hit = try client.request("GET", "/proxy/o\(shared)?cc=public%2C%20max-age%3D60")
        XCTAssertTrue(hit.headers["cache-status"]?.hasPrefix("larder; hit") == true, "public responses may be shared")
        XCTAssertEqual(origin.count("/base\(shared)"), 1)
    }

    // MARK: 6. Configured headers and cross-origin redirects

    func testUpstreamConfiguredHeadersDoNotFollowARedirectToAnotherOrigin() throws {
        let elsewhere = try TestOrigin.start(clock: clock)
        defer { elsewhere.stop() }
        let larder = try startLarder { configuration in
            configuration.upstreams = [
                NamedUpstream(name: "api", baseURL: origin.base, headers: [HeaderField("X-Api-Key", "key-secret-1")])
            ]
        }
        let path = uniquePath()
        let target = elsewhere.base + "/landing"
        let response = try larder.connection().fetch(["upstream": "api", "path": "\(path)?status=302&location=\(target)"])
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(origin.requests(path).first?.headers["x-api-key"], "key-secret-1")
        XCTAssertEqual(elsewhere.count("/landing"), 1)
        XCTAssertNil(elsewhere.requests("/landing").first?.headers["x-api-key"], "the key stayed with its origin")

        // A same-origin redirect keeps it.
        let again = uniquePath()
        _ = try larder.connection().fetch(["upstream": "api", "path": "\(again)?status=302&location=\(origin.base)/same"])
        XCTAssertEqual(origin.requests("/same").last?.headers["x-api-key"], "key-secret-1")
    }

    // MARK: 7. Repeated query parameters

    func testRepeatedParametersInAnotherOrderAreAnotherEntry() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.fetch(["url": url(path, "a=evil&a=good"), "cache": ["ttl": 600]])
        let other = try client.fetch(["url": url(path, "a=good&a=evil"), "cache": ["ttl": 600]])
        XCTAssertEqual(other.outcome, "miss")
        XCTAssertEqual(origin.requests(path).last?.target, "\(path)?a=good&a=evil")
        XCTAssertEqual(try client.fetch(["url": url(path, "a=good&a=evil"), "cache": ["ttl": 600]]).outcome, "hit")
        XCTAssertEqual(origin.count(path), 2)
    }

    // MARK: 8. Bounds on upstream work

    func testConcurrentUpstreamTransfersAreBounded() throws {
        let larder = try startLarder { $0.maxUpstreamTransfers = 2 }
        let statuses = slowFetchStatuses(port: larder.port, count: 6, delayMs: 150)
        XCTAssertEqual(statuses, Array(repeating: 200, count: 6))
        XCTAssertEqual(origin.peakConcurrency, 2, "never more than the limit at the origin, and the limit is used")
    }

    /// Issue 12: each event loop runs its own requests' transfers, under one bound for all. A
    /// loop whose requests all wait for a slot has no transfer of its own to end: the slot
    /// another loop frees must start them (seen: they waited until their deadline, 504).
    func testIssue12ASlotFreedOnOneLoopStartsTheRequestsWaitingOnAnother() throws {
        let larder = try startLarder { $0.maxUpstreamTransfers = 1 }
        let base = uniquePath()
        func path(_ index: Int) -> String { "\(base)-\(index)" }
        // Each request for its own path, which the origin holds until the test lets it go: the
        // first holds the one slot, the others wait for it. A connection goes to whichever loop
        // accepts it first, so connections are opened (each request handed to the router before
        // the next) until every loop has some: then a loop has requests waiting and no transfer
        // of its own whose end would start them.
        var clients: [TestConnection] = []
        while clients.count < 8 || larder.service.requestsPerLoop.contains(0), clients.count < 64 {
            let client = try TestConnection(port: larder.port)
            try client.sendFetch(["url": url(path(clients.count), "hold=gate"), "timeoutMs": 20_000])
            clients.append(client)
            let sent = clients.count
            XCTAssertTrue(eventually { larder.service.requestsPerLoop.reduce(0, +) == sent }, "request \(sent) reached the router")
        }
        let perLoop = larder.service.requestsPerLoop
        XCTAssertEqual(perLoop.count, 2)
        XCTAssertFalse(perLoop.contains(0), "every loop has requests waiting for the slot: \(perLoop)")
        // One exchange at a time: the origin holds the one that has the slot; letting it go frees
        // the slot, and the next request, on whichever loop it waits, reaches the origin.
        let paths = clients.indices.map(path)
        for step in 1...clients.count {
            let reached = eventually { origin.totalCount == step && paths.contains { origin.holds.waiting($0) == 1 } }
            guard reached else {
                XCTFail("only \(origin.totalCount) of \(clients.count) requests reached the origin (requests per loop: \(perLoop))")
                break
            }
            let held = paths.filter { origin.holds.waiting($0) > 0 }
            XCTAssertEqual(held.count, 1, "one transfer at a time")
            for path in held { origin.holds.release(path) }
        }
        let statuses = clients.map { (try? $0.readResponse(method: "POST"))?.status ?? -1 }
        XCTAssertEqual(statuses, Array(repeating: 200, count: clients.count))
        XCTAssertEqual(paths.map { origin.count($0) }, Array(repeating: 1, count: clients.count))
    }

    /// `count` /fetch calls at once, each on its own connection, each for its own URL that the
    /// origin answers after `delayMs`: their HTTP statuses (-1 for no answer).
    private func slowFetchStatuses(port: Int, count: Int, delayMs: Int) -> [Int] {
        let statuses = Locked<[Int]>([])
        let base = url(uniquePath())
        XCTAssertTrue(
            concurrently(count) { index in
                let status = (try? TestConnection(port: port).fetch(["url": "\(base)-\(index)?delay=\(delayMs)"]).status) ?? -1
                statuses.withLock { $0.append(status) }
            })
        return statuses.withLock { $0 }
    }

    func testBodiesOverTheInFlightBudgetWaitAndArriveWhole() throws {
        let larder = try startProxy { $0.maxInflightBodyBytes = 1 << 20 }
        let sizes = Locked<[Int]>([])
        let path = uniquePath()
        let port = larder.port
        XCTAssertTrue(
            concurrently(4) { index in
                let size = (try? TestConnection(port: port).request("GET", "/proxy/o\(path)-\(index)?size=3000000"))?.body.count ?? -1
                sizes.withLock { $0.append(size) }
            })
        XCTAssertEqual(sizes.withLock { $0 }, Array(repeating: 3_000_000, count: 4))
    }

    func testBodyLimitsSQLiteCannotStoreAreRefusedAtStart() throws {
        XCTAssertThrowsError(try startLarder { $0.maxUpstreamBodyBytes = 3 << 30 })
        XCTAssertThrowsError(try startLarder { $0.maxUpstreamTransfers = 0 })
    }

    // MARK: 9. Slow clients

    func testOneAddressCannotTakeEveryConnection() throws {
        let larder = try startLarder { configuration in
            configuration.connectionsPerAddress = 20
            configuration.headerTimeoutSeconds = 1
        }
        var hoarded: [TestConnection] = []
        for _ in 0..<20 {
            let connection = try TestConnection(port: larder.port, timeoutSeconds: 10)
            try connection.sendAll(Array("GET /healthz HTTP/1.1\r\nHost: x\r\n".utf8)) // never finished
            hoarded.append(connection)
        }
        // Over the per-address limit: closed without an answer.
        let extra = try TestConnection(port: larder.port, timeoutSeconds: 10)
        XCTAssertThrowsError(try extra.request("GET", "/healthz"))
        // Another client address is served at once.
        let other = try TestConnection(port: larder.port, timeoutSeconds: 10, from: "127.0.0.2")
        XCTAssertEqual(try other.request("GET", "/healthz").status, 200)
        // A header section that never completes is cut off by the header timeout.
        XCTAssertTrue(hoarded[0].awaitClose())
        // A connection that sent its request keeps the (longer) idle timeout.
        let active = try TestConnection(port: larder.port, timeoutSeconds: 10, from: "127.0.0.3")
        XCTAssertEqual(try active.request("GET", "/healthz").status, 200)
        XCTAssertTrue(hoarded[19].awaitClose())
        XCTAssertEqual(try active.request("GET", "/healthz").status, 200, "still open after the header timeout passed")
    }

    // MARK: 10. The base-path guard

    func testEncodedAndParameterisedDotSegmentsCannotLeaveTheBasePath() throws {
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "o", baseURL: origin.base + "/v1")]
        }
        let client = try larder.connection()
        for target in [
            "/proxy/o/..;/admin", "/proxy/o/.%2e;/admin", "/proxy/o/..%2Fadmin", "/proxy/o/..%5Cadmin", "/proxy/o/x/%2e%2e;x/admin"
        ] {
            let response = try client.request("GET", target)
            XCTAssertEqual(response.status, 400, target)
            XCTAssertEqual(response.errorCode, "invalid_request", target)
        }
        for path in ["/..;/admin", "/..%2Fadmin"] {
            let response = try client.fetch(["upstream": "o", "path": path])
            XCTAssertEqual(response.status, 400, path)
            XCTAssertEqual(response.errorField, "path", path)
        }
        XCTAssertEqual(origin.totalCount, 0)
        XCTAssertEqual(try client.request("GET", "/proxy/o/a..b").status, 200, "dots inside a segment are fine")
    }

    // MARK: 11. Unkeyed fields and libcurl's defaults

    func testUnkeyedOverrideFieldsAreNotForwarded() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.request(
            "GET", "/proxy/o\(path)",
            headers: [
                "X-Forwarded-Host": "evil.test", "X-Forwarded-Proto": "http", "Forwarded": "host=evil.test", "X-Original-URL": "/admin",
                "X-HTTP-Method-Override": "DELETE", "X-Real-IP": "10.0.0.1", "X-Kept": "yes"
            ])
        let received = try XCTUnwrap(origin.requests("/base\(path)").first)
        for name in ["x-forwarded-host", "x-forwarded-proto", "forwarded", "x-original-url", "x-http-method-override", "x-real-ip"] {
            XCTAssertNil(received.headers[name], name)
        }
        XCTAssertEqual(received.headers["x-kept"], "yes")
    }

    func testABodyWithoutAContentTypeIsNotLabelledAForm() throws {
        let larder = try startProxy()
        let client = try larder.connection()
        let path = uniquePath()
        _ = try client.request("POST", "/proxy/o\(path)", body: Array("raw".utf8))
        XCTAssertNil(origin.requests("/base\(path)").first?.headers["content-type"])
        XCTAssertEqual(origin.requests("/base\(path)").first.map { String(decoding: $0.body, as: UTF8.self) }, "raw")
        _ = try client.fetch(["url": url(path), "method": "PUT", "bodyBase64": "cmF3"])
        XCTAssertNil(origin.requests(path).first?.headers["content-type"])
        _ = try client.request("POST", "/proxy/o\(path)", headers: ["Content-Type": "text/csv"], body: Array("a,b".utf8))
        XCTAssertEqual(origin.requests("/base\(path)").last?.headers["content-type"], "text/csv")
    }

    // MARK: 12. The access log

    func testControlCharactersCannotForgeAccessLogLines() throws {
        let lines = LogLines()
        let larder = try startLarder(logLines: lines) { $0.accessLog = true }
        let client = try larder.connection()
        XCTAssertEqual(try client.request("GET", "/nope%0a2026-01-01T00:00:00+0000%20info%20FORGED").status, 404)
        _ = try TestConnection(port: larder.port).raw(head("/bad%0dpath", "X-A: a\u{1}\r\n"))
        // Access lines are written in batches, a moment after their answers.
        XCTAssertTrue(lines.waitFor("/nope") && lines.waitFor("/bad"), "\(lines.all)")
        let logged = lines.all.filter { $0.contains("nope") || $0.contains("bad") }
        XCTAssertEqual(logged.count, 2, "\(lines.all)")
        for line in logged {
            XCTAssertFalse(line.contains("\n") || line.contains("\r"), line)
        }
        XCTAssertTrue(logged.contains { $0.contains("/nope\\x0a2026") }, "\(logged)")
    }

    // MARK: 13. IPv6 forms of refused addresses

    func testTranslatedForbiddenAddressesAreRefusedBeforeConnecting() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        for host in ["[64:ff9b::a9fe:a9fe]", "[::ffff:0:a9fe:a9fe]", "[2002:a9fe:a9fe::]", "[::a9fe:a9fe]"] {
            let response = try client.fetch(["url": "http://\(host)/latest/meta-data/"])
            XCTAssertEqual(response.status, 403, host)
            XCTAssertEqual(response.errorCode, "upstream_forbidden", host)
        }
        let strict = try startLarder {
            $0.denyPrivate = true
            $0.databasePath = self.directory.appendingPathComponent("strict.sqlite").path
        }
        let refused = try strict.connection().fetch(["url": "http://[::127.0.0.1]:\(origin.port)/x"])
        XCTAssertEqual(refused.errorCode, "upstream_forbidden")
    }

    // MARK: 14. Upgrades

    func testAnUnaskedSwitchOfProtocolsIsAnErrorNotAHang() throws {
        let raw = try RawOrigin(
            reply: Array("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".utf8),
            holdOpen: true)
        let larder = try startLarder()
        let response = try larder.connection().fetch(["url": "http://127.0.0.1:\(raw.port)/ws", "timeoutMs": 60000])
        XCTAssertEqual(response.status, 502, response.text)
        XCTAssertEqual(response.errorCode, "upstream_error", "not upstream_timeout: it did not wait")
    }
}

/// SSRF through DNS (issue 9): names that resolve to forbidden addresses, given by the test
/// through `--resolve` (libcurl's resolve override: no DNS traffic leaves the machine). The
/// address is checked when it is connected to, so neither a name, nor a redirect to one, nor an
/// answer that changes between a check and the connect reaches a forbidden address.
final class DNSSSRFTests: IntegrationTestCase {
    private var originPort: Int { Int(origin.base.split(separator: ":").last!)! }

    func testNamesResolvingToForbiddenAddressesAreNeverConnected() throws {
        let client = try startLarder { configuration in
            configuration.resolve = ["metadata.test:80:169.254.169.254", "internal.test:\(self.originPort):127.0.0.1"]
        }.connection()
        let metadata = try client.fetch(["url": "http://metadata.test/latest/meta-data/"])
        XCTAssertEqual(metadata.status, 403, metadata.text)
        XCTAssertEqual(metadata.errorCode, "upstream_forbidden")

        // A redirect from an allowed origin to such a name is refused too.
        let redirected = try client.fetch(["url": url(uniquePath(), "status=302&location=http://metadata.test/latest")])
        XCTAssertEqual(redirected.errorCode, "upstream_forbidden", redirected.text)

        // Without --deny-private a name for loopback is fine: the override works, and what
        // refuses below is the policy.
        let path = uniquePath()
        XCTAssertEqual(try client.fetch(["url": "http://internal.test:\(originPort)\(path)"]).status, 200)
        XCTAssertEqual(origin.count(path), 1)
    }

    func testWithDenyPrivateANameForLoopbackNeverReachesIt() throws {
        let client = try startLarder { configuration in
            configuration.denyPrivate = true
            // The first answer is refused, the second too: neither is connected to.
            configuration.resolve = ["internal.test:\(self.originPort):127.0.0.1", "rebind.test:\(self.originPort):10.255.255.1,127.0.0.1"]
        }.connection()
        let path = uniquePath()
        for host in ["internal.test", "rebind.test"] {
            let response = try client.fetch(["url": "http://\(host):\(originPort)\(path)"])
            XCTAssertEqual(response.errorCode, "upstream_forbidden", "\(host): \(response.text)")
        }
        XCTAssertEqual(origin.count(path), 0, "the origin on loopback never saw the request")
    }
    /// Rebinding between a check and the connect: the first answer is allowed (and refuses the
    /// connection), the second is the metadata address. libcurl falls back to the second; the
    /// policy is applied to every address as it is connected, so it is refused, not reached.
    func testTheAddressActuallyConnectedIsTheOneChecked() throws {
        let closed = Self.freeLoopbackPort()
        let client = try startLarder { configuration in
            configuration.resolve = ["flip.test:\(closed):127.0.0.2,169.254.169.254"]
        }.connection()
        let response = try client.fetch(["url": "http://flip.test:\(closed)/latest/meta-data/"])
        XCTAssertEqual(response.errorCode, "upstream_forbidden", response.text)
    }
}
