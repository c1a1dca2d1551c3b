// The probes through the real server: /livez and /readyz answer where /healthz does (the main
// and admin listeners, not the proxy-root one), without a token, and all three answer
// 503 shutting_down while Larder drains. Readiness against a degraded store is tested with
// Redis stopped (SharedStoreTests) and with a full disk (CrashSafetyTests), its rule in
// ReadinessTests.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import LarderSync
import XCTest

final class ProbeTests: IntegrationTestCase {
    func testTheProbesAnswerOnEveryListenerThatServesHealthz() throws {
        let larder = try startLarder { configuration in
            configuration.adminPort = 0
            configuration.adminToken = String(repeating: "a", count: 32)
            configuration.metricsToken = String(repeating: "m", count: 32)
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
            configuration.proxyRoot = "origin"
            configuration.proxyPort = 0
        }
        let main = try larder.connection()
        let admin = try TestConnection(port: try XCTUnwrap(larder.adminPort))
        for (name, client) in [("main", main), ("admin", admin)] {
            let live = try client.request("GET", "/livez")
            XCTAssertEqual(live.status, 200, name)
            XCTAssertEqual(live.json["status"] as? String, "ok", name)
            XCTAssertEqual(live.headers["content-type"], "application/json", name)
            let ready = try client.request("GET", "/readyz")
            XCTAssertEqual(ready.status, 200, name)
            XCTAssertEqual(ready.json["status"] as? String, "ready", name)
            XCTAssertEqual(ready.json["storage"] as? String, "ok", name)
            XCTAssertEqual(try client.request("GET", "/healthz").json["storage"] as? String, "ok", name)
            XCTAssertEqual(try client.request("HEAD", "/readyz").status, 200, name)
            let refused = try client.request("POST", "/livez")
            XCTAssertEqual(refused.status, 405, name)
            XCTAssertEqual(refused.headers["allow"], "GET, HEAD", name)
        }
        // The proxy-root listener proxies every path, these too.
        let proxied = try TestConnection(port: try XCTUnwrap(larder.service.proxyPort)).request("GET", "/readyz")
        XCTAssertEqual(origin.count("/readyz"), 1, "sent to the origin: \(proxied.status)")
    }

    func testTheProbesCountInTheRequestMetricsUnderTheirOwnRoutes() throws {
        let client = try startLarder().connection()
        _ = try client.request("GET", "/livez")
        _ = try client.request("GET", "/readyz")
        _ = try client.request("GET", "/readyz")
        let text = try client.request("GET", "/metrics").text
        XCTAssertTrue(text.contains(#"larder_requests_total{route="livez",status="200"} 1"#), text)
        XCTAssertTrue(text.contains(#"larder_requests_total{route="readyz",status="200"} 2"#), text)
    }

    func testWhileLarderDrainsTheProbesAnswer503ShuttingDown() throws {
        let logLines = LogLines()
        let larder = try startLarder(logLines: logLines)
        let port = larder.port
        XCTAssertEqual(try larder.connection().request("GET", "/readyz").status, 200)
        // A request held at the origin keeps Larder draining until the test releases it.
        let path = uniquePath()
        let target = url(path, "hold=gate")
        let answered = DispatchSemaphore(value: 0)
        Thread {
            _ = try? TestConnection(port: port).fetch(["url": target])
            answered.signal()
        }.start()
        XCTAssertTrue(origin.holds.waitForHeld(path, count: 1))
        let service = larder.service
        let stopped = DispatchSemaphore(value: 0)
        Thread {
            service.shutdown()
            stopped.signal()
        }.start()
        XCTAssertTrue(logLines.waitFor("draining"))
        for probe in ["/readyz", "/livez", "/healthz"] {
            let answer = try TestConnection(port: port).request("GET", probe)
            XCTAssertEqual(answer.status, 503, probe)
            XCTAssertEqual(answer.errorCode, "shutting_down", probe)
        }
        origin.holds.release(path)
        XCTAssertEqual(answered.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(stopped.wait(timeout: .now() + 10), .success, "drained once the request in flight was answered")
    }
}
