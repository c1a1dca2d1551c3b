// Who a request is, for logs and for the upstreams it reaches: its id (`X-Request-Id`: the
// caller's when well-formed, else one made here) and its place in a distributed trace (W3C Trace
// Context, https://www.w3.org/TR/trace-context/). Larder is one hop of the trace: the caller's
// `traceparent` names the parent span, Larder's span for the request gets an id of its own
// (returned in the response and logged), and each request it sends upstream is a child span with
// a new id (§3.2.2.3: "parent-id" is the id of the span that sends). Without a valid
// `traceparent`, a new trace starts here, not sampled (flags 00): the upstream's logs and
// Larder's still share its trace id.

import Synchronization
public import W3CTraceContext

public struct RequestIdentity: Sendable {
    /// The request id: sent upstream and returned as `X-Request-Id`, in every log line of the
    /// request.
    public let id: String
    /// Larder's span for this request (the trace the caller's `traceparent` names, or a new one).
    public let span: TraceSpan
    /// The caller's span, when it sent a valid `traceparent`.
    public let parentSpanID: SpanID?
    /// The caller's `tracestate`, passed on as received (§3.3.1.1: a vendor that does not change
    /// it must not drop it).
    public let traceState: String?
    /// The caller sent an `X-Request-Id` or a `traceparent` (well-formed or not).
    public let callerSentOne: Bool

    /// The identity of a request with these header fields (names compared case-insensitively);
    /// its span is recorded by `recorder` when there is one (spans are exported).
    public init(headers: [(name: String, value: String)], recorder: (any SpanRecorder)? = nil) {
        var callerID: String?
        var traceParent: String?
        var traceState: [String] = []
        for header in headers {
            if header.name.caseInsensitiveEquals("x-request-id") {
                callerID = header.value
            } else if header.name.caseInsensitiveEquals("traceparent") {
                // Two traceparent fields are one invalid value (§3.2.1): start a new trace.
                traceParent = traceParent == nil ? header.value : ""
            } else if header.name.caseInsensitiveEquals("tracestate") {
                // §3.3.1.1: several fields are one list, joined with commas.
                traceState.append(header.value)
            }
        }
        self.init(
            callerID: callerID, traceParent: traceParent, traceState: traceState.isEmpty ? nil : traceState.joined(separator: ","),
            recorder: recorder)
    }

    public init(callerID: String?, traceParent: String?, traceState: String?, recorder: (any SpanRecorder)? = nil) {
        var ids = IdentityRandom()
        callerSentOne = callerID != nil || traceParent != nil
        id = callerID.flatMap { Self.isWellFormedID($0) ? $0 : nil } ?? Self.newID(using: &ids)
        let state = traceState.map { $0.trimmingSpaces }.flatMap { $0.isEmpty || $0.utf8.count > Self.maxTraceStateBytes ? nil : $0 }
        let parent = traceParent.flatMap { try? TraceContext(traceParentHeaderValue: $0, traceStateHeaderValue: state) }
        // A tracestate without a valid traceparent is discarded with it (§3.3.1.1).
        parentSpanID = parent?.spanID
        self.traceState = parent == nil ? nil : state
        if let recorder {
            // The span's name is its route's, given when it ends.
            span = TraceSpan("request", kind: .server, parent: parent, remote: true, recorder: recorder)
        } else if let parent {
            span = TraceSpan(
                context: TraceContext(traceID: parent.traceID, spanID: .random(using: &ids), flags: parent.flags, state: parent.state))
        } else {
            span = TraceSpan(
                context: TraceContext(traceID: .random(using: &ids), spanID: .random(using: &ids), flags: [], state: TraceState()))
        }
    }

    /// Longest request id taken from a caller.
    public static let maxIDLength = 128
    /// §3.3.1.5: vendors should propagate at least 512 characters of `tracestate`; longer ones
    /// are dropped here rather than cut (a cut list would be malformed).
    public static let maxTraceStateBytes = 512

    /// An id Larder passes on and logs as given: 1 to 128 characters of letters, digits and
    /// `-_.:/+=@`, so it cannot break a log line or a header.
    public static func isWellFormedID(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxIDLength else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                true
            case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "/"),
                UInt8(ascii: "+"), UInt8(ascii: "="), UInt8(ascii: "@"):
                true
            default:
                false
            }
        }
    }

    /// A new request id: 16 lower-case hex digits.
    static func newID(using random: inout IdentityRandom) -> String {
        hex(random.next())
    }

    /// `traceparent` for Larder's span (returned to the caller).
    public var traceParent: String { span.traceParent }

    /// The fields a request sent upstream as `upstreamSpan` (a child of Larder's span, a new
    /// span id each time) carries: the request id, the span and the caller's trace state.
    /// They replace any the caller's own request held (a proxied request's, or a /fetch spec's),
    /// so the upstream sees one trace.
    public func upstreamFields(for upstreamSpan: TraceSpan) -> [HeaderField] {
        var fields = [HeaderField("X-Request-Id", id), HeaderField("traceparent", upstreamSpan.traceParent)]
        if let traceState { fields.append(HeaderField("tracestate", traceState)) }
        return fields
    }

    /// The names `upstreamFields` sets, lower-case.
    public static let upstreamFieldNames: Set<String> = ["x-request-id", "traceparent", "tracestate"]

    /// Whether `name` is one of `upstreamFieldNames`, in any case (without lower-casing a copy:
    /// the proxy asks for every field of every request).
    public static func isIdentityField(_ name: String) -> Bool {
        name.caseInsensitiveEquals("traceparent") || name.caseInsensitiveEquals("tracestate")
            || name.caseInsensitiveEquals("x-request-id")
    }

    /// The fields of Larder's answer: the request id and Larder's span.
    public var responseFields: [(name: String, value: String)] {
        [("X-Request-Id", id), ("traceparent", traceParent)]
    }

    static func hex(_ value: UInt64) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8](repeating: 0, count: 16)
        var rest = value
        for index in stride(from: 15, through: 0, by: -1) {
            bytes[index] = digits[Int(rest & 0xF)]
            rest >>= 4
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Random enough for ids and unique within the process, without a system call per id: SplitMix64
/// (Steele, Lea and Flood, OOPSLA 2014) over one counter every thread advances, seeded once from
/// the system's generator. SplitMix64's mix is a bijection, so distinct counts give distinct ids.
/// Not for secrets.
struct IdentityRandom: RandomNumberGenerator {
    private static let counter = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    mutating func next() -> UInt64 {
        var z = Self.counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
