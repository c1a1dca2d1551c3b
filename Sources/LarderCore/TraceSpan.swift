// Larder's spans (W3C Trace Context ids; OpenTelemetry's model): the server span of a request,
// and under it the cache lookup, the upstream request (a client span, whose id goes upstream in
// `traceparent`) and the store write. Without an exporter (`--otlp-endpoint`), a span is only
// its ids: made here, returned and sent upstream, never recorded, and `child`/`end` cost nothing
// beyond a new span id. With one, the `SpanRecorder` starts and ends real spans (and makes their
// ids): the OTLP adapter in LarderService.

public import W3CTraceContext

/// What kind of span, as OpenTelemetry names them.
public enum SpanKind: Sendable {
    case server, client, `internal`
}

/// A span attribute's value (OpenTelemetry's primitive types).
public enum SpanValue: Sendable, Equatable {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
}

public typealias SpanAttributes = [String: SpanValue]

/// Starts recorded spans; the exporter's side.
public protocol SpanRecorder: Sendable {
    /// A new span under `parent` (the caller's, sent in `traceparent`, when `remote`; else one of
    /// Larder's); a root span (a new trace) without one.
    func start(_ name: String, kind: SpanKind, parent: TraceContext?, remote: Bool) -> any RecordedSpan
}

/// A started span the recorder will export once it ends.
public protocol RecordedSpan: Sendable {
    var context: TraceContext { get }
    /// Ends the span, renamed to `name` when given; `errorType` marks it failed (OpenTelemetry's
    /// `error.type`).
    func end(name: String?, attributes: SpanAttributes, errorType: String?)
}

public struct TraceSpan: Sendable {
    /// The span's ids, flags and trace state.
    public let context: TraceContext
    private let recorded: (any RecordedSpan)?
    private let recorder: (any SpanRecorder)?

    /// A span that is only its ids.
    public init(context: TraceContext) {
        self.context = context
        recorded = nil
        recorder = nil
    }

    /// A span `recorder` starts.
    public init(_ name: String, kind: SpanKind, parent: TraceContext?, remote: Bool, recorder: any SpanRecorder) {
        let span = recorder.start(name, kind: kind, parent: parent, remote: remote)
        context = span.context
        recorded = span
        self.recorder = recorder
    }

    /// Whether it is exported: only then are the lookup and store spans worth making.
    public var isRecorded: Bool { recorded != nil }

    /// A span under this one, in the same trace.
    public func child(_ name: String, kind: SpanKind) -> TraceSpan {
        if let recorder { return TraceSpan(name, kind: kind, parent: context, remote: false, recorder: recorder) }
        var random = IdentityRandom()
        return TraceSpan(
            context: TraceContext(traceID: context.traceID, spanID: .random(using: &random), flags: context.flags, state: TraceState()))
    }

    /// An internal span under this one when spans are recorded; nil otherwise, so that a
    /// request nobody traces makes no span for its lookup or its store write.
    public func recordedChild(_ name: String) -> TraceSpan? {
        recorder == nil ? nil : child(name, kind: .internal)
    }

    /// Ends a recorded span (nothing for one that is only ids).
    public func end(name: String? = nil, _ attributes: @autoclosure () -> SpanAttributes = [:], errorType: String? = nil) {
        recorded?.end(name: name, attributes: attributes(), errorType: errorType)
    }

    /// `traceparent` for this span.
    public var traceParent: String { HexDigits.traceParent(context) }
}
