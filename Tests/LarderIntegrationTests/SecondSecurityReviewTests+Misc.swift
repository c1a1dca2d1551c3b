// Regression tests for the second security review (issue 32), items 8 to 11: JSON numbers in
// keys and upstream bodies, the whole-section header deadline, empty tokens, and framing fields
// in entries written by hand. Each goes through the real server (or the real executable).

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

final class SecondSecurityReviewMiscTests: IntegrationTestCase {
    // MARK: 8. JSON numbers keep their text

    func testBodiesDifferingOnlyInALargeOrPreciseNumberGetTheirOwnEntriesAndGoUpstreamAsWritten() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        // Each pair was one double before: 1.2345678901234567e+19, and 0.1.
        for (first, second) in [("12345678901234567890", "12345678901234567891"), ("0.1000000000000000055511151231257827", "0.1")] {
            let path = uniquePath()
            func post(_ number: String) throws -> TestResponse {
                try client.fetchRaw(
                    #"{"url":"\#(url(path))","method":"POST","cache":{"ttl":300},"body":{ "n" : \#(number) , "a":[1.0,-0,2E-7]}}"#)
            }
            XCTAssertEqual(try post(first).outcome, "miss")
            XCTAssertEqual(try post(second).outcome, "miss", "\(second) is not \(first)'s entry")
            XCTAssertEqual(try post(first).outcome, "hit")
            XCTAssertEqual(origin.count(path), 2)
            // Only whitespace and member order are normalised.
            XCTAssertEqual(
                origin.requests(path).map { String(decoding: $0.body, as: UTF8.self) },
                [#"{"a":[1.0,-0,2E-7],"n":\#(first)}"#, #"{"a":[1.0,-0,2E-7],"n":\#(second)}"#])
        }
    }

    func testNumbersReadFromBodiesByChainsAndValidatorsStillWork() throws {
        let document = #"{"n":12345678901234567890,"x":0.1000000000000000055511151231257827,"i":7}"#
        let raw = try RawOrigin(
            reply: Array(
                ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(document.utf8.count)\r\n"
                    + "Connection: close\r\n\r\n\(document)")
                    .utf8))
        let larder = try startLarder()
        let client = try larder.connection()
        let source = "http://127.0.0.1:\(raw.port)/doc"

        let validated = try client.fetch(["url": source, "validate": ["json": ["n": "integer", "x": "number", "i": "integer"]]])
        XCTAssertEqual(validated.status, 200, validated.text)
        let refused = try client.fetch(["url": source, "validate": ["json": ["x": "integer"]]])
        XCTAssertEqual(refused.errorCode, "validation_failed", refused.text)

        let path = uniquePath()
        let chain = #"""
            {"steps":[{"id":"a","request":{"url":"\#(source)"}},
                      {"id":"b","request":{"url":"\#(url(path))","method":"POST","body":{"n":"{{a.body.n}}","x":"{{a.body.x}}"}},
                       "when":{"all":[{"path":"a.body.n","op":"gt","value":1e19},{"path":"a.body.i","op":"eq","value":7.0}]}}],
             "output":{"n":"{{a.body.n}}","text":"n={{a.body.n}}"}}
            """#
        let response = try client.request("POST", "/chain", headers: ["Content-Type": "application/json"], body: Array(chain.utf8))
        XCTAssertEqual(response.json["ok"] as? Bool, true, response.text)
        XCTAssertEqual(
            origin.requests(path).map { String(decoding: $0.body, as: UTF8.self) },
            [#"{"n":12345678901234567890,"x":0.1000000000000000055511151231257827}"#],
            "the conditions held and the numbers went on as written")
        XCTAssertTrue(response.text.contains(#""n":12345678901234567890"#), response.text)
        XCTAssertTrue(response.text.contains(#""text":"n=12345678901234567890""#), response.text)
    }

    // MARK: 9. The header section has a deadline, whatever the pace

    func testHeaderLinesSentSlowerThanTheDeadlineButFasterThanTheIdleTimeoutAreCutAtTheDeadline() throws {
        let larder = try startLarder { $0.headerTimeoutSeconds = 1 }
        let slow = try SlowClient(port: larder.port)
        try slow.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
        let elapsed = slow.sendLinesUntilClosed(every: 0.3, giveUpAfter: 8)
        let seconds = try XCTUnwrap(elapsed, "still open after 8 s of one header line every 0.3 s")
        XCTAssertGreaterThanOrEqual(seconds, 0.9)
        XCTAssertLessThan(seconds, 2.5, "closed at about the 1 s deadline, not by the idle timeout")

        // A client that completes its header section in time is served, in pieces too, and
        // its kept-alive connection then has the idle timeout, not the header deadline.
        let normal = try SlowClient(port: larder.port)
        try normal.send("GET /healthz HTTP/1.1\r\n")
        XCTAssertFalse(normal.closed(within: 0.5))
        try normal.send("Host: x\r\n\r\n")
        XCTAssertTrue(try normal.readResponseHead().hasPrefix("HTTP/1.1 200"))
        XCTAssertFalse(normal.closed(within: 1.5), "idle for longer than the header deadline, within the idle timeout")
        try normal.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertTrue(try normal.readResponseHead().hasPrefix("HTTP/1.1 200"))
    }

    func testAKeptAliveConnectionHasTheIdleTimeoutPlusTheDeadlineForItsNextHeaderSection() throws {
        let larder = try startLarder { configuration in
            configuration.headerTimeoutSeconds = 1
            configuration.clientTimeoutSeconds = 2
        }
        let slow = try SlowClient(port: larder.port)
        try slow.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        XCTAssertTrue(try slow.readResponseHead().hasPrefix("HTTP/1.1 200"))
        try slow.send("GET /healthz HTTP/1.1\r\nHost: x\r\n")
        let elapsed = slow.sendLinesUntilClosed(every: 0.3, giveUpAfter: 10)
        let seconds = try XCTUnwrap(elapsed, "still open after 10 s of one header line every 0.3 s")
        // Due 3 s after the response (2 s idle + 1 s), stamped up to 1 s late.
        XCTAssertGreaterThanOrEqual(seconds, 2.5)
        XCTAssertLessThan(seconds, 6)
    }

    // MARK: 10. An empty token is refused, whatever its source

    func testAnEmptyTokenFromTheEnvironmentTheFlagOrTheConfigFileIsRefused() throws {
        let config = directory.appendingPathComponent("empty-token.yaml").path
        try "adminToken: \"\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let serve = ["serve", "--port", "0", "--db", databasePath, "--no-access-log"]
        let cases: [(String, [String], [String: String], String)] = [
            ("env", serve, ["LARDER_ADMIN_TOKEN": ""], "LARDER_ADMIN_TOKEN is set but empty"),
            ("env, metrics", serve, ["LARDER_METRICS_TOKEN": ""], "LARDER_METRICS_TOKEN is set but empty"),
            ("flag", serve + ["--admin-token", ""], [:], "the admin token is empty"),
            ("config file", serve + ["--config", config], [:], "the admin token is empty")
        ]
        for (name, arguments, environment, expected) in cases {
            let (process, errors) = try launch(arguments, environment: environment)
            let exited = waitForExit(process)
            if !exited {
                process.terminate()
                _ = waitForExit(process)
            }
            XCTAssertTrue(exited, "\(name): refused at start, not served with the admin routes open")
            XCTAssertNotEqual(process.terminationStatus, 0, name)
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            XCTAssertTrue(message.contains(expected), "\(name): \(message)")
        }
        // A token that is set still starts.
        let (process, errors) = try launch(serve, environment: ["LARDER_ADMIN_TOKEN": "s3cret"])
        defer {
            process.terminate()
            _ = waitForExit(process)
        }
        let port = try waitForPort(errors)
        XCTAssertEqual(try TestConnection(port: port).request("GET", "/cache/stats").status, 401)
    }

    /// Starts the executable with `environment` added to this process's (its tokens left out).
    private func launch(_ arguments: [String], environment: [String: String]) throws -> (Process, Pipe) {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw skipOrFail("the larder executable is not built next to the tests (run scripts/test, or set LARDER_BINARY)")
        }
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        var inherited = ProcessInfo.processInfo.environment
        for name in ["LARDER_ADMIN_TOKEN", "LARDER_METRICS_TOKEN"] { inherited.removeValue(forKey: name) }
        process.environment = inherited.merging(environment) { $1 }
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return (process, errors)
    }

    // MARK: 11. Entries written by hand carry no framing

    func testAnEntryWrittenWithFramingAndConnectionFieldsIsStoredAndServedWithoutThem() throws {
        let larder = try startLarder()
        let client = try larder.connection()
        let path = uniquePath()
        let given = [
            "Content-Length": "5", "content-length": "7", "Transfer-Encoding": "chunked", "Connection": "close, X-Named",
            "X-Named": "1", "Keep-Alive": "timeout=5", "TE": "trailers", "Trailer": "X-Sum", "Upgrade": "h2c",
            "Proxy-Authenticate": "Basic", "Proxy-Other": "x", "X-Kept": "yes"
        ]
        let written = try client.request(
            "PUT", "/cache/entries", headers: ["Content-Type": "application/json"],
            body: Array(
                try JSONSerialization.data(
                    withJSONObject: [
                        "request": ["url": url(path), "cache": ["ttl": 600]],
                        "response": ["status": 200, "headers": given, "bodyText": "hello world"]
                    ] as [String: Any])))
        XCTAssertEqual(written.status, 201, written.text)
        let key = try XCTUnwrap(written.json["key"] as? String)

        let hit = try client.fetch(["url": url(path), "cache": ["ttl": 600]])
        XCTAssertEqual(hit.outcome, "hit", hit.text)
        XCTAssertEqual(hit.json["bodyText"] as? String, "hello world")
        let headers = try XCTUnwrap(hit.json["headers"] as? [String: Any])
        XCTAssertEqual(Set(headers.keys), ["x-kept"], "only the end-to-end field the caller gave is kept")
        XCTAssertEqual(origin.count(path), 0)

        let listed = try client.request("GET", "/cache/entries/\(key)")
        XCTAssertEqual(listed.status, 200, listed.text)
        XCTAssertFalse(listed.text.lowercased().contains("content-length"), listed.text)
        XCTAssertFalse(listed.text.lowercased().contains("transfer-encoding"), listed.text)
        // The connection still frames its next answer right.
        XCTAssertEqual(try client.request("GET", "/healthz").status, 200)
    }
}

/// A client that writes raw bytes at its own pace and watches for the server's close.
private final class SlowClient {
    private let descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try connectLoopback(descriptor, port: port)
    }

    deinit { close(descriptor) }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        let sent = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw TestClientError(description: "send failed: errno \(errno)") }
    }

    /// Whether the server closes the connection within `seconds` (bytes that arrive are read
    /// and dropped).
    func closed(within seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return false }
            var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            guard poll(&descriptors, 1, Int32(left * 1000) + 1) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 || (count < 0 && errno == ECONNRESET) { return true }
        }
    }

    /// Sends one header line every `interval` seconds until the server closes the connection;
    /// the seconds that took, or nil if it was still open after `limit`.
    func sendLinesUntilClosed(every interval: Double, giveUpAfter limit: Double) -> Double? {
        let start = Date()
        var line = 0
        while Date().timeIntervalSince(start) < limit {
            if closed(within: interval) { return Date().timeIntervalSince(start) }
            line += 1
            // A send after the close may fail; the next wait sees the close.
            try? send("X-Slow-\(line): 1\r\n")
        }
        return nil
    }

    /// Reads up to the end of a response's header section (the tests' responses are small).
    func readResponseHead() throws -> String {
        var received: [UInt8] = []
        let deadline = Date().addingTimeInterval(10)
        while !String(decoding: received, as: UTF8.self).contains("\r\n\r\n") {
            guard deadline.timeIntervalSinceNow > 0 else { throw TestClientError(description: "no response head in 10 s") }
            var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
            guard poll(&descriptors, 1, 1000) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw TestClientError(description: "closed before a response") }
            received += chunk[0..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }
}
