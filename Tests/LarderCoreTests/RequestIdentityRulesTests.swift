// RequestIdentity's rules without a server: which caller ids are kept, how a traceparent is
// continued (W3C Trace Context §3.2) and when a new trace starts, and that ids do not repeat.

import LarderCore
import W3CTraceContext
import XCTest

final class RequestIdentityRulesTests: XCTestCase {
    private let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    func testWellFormedCallerIDsAreKeptAndOthersReplaced() {
        for kept in ["a", "order-42", "2f1c:7/x+y=z@host_1.2", String(repeating: "x", count: 128)] {
            XCTAssertEqual(RequestIdentity(callerID: kept, traceParent: nil, traceState: nil).id, kept)
        }
        for refused in ["", "has space", "tab\there", "new\nline", "ünï", "<script>", String(repeating: "x", count: 129)] {
            let id = RequestIdentity(callerID: refused, traceParent: nil, traceState: nil).id
            XCTAssertNotEqual(id, refused)
            XCTAssertEqual(id.count, 16)
            XCTAssertTrue(id.allSatisfy(\.isHexDigit), id)
        }
    }

    func testAValidTraceparentIsContinuedWithNewSpans() {
        let identity = RequestIdentity(callerID: nil, traceParent: parent, traceState: "congo=t61rcWkgMzE")
        XCTAssertEqual(identity.span.context.traceID.description, "4bf92f3577b34da6a3ce929d0e0e4736")
        XCTAssertEqual(identity.parentSpanID?.description, "00f067aa0ba902b7")
        XCTAssertNotEqual(identity.span.context.spanID.description, "00f067aa0ba902b7")
        XCTAssertTrue(identity.traceParent.hasSuffix("-01"), "the caller's sampling decision is kept")

        let first = identity.upstreamFields(for: identity.span.child("GET", kind: .client))
        let second = identity.upstreamFields(for: identity.span.child("GET", kind: .client))
        func value(_ name: String, _ fields: [HeaderField]) -> String? { fields.first { $0.name.lowercased() == name }?.value }
        XCTAssertEqual(value("x-request-id", first), identity.id)
        XCTAssertEqual(value("tracestate", first), "congo=t61rcWkgMzE")
        let upstream = value("traceparent", first) ?? ""
        XCTAssertTrue(upstream.hasPrefix("00-4bf92f3577b34da6a3ce929d0e0e4736-"), upstream)
        XCTAssertFalse(upstream.contains(identity.span.context.spanID.description), "a child span, not Larder's own")
        XCTAssertNotEqual(value("traceparent", first), value("traceparent", second), "a new span per upstream request")
    }

    func testAnInvalidTraceparentStartsANewUnsampledTraceAndDropsTheState() {
        for invalid in [
            "", "garbage", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E473Z-00f067aa0ba902b7-01"
        ] {
            let identity = RequestIdentity(callerID: nil, traceParent: invalid, traceState: "a=b")
            XCTAssertNil(identity.parentSpanID, invalid)
            XCTAssertNil(identity.traceState, "tracestate goes with an invalid traceparent: \(invalid)")
            XCTAssertTrue(identity.traceParent.hasSuffix("-00"), invalid)
            XCTAssertNotEqual(identity.span.context.traceID.description, "4bf92f3577b34da6a3ce929d0e0e4736")
        }
    }

    func testHeaderFieldsAreReadCaseInsensitivelyAndTwoTraceparentsAreNone() {
        let read = RequestIdentity(headers: [("X-REQUEST-ID", "abc"), ("TraceParent", parent), ("tracestate", "a=1"), ("TRACESTATE", "b=2")]
        )
        XCTAssertEqual(read.id, "abc")
        XCTAssertNotNil(read.parentSpanID)
        XCTAssertEqual(read.traceState, "a=1,b=2", "several tracestate fields are one list (§3.3.1.1)")
        let twice = RequestIdentity(headers: [("traceparent", parent), ("traceparent", parent)])
        XCTAssertNil(twice.parentSpanID)
        let long = RequestIdentity(callerID: nil, traceParent: parent, traceState: "a=" + String(repeating: "x", count: 600))
        XCTAssertNil(long.traceState, "longer than 512 bytes: dropped, not cut")
        XCTAssertNotNil(long.parentSpanID)
    }

    func testTraceparentIsWrittenAsTheLibraryWritesIt() {
        for flags in [TraceFlags(rawValue: 0), TraceFlags(rawValue: 1), TraceFlags(rawValue: 0xAB)] {
            var random = SystemRandomNumberGenerator()
            let context = TraceContext(traceID: .random(using: &random), spanID: .random(using: &random), flags: flags, state: TraceState())
            XCTAssertEqual(TraceSpan(context: context).traceParent, context.traceParentHeaderValue)
        }
    }

    func testAnUnpassableTracestateIsDroppedAndTheTraceparentStands() {
        for state in ["A=b", ",,a=b,,", "a=\u{E9}", "a=" + String(repeating: "x", count: 600)] {
            let identity = RequestIdentity(callerID: nil, traceParent: parent, traceState: state)
            XCTAssertEqual(identity.parentSpanID?.description, "00f067aa0ba902b7", state)
            XCTAssertEqual(identity.traceState, Self.passable(state) ? state : nil, state)
        }
    }

    private static func passable(_ state: String) -> Bool {
        state.utf8.count <= 512 && state.utf8.allSatisfy { (0x20...0x7E).contains($0) }
    }

    func testALaterVersionIsReadByItsFirstFieldsAndTrailingSpacesAreIgnored() {
        let later = RequestIdentity(
            callerID: nil, traceParent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", traceState: nil)
        XCTAssertEqual(later.parentSpanID?.description, "00f067aa0ba902b7")
        XCTAssertNil(
            RequestIdentity(callerID: nil, traceParent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", traceState: nil)
                .parentSpanID)
        XCTAssertNil(
            RequestIdentity(callerID: nil, traceParent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", traceState: nil)
                .parentSpanID)
        XCTAssertNil(
            RequestIdentity(callerID: nil, traceParent: parent + "-extra", traceState: nil).parentSpanID, "version 00 is exactly 55")
        XCTAssertNotNil(RequestIdentity(callerID: nil, traceParent: parent + "  ", traceState: nil).parentSpanID)
    }

    func testGeneratedIDsDoNotRepeat() {
        var seen = Set<String>()
        for _ in 0..<50_000 {
            let identity = RequestIdentity(callerID: nil, traceParent: nil, traceState: nil)
            XCTAssertTrue(seen.insert(identity.id).inserted)
        }
    }
}
