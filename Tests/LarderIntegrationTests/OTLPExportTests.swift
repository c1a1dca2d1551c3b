// Span export over OTLP/HTTP through the real binary (built with the OTLP trait, as the test
// command builds it) to a real receiver (scripts/otlp-receiver, which decodes the protobuf
// requests with PyPI's opentelemetry-proto): a /fetch miss in a caller's trace arrives as the
// server span with its lookup, upstream and store children, ids matching what the origin saw
// and what the caller got back. Without the trait, `--otlp-endpoint` is refused at start.

import Foundation
import LarderServiceTesting
import XCTest

final class OTLPExportTests: IntegrationTestCase {
    private let callerTrace = "0af7651916cd43dd8448eb211c80319c"

    #if OTLP
        func testAMissIsExportedAsAServerSpanWithItsLookupUpstreamAndStoreSpans() throws {
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("scripts/otlp-receiver").path
            guard (try? runToEnd(URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", "import opentelemetry.proto"]))?.0 == 0 else {
                throw skipOrFail("PyPI's opentelemetry-proto is not installed (scripts/setup installs it with LARDER_SETUP_TESTS=1)")
            }
            let spansFile = directory.appendingPathComponent("spans.ndjson").path
            let receiver = Process()
            receiver.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            receiver.arguments = ["python3", script, "--port", "0", "--out", spansFile]
            let receiverOut = Pipe()
            receiver.standardOutput = receiverOut
            try receiver.run()
            defer { receiver.terminate() }
            let banner = String(decoding: receiverOut.fileHandleForReading.availableData, as: UTF8.self)
            let receiverPort = try XCTUnwrap(
                banner.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }, banner)

            let (process, errors) = try launch([
                "serve", "--port", "0", "--db", databasePath, "--otlp-endpoint", "http://127.0.0.1:\(receiverPort)/v1/traces"
            ])
            defer {
                process.terminate()
                _ = waitForExit(process)
            }
            let port = try waitForPort(errors)
            let response = try TestConnection(port: port).request(
                "POST", "/fetch", headers: ["traceparent": "00-\(callerTrace)-b7ad6b7169203331-01", "X-Request-Id": "otlp-1"],
                body: Array(#"{"url":"\#(origin.base)/exported?cc=max-age=60"}"#.utf8))
            XCTAssertEqual(response.status, 200, response.text)

            // Spans go out in batches every half second: wait for all four.
            let spans = eventually(timeout: 20, every: 0.05) {
                let text = (try? String(contentsOfFile: spansFile, encoding: .utf8)) ?? ""
                return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            } until: {
                $0.count >= 4
            }
            func span(_ name: String) throws -> [String: Any] {
                try XCTUnwrap(spans.first { $0["name"] as? String == name }, "no \(name) in \(spans.map { $0["name"] ?? "" })")
            }
            let server = try span("POST /fetch")
            XCTAssertEqual(server["kind"] as? String, "SPAN_KIND_SERVER")
            XCTAssertEqual(server["traceId"] as? String, callerTrace)
            XCTAssertEqual(server["parentSpanId"] as? String, "b7ad6b7169203331")
            XCTAssertEqual(server["service"] as? String, "larder")
            let attributes = try XCTUnwrap(server["attributes"] as? [String: Any])
            XCTAssertEqual(attributes["http.route"] as? String, "/fetch")
            XCTAssertEqual(attributes["larder.request_id"] as? String, "otlp-1")
            XCTAssertEqual(attributes["larder.cache.outcome"] as? String, "miss")
            XCTAssertEqual((attributes["http.response.status_code"] as? NSNumber)?.intValue, 200)
            let serverID = try XCTUnwrap(server["spanId"] as? String)
            XCTAssertEqual(response.headers["traceparent"], "00-\(callerTrace)-\(serverID)-01", "the caller got the exported span")

            let upstream = try span("GET")
            XCTAssertEqual(upstream["kind"] as? String, "SPAN_KIND_CLIENT")
            XCTAssertEqual(upstream["parentSpanId"] as? String, serverID)
            let received = try XCTUnwrap(origin.requests("/exported").first)
            XCTAssertEqual(received.headers["traceparent"], "00-\(callerTrace)-\(upstream["spanId"] as? String ?? "")-01")
            XCTAssertEqual(try span("cache lookup")["parentSpanId"] as? String, serverID)
            XCTAssertEqual(try span("cache store")["parentSpanId"] as? String, serverID)
        }
    #else
        func testWithoutTheOTLPTraitAnEndpointIsRefusedAtStart() throws {
            let (process, errors) = try launch([
                "serve", "--port", "0", "--db", databasePath, "--otlp-endpoint", "http://127.0.0.1:4318/v1/traces"
            ])
            XCTAssertTrue(waitForExit(process))
            XCTAssertNotEqual(process.terminationStatus, 0)
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            XCTAssertTrue(message.contains("--traits OTLP"), message)
        }
    #endif
}
