// The spans of a request through the real server, recorded in memory (the OTLP exporter gets
// the same ones, OTLPExportTests): the server span named by method and route with the HTTP
// server attributes, under the caller's span; under it the cache lookup, the upstream request
// (a client span whose id is the one the origin received in traceparent) and the store write.
// A hit makes no upstream or store span.

import Foundation
import LarderCore
import LarderService
import LarderServiceTesting
import Synchronization
import W3CTraceContext
import XCTest

/// Spans as a recorder sees them, kept once they end.
final class MemorySpans: SpanRecorder {
    struct Ended: Sendable {
        let name: String
        let kind: SpanKind
        let context: TraceContext
        let parentSpanID: String?
        let attributes: SpanAttributes
        let errorType: String?
    }

    let ended = Mutex<[Ended]>([])

    final class Span: RecordedSpan {
        let name: String
        let kind: SpanKind
        let context: TraceContext
        let parentSpanID: String?
        let spans: MemorySpans

        init(name: String, kind: SpanKind, context: TraceContext, parentSpanID: String?, spans: MemorySpans) {
            self.name = name
            self.kind = kind
            self.context = context
            self.parentSpanID = parentSpanID
            self.spans = spans
        }

        func end(name: String?, attributes: SpanAttributes, errorType: String?) {
            let ended = Ended(
                name: name ?? self.name, kind: kind, context: context, parentSpanID: parentSpanID, attributes: attributes,
                errorType: errorType)
            spans.ended.withLock { $0.append(ended) }
        }
    }

    func start(_ name: String, kind: SpanKind, parent: TraceContext?, remote: Bool) -> any RecordedSpan {
        var random = SystemRandomNumberGenerator()
        let context = TraceContext(
            traceID: parent?.traceID ?? .random(using: &random), spanID: .random(using: &random), flags: parent?.flags ?? .sampled,
            state: parent?.state ?? TraceState())
        return Span(name: name, kind: kind, context: context, parentSpanID: parent?.spanID.description, spans: self)
    }

    var all: [Ended] { ended.withLock { $0 } }
}

final class SpanTests: IntegrationTestCase {
    private let callerTrace = "0af7651916cd43dd8448eb211c80319c"
    private let callerSpan = "b7ad6b7169203331"

    func testAMissRecordsTheServerLookupUpstreamAndStoreSpansInTheCallersTrace() throws {
        let spans = MemorySpans()
        let client = try startLarder(spans: spans).connection()
        let response = try client.request(
            "POST", "/fetch", headers: ["traceparent": "00-\(callerTrace)-\(callerSpan)-01", "X-Request-Id": "span-1"],
            body: Array(#"{"url":"\#(origin.base)/spanned?cc=max-age=60&token=s3cret"}"#.utf8))
        XCTAssertEqual(response.status, 200, response.text)
        let all = spans.all
        let server = try XCTUnwrap(all.first { $0.kind == .server }, "\(all.map(\.name))")
        XCTAssertEqual(server.name, "POST /fetch")
        XCTAssertEqual(server.parentSpanID, callerSpan)
        XCTAssertEqual(server.context.traceID.description, callerTrace)
        XCTAssertEqual(response.headers["traceparent"], server.context.traceParentHeaderValue, "the returned span is the recorded one")
        XCTAssertEqual(server.attributes["http.request.method"], .string("POST"))
        XCTAssertEqual(server.attributes["http.route"], .string("/fetch"))
        XCTAssertEqual(server.attributes["url.path"], .string("/fetch"))
        XCTAssertEqual(server.attributes["http.response.status_code"], .int(200))
        XCTAssertEqual(server.attributes["client.address"], .string("127.0.0.1"))
        XCTAssertEqual(server.attributes["larder.request_id"], .string("span-1"))
        XCTAssertEqual(server.attributes["larder.cache.outcome"], .string("miss"))

        let serverID = server.context.spanID.description
        let lookup = try XCTUnwrap(all.first { $0.name == "cache lookup" })
        XCTAssertEqual(lookup.parentSpanID, serverID)
        XCTAssertEqual(lookup.attributes["larder.cache.found"], .bool(false))
        let upstream = try XCTUnwrap(all.first { $0.kind == .client })
        XCTAssertEqual(upstream.name, "GET")
        XCTAssertEqual(upstream.parentSpanID, serverID)
        XCTAssertEqual(upstream.attributes["http.response.status_code"], .int(200))
        XCTAssertEqual(upstream.attributes["server.address"], .string("127.0.0.1"))
        let url = try XCTUnwrap(upstream.attributes["url.full"])
        XCTAssertEqual(url, .string("\(origin.base)/spanned?cc=max-age=60&token=REDACTED"))
        let received = try XCTUnwrap(origin.requests("/spanned").first)
        XCTAssertEqual(received.headers["traceparent"], upstream.context.traceParentHeaderValue, "the origin saw the client span")
        let store = try XCTUnwrap(all.first { $0.name == "cache store" })
        XCTAssertEqual(store.parentSpanID, serverID)
        XCTAssertEqual(store.attributes["larder.cache.stored"], .bool(true))
        XCTAssertTrue(all.allSatisfy { $0.context.traceID.description == callerTrace })

        spans.ended.withLock { $0.removeAll() }
        let hit = try client.request(
            "POST", "/fetch", body: Array(#"{"url":"\#(origin.base)/spanned?cc=max-age=60&token=s3cret"}"#.utf8))
        XCTAssertEqual(hit.outcome, "hit")
        let hitSpans = spans.all
        XCTAssertEqual(Set(hitSpans.map(\.name)), ["POST /fetch", "cache lookup"], "a hit goes nowhere else")
        XCTAssertNil(hitSpans.first { $0.kind == .server }?.parentSpanID, "a new trace for a caller that sent none")
    }

    func testAnUpstreamFailureMarksTheClientAndServerSpans() throws {
        let spans = MemorySpans()
        let client = try startLarder(spans: spans).connection()
        let response = try client.fetch(["url": "http://127.0.0.1:1/refused"])
        XCTAssertEqual(response.status, 502, response.text)
        let upstream = try XCTUnwrap(spans.all.first { $0.kind == .client })
        XCTAssertEqual(upstream.errorType, "upstream_unreachable")
        let server = try XCTUnwrap(spans.all.first { $0.kind == .server })
        XCTAssertEqual(server.errorType, "502")
        XCTAssertEqual(server.attributes["error.type"], .string("upstream_unreachable"))
    }
}
