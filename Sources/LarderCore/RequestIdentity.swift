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
    /// request. (Written out when asked for: a proxy hit for a client that sent none, without an
    /// access log, never needs it.)
    public var id: String {
        switch source {
        case .caller(let id): id
        case .made(let value): withUnsafeBytes(of: value.bigEndian) { bytes in HexDigits.string(16) { HexDigits.write(bytes, to: $0) } }
        }
    }

    /// Appends the request id to `out`, as `id` writes it.
    public func appendID(to out: inout [UInt8]) {
        switch source {
        case .caller(let id): out.append(contentsOf: id.utf8)
        case .made(let value): withUnsafeBytes(of: value.bigEndian) { HexDigits.append($0, to: &out) }
        }
    }

    private enum IDSource: Sendable {
        case caller(String)
        case made(UInt64)
    }

    private let source: IDSource
    /// Larder's span for this request (the trace the caller's `traceparent` names, or a new one).
    public let span: TraceSpan
    /// The caller's span, when it sent a valid `traceparent`.
    public let parentSpanID: SpanID?
    /// The caller's `tracestate`, passed on as received (§3.3.1.1: a vendor that does not change
    /// it must not drop it).
    public let traceState: String?
    /// The caller sent an `X-Request-Id` or a `traceparent` (well-formed or not).
    public let callerSentOne: Bool
    /// The index of the event loop that received the request (`LoopSlots`): the ids it makes and
    /// the answers it counts use that loop's counters.
    public let loop: Int

    /// The identity of a request with these header fields (names compared case-insensitively);
    /// its span is recorded by `recorder` when there is one (spans are exported).
    /// `loop`: the event loop's index, whose own counter makes the ids (IdentityRandom).
    public init(headers: [(name: String, value: String)], recorder: (any SpanRecorder)? = nil, loop: Int = 0) {
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
            recorder: recorder, loop: loop)
    }

    public init(
        callerID: String?, traceParent: String?, traceState: String?, recorder: (any SpanRecorder)? = nil, loop: Int = 0
    ) {
        var ids = IdentityRandom(loop: loop)
        self.loop = loop
        callerSentOne = callerID != nil || traceParent != nil
        source = callerID.flatMap { Self.isWellFormedID($0) ? IDSource.caller($0) : nil } ?? .made(ids.next())
        let parent = traceParent.flatMap(Self.parent(from:))
        // §3.3.1.1: a tracestate that cannot be passed on is dropped; the traceparent stands.
        let state = traceState.map { $0.trimmingSpaces }.flatMap { Self.isPassable(traceState: $0) ? $0 : nil }
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

    /// The caller's span from a `traceparent` value (§3.2.2): version 00 exactly as specified; a
    /// later version is read by its first 55 characters when the 56th, if any, is `-` (§3.2.4,
    /// forward compatibility); version ff and anything else is no parent.
    static func parent(from value: String) -> TraceContext? {
        let text = value.trimmingSpaces
        let bytes = Array(text.utf8)
        guard bytes.count >= 55, bytes[0] != UInt8(ascii: "f") || bytes[1] != UInt8(ascii: "f") else { return nil }
        let isZeroZero = bytes[0] == UInt8(ascii: "0") && bytes[1] == UInt8(ascii: "0")
        if isZeroZero {
            return try? TraceContext(traceParentHeaderValue: text)
        }
        guard bytes.count == 55 || bytes[55] == UInt8(ascii: "-"), bytes[0..<2].allSatisfy({ HexDigits.isLowerHex($0) }) else { return nil }
        return try? TraceContext(traceParentHeaderValue: "00" + String(decoding: bytes[2..<55], as: UTF8.self))
    }

    /// A tracestate Larder passes on as received: at most 512 bytes of visible ASCII, spaces and
    /// tabs (the list's grammar is the vendors' to enforce; §3.3.1.3).
    static func isPassable(traceState: String) -> Bool {
        !traceState.isEmpty && traceState.utf8.count <= maxTraceStateBytes
            && traceState.utf8.allSatisfy { (0x20...0x7E).contains($0) || $0 == 0x09 }
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

    /// Whether `name` is one of the fields `upstreamFields` sets, in any case (without lower-casing a copy:
    /// the proxy asks for every field of every request).
    public static func isIdentityField(_ name: String) -> Bool {
        // Most fields fail on their first byte.
        switch name.utf8.first {
        case UInt8(ascii: "t"), UInt8(ascii: "T"): name.caseInsensitiveEquals("traceparent") || name.caseInsensitiveEquals("tracestate")
        case UInt8(ascii: "x"), UInt8(ascii: "X"): name.caseInsensitiveEquals("x-request-id")
        default: false
        }
    }

    /// The fields of Larder's answer: the request id and Larder's span.
    public var responseFields: [(name: String, value: String)] {
        [("X-Request-Id", id), ("traceparent", traceParent)]
    }
}

/// Random enough for ids and unique within the process, without a system call per id: SplitMix64
/// (Steele, Lea and Flood, OOPSLA 2014) over a counter, seeded once from the system's generator.
/// SplitMix64's mix is a bijection, so distinct counts give distinct ids. Not for secrets.
///
/// Each event loop advances a counter of its own, on a cache line of its own: a counter every
/// loop wrote would move its line between the cores on every request. Loop `l`'s counter starts
/// `l·2⁴⁸` steps after the seed, so two loops' ids meet only after 2⁴⁸ ids each.
struct IdentityRandom: RandomNumberGenerator {
    private static let gamma: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// A loop's counter, alone on its cache line (64 bytes).
    private final class LoopCounter: Sendable {
        let counter: Atomic<UInt64>
        private let padding: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0)
        init(_ start: UInt64) { counter = Atomic(start) }
    }

    private static let counters: [LoopCounter] = {
        let seed = UInt64.random(in: .min ... .max)
        return (0..<LoopSlots.count).map { LoopCounter(seed &+ (UInt64($0) << 48) &* gamma) }
    }()

    private let counter: LoopCounter

    init(loop: Int = 0) {
        self.counter = Self.counters[LoopSlots.slot(of: loop)]
    }

    mutating func next() -> UInt64 {
        var z = counter.counter.wrappingAdd(Self.gamma, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Lower-case hex written straight into a string's storage: an id is made for every request, and
/// building it through arrays and interpolation cost more than the rest of a hit's identity.
public enum HexDigits {
    private static let digits: StaticString = "0123456789abcdef"

    /// Appends two digits per byte of `bytes` to `out` (a log line's ids, without a string each).
    public static func append(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        let table = digits.utf8Start
        for byte in bytes {
            out.append(table[Int(byte >> 4)])
            out.append(table[Int(byte & 0x0F)])
        }
    }

    static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// Writes two digits per byte of `bytes` at the start of `out`; returns how many it wrote.
    static func write(_ bytes: UnsafeRawBufferPointer, to out: UnsafeMutableBufferPointer<UInt8>, at offset: Int = 0) -> Int {
        let table = digits.utf8Start
        var index = offset
        for byte in bytes {
            out[index] = table[Int(byte >> 4)]
            out[index + 1] = table[Int(byte & 0x0F)]
            index += 2
        }
        return index - offset
    }

    /// A string of `count` ASCII bytes that `fill` writes (and says how many it wrote).
    static func string(_ count: Int, _ fill: (UnsafeMutableBufferPointer<UInt8>) -> Int) -> String {
        String(unsafeUninitializedCapacity: count, initializingUTF8With: fill)
    }

    /// `traceparent` (version 00) for `context`, as W3C Trace Context §3.2 writes it.
    static func traceParent(_ context: TraceContext) -> String {
        string(55) { out in
            out[0] = UInt8(ascii: "0")
            out[1] = UInt8(ascii: "0")
            out[2] = UInt8(ascii: "-")
            _ = withUnsafeBytes(of: context.traceID.bytes) { write($0, to: out, at: 3) }
            out[35] = UInt8(ascii: "-")
            _ = withUnsafeBytes(of: context.spanID.bytes) { write($0, to: out, at: 36) }
            out[52] = UInt8(ascii: "-")
            _ = withUnsafeBytes(of: context.flags.rawValue) { write($0, to: out, at: 53) }
            return 55
        }
    }
}

/// The per-loop counters (ids, traffic counts, metrics tallies) each event loop writes alone:
/// `count` slots, a loop's index folded onto them (more loops than slots share).
public enum LoopSlots {
    public static let count = 16

    @inline(__always) public static func slot(of loop: Int) -> Int { loop & (count - 1) }
}
