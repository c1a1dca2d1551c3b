// Request ids and W3C Trace Context through the real server: the caller's X-Request-Id and
// traceparent reach the origin from /fetch, each /batch item, each /chain step and the proxy,
// continued with a span id of their own; the response returns the id and Larder's span; the
// access line carries them with the client, the upstream URL (redacted) and the key prefix. The
// proxy returns them only to a client that sent one.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import XCTest

final class RequestIdentityTests: IntegrationTestCase {
    private let callerTrace = "0af7651916cd43dd8448eb211c80319c"
    private let callerSpan = "b7ad6b7169203331"
    private var traceParent: String { "00-\(callerTrace)-\(callerSpan)-01" }

    /// `traceparent`'s parts: trace id, span id, flags.
    private func parts(_ value: String?, file: StaticString = #filePath, line: UInt = #line) -> (String, String, String) {
        let fields = (value ?? "").split(separator: "-").map(String.init)
        XCTAssertEqual(fields.count, 4, "traceparent \(value ?? "nil")", file: file, line: line)
        guard fields.count == 4 else { return ("", "", "") }
        return (fields[1], fields[2], fields[3])
    }

    func testFetchCarriesTheCallersIdAndTraceUpstreamAndReturnsThem() throws {
        let client = try startLarder().connection()
        let response = try client.request(
            "POST", "/fetch",
            headers: [
                "X-Request-Id": "order-42", "traceparent": traceParent, "tracestate": "vendor=abc", "Content-Type": "application/json"
            ],
            body: Array(#"{"url":"\#(origin.base)/traced?cc=max-age=60"}"#.utf8))
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertEqual(response.headers["x-request-id"], "order-42")
        let (returnedTrace, larderSpan, returnedFlags) = parts(response.headers["traceparent"])
        XCTAssertEqual(returnedTrace, callerTrace, "Larder's span belongs to the caller's trace")
        XCTAssertNotEqual(larderSpan, callerSpan, "with a span id of its own")
        XCTAssertEqual(returnedFlags, "01")

        let received = try XCTUnwrap(origin.requests("/traced").first)
        XCTAssertEqual(received.headers["x-request-id"], "order-42")
        let (upstreamTrace, upstreamSpan, upstreamFlags) = parts(received.headers["traceparent"])
        XCTAssertEqual(upstreamTrace, callerTrace)
        XCTAssertNotEqual(upstreamSpan, callerSpan)
        XCTAssertNotEqual(upstreamSpan, larderSpan, "the upstream request is a child span of Larder's")
        XCTAssertEqual(upstreamFlags, "01")
        XCTAssertEqual(received.headers["tracestate"], "vendor=abc")

        // A hit sends nothing upstream and still returns the id and a span of the caller's trace.
        let hit = try client.request(
            "POST", "/fetch", headers: ["X-Request-Id": "order-43", "traceparent": traceParent],
            body: Array(#"{"url":"\#(origin.base)/traced?cc=max-age=60"}"#.utf8))
        XCTAssertEqual(hit.outcome, "hit")
        XCTAssertEqual(hit.headers["x-request-id"], "order-43")
        XCTAssertEqual(parts(hit.headers["traceparent"]).0, callerTrace)
        XCTAssertEqual(origin.count("/traced"), 1)
    }

    func testWithoutThemOrWithMalformedOnesLarderMakesItsOwn() throws {
        let client = try startLarder().connection()
        let first = try client.request(
            "POST", "/fetch", headers: ["X-Request-Id": "bad id\twith spaces", "traceparent": "00-zz-nope-01"],
            body: Array(#"{"url":"\#(origin.base)/fresh-trace"}"#.utf8))
        XCTAssertEqual(first.status, 200, first.text)
        let id = try XCTUnwrap(first.headers["x-request-id"])
        XCTAssertTrue(id.count == 16 && id.allSatisfy(\.isHexDigit), "a generated id: \(id)")
        let (trace, _, flags) = parts(first.headers["traceparent"])
        XCTAssertNotEqual(trace, callerTrace)
        XCTAssertEqual(flags, "00", "a trace Larder starts is not sampled")
        let received = try XCTUnwrap(origin.requests("/fresh-trace").first)
        XCTAssertEqual(received.headers["x-request-id"], id)
        XCTAssertEqual(parts(received.headers["traceparent"]).0, trace, "the upstream sees the trace Larder started")

        let second = try client.request("GET", "/livez")
        XCTAssertNotEqual(second.headers["x-request-id"], id, "every request gets its own id")
        XCTAssertNotEqual(parts(second.headers["traceparent"]).0, trace)
    }

    func testEachBatchItemAndChainStepIsAChildSpanOfTheCallersTrace() throws {
        let client = try startLarder().connection()
        let batch = try client.request(
            "POST", "/batch", headers: ["X-Request-Id": "batch-1", "traceparent": traceParent],
            body: Array(#"{"requests":[{"id":"a","url":"\#(origin.base)/item-a"},{"id":"b","url":"\#(origin.base)/item-b"}]}"#.utf8))
        XCTAssertEqual(batch.status, 200, batch.text)
        XCTAssertEqual(batch.headers["x-request-id"], "batch-1")
        let a = try XCTUnwrap(origin.requests("/item-a").first)
        let b = try XCTUnwrap(origin.requests("/item-b").first)
        for item in [a, b] {
            XCTAssertEqual(item.headers["x-request-id"], "batch-1")
            XCTAssertEqual(parts(item.headers["traceparent"]).0, callerTrace)
        }
        XCTAssertNotEqual(parts(a.headers["traceparent"]).1, parts(b.headers["traceparent"]).1, "a span per item")

        let chain = try client.request(
            "POST", "/chain", headers: ["traceparent": traceParent],
            body: Array(#"{"steps":[{"id":"one","request":{"url":"\#(origin.base)/step-one"}}]}"#.utf8))
        XCTAssertEqual(chain.status, 200, chain.text)
        let step = try XCTUnwrap(origin.requests("/step-one").first)
        XCTAssertEqual(parts(step.headers["traceparent"]).0, callerTrace)
        XCTAssertEqual(step.headers["x-request-id"], chain.headers["x-request-id"])
    }

    func testTheProxyReplacesTheCallersFieldsWithTheContinuedTrace() throws {
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
        }
        let client = try larder.connection()
        for (index, span) in ["1111111111111111", "2222222222222222"].enumerated() {
            let response = try client.request(
                "GET", "/proxy/origin/p\(index)?cc=max-age=60",
                headers: ["X-Request-Id": "proxy-\(index)", "traceparent": "00-\(callerTrace)-\(span)-01"])
            XCTAssertEqual(response.status, 200, response.text)
            let received = try XCTUnwrap(origin.requests("/p\(index)").first)
            XCTAssertEqual(received.headers["x-request-id"], "proxy-\(index)", "not the first request's, remembered")
            let (trace, upstreamSpan, _) = parts(received.headers["traceparent"])
            XCTAssertEqual(trace, callerTrace)
            XCTAssertNotEqual(upstreamSpan, span, "continued, not passed through")
            XCTAssertEqual(response.headers["x-request-id"], "proxy-\(index)")
            XCTAssertEqual(parts(response.headers["traceparent"]).0, callerTrace)
        }
        // A client that sends neither gets the origin's answer without them (so that identical
        // hits are identical bytes); the origin and the log still get an id and a trace.
        let plain = try client.request("GET", "/proxy/origin/plain?cc=max-age=60")
        XCTAssertEqual(plain.status, 200)
        XCTAssertNil(plain.headers["x-request-id"])
        XCTAssertNil(plain.headers["traceparent"])
        let received = try XCTUnwrap(origin.requests("/plain").first)
        XCTAssertNotNil(received.headers["x-request-id"])
        XCTAssertEqual(parts(received.headers["traceparent"]).2, "00")
    }

    func testARememberedProxyRequestCarriesEachCallersOwnId() throws {
        // The request memo keeps a proxy GET without its caller's identity (from its second
        // sight on): every answer from it, the third request's here, is made for its own caller.
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
        }
        let client = try larder.connection()
        for index in 0..<4 {
            let response = try client.request("GET", "/proxy/origin/remembered?cc=no-store", headers: ["X-Request-Id": "memo-\(index)"])
            XCTAssertEqual(response.status, 200, response.text)
            XCTAssertEqual(response.headers["x-request-id"], "memo-\(index)")
        }
        XCTAssertEqual(origin.requests("/remembered").map { $0.headers["x-request-id"] }, ["memo-0", "memo-1", "memo-2", "memo-3"])
    }

    func testTheAccessLineNamesTheRequestClientUpstreamAndKey() throws {
        let lines = LogLines()
        let client = try startLarder(logLines: lines) { $0.accessLog = true }.connection()
        let response = try client.request(
            "POST", "/fetch", headers: ["X-Request-Id": "logged-1", "traceparent": traceParent],
            body: Array(#"{"url":"\#(origin.base)/logged?token=s3cret&x=1"}"#.utf8))
        XCTAssertEqual(response.status, 200, response.text)
        XCTAssertTrue(lines.waitFor("POST /fetch 200 miss"))
        let line = try XCTUnwrap(lines.all.first { $0.contains("POST /fetch 200 miss") })
        let key = try XCTUnwrap(response.cache["key"] as? String)
        for expected in [
            "request_id=logged-1", "trace_id=\(callerTrace)", "client=127.0.0.1", "route=fetch", "key=\(key.prefix(16))",
            "upstream=\(origin.base)/logged?token=REDACTED&x=1"
        ] {
            XCTAssertTrue(line.contains(expected), "\(expected) in \(line)")
        }
        XCTAssertFalse(line.contains("s3cret"), line)
        XCTAssertTrue(line.contains("bytes="), line)

        // A space in the path cannot pass for a field of the line.
        _ = try client.request("GET", "/x%20request_id=forged%20client=6.6.6.6")
        XCTAssertTrue(lines.waitFor("GET /x%20request_id=forged%20client=6.6.6.6 404"), "\(lines.all)")
    }

    func testAProxiedAnswerCarriesOneIdAndOneTraceparentWhateverTheOriginSent() throws {
        let larder = try startLarder { configuration in
            configuration.upstreams = [NamedUpstream(name: "origin", baseURL: self.origin.base)]
        }
        let client = try larder.connection()
        let target = "/proxy/origin/echoing?cc=max-age=60&h=X-Request-Id:from-origin&h=traceparent:00-\(callerTrace)-1111111111111111-01"
        for attempt in ["first", "hit"] {
            let response = try client.request("GET", target, headers: ["X-Request-Id": "mine-\(attempt)"])
            XCTAssertEqual(response.status, 200, response.text)
            XCTAssertEqual(response.headerValues("x-request-id"), ["mine-\(attempt)"], attempt)
            XCTAssertEqual(response.headerValues("traceparent").count, 1, attempt)
        }
    }
}
