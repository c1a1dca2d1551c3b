// Span export over OTLP/HTTP (`--otlp-endpoint URL`), through swift-otel's tracer: the spans
// Larder makes for each request (TraceSpan) are started and ended on swift-otel's, which batches
// them and sends them to the collector from a background task. swift-otel brings SwiftNIO,
// AsyncHTTPClient and BoringSSL, about six minutes of a clean build on two cores, so it is
// behind the package trait `OTLP` (`swift build --traits OTLP`; the image and the test command
// build with it). A build without the trait refuses `--otlp-endpoint` at start.
//
// swift-otel makes the span ids; Larder reads each span's context back through the W3C
// propagator (the `traceparent` the tracer would inject), so what it returns, logs and sends
// upstream are the exported spans' ids.

import Dispatch
import LarderCore
import Logging
import W3CTraceContext

#if OTLP
    import OTel
    import ServiceLifecycle
    import Tracing
#endif

/// A span exporter that runs beside the service and flushes when it stops.
protocol SpanExporting: SpanRecorder {
    /// Exports what is queued and stops, waiting at most `seconds`.
    func shutdown(waitingAtMost seconds: Double)
}

enum SpanExport {
    /// The exporter for `--otlp-endpoint`, or nil without one.
    static func exporter(endpoint: String?, logger: Logger) throws -> (any SpanExporting)? {
        guard let endpoint else { return nil }
        #if OTLP
            return try OTLPSpans(endpoint: endpoint, logger: logger)
        #else
            throw ConfigurationError(
                "--otlp-endpoint needs a larder built with span export: swift build --traits OTLP (the image has it)")
        #endif
    }
}

#if OTLP
    /// The OTLP/HTTP exporter: swift-otel's tracer, its service run in a task of its own.
    final class OTLPSpans: SpanExporting {
        private let tracer: any Tracer
        private let group: ServiceGroup
        private let running: Task<Void, Never>
        private let logger: Logger

        init(endpoint: String, logger: Logger) throws {
            var configuration = OTel.Configuration.default
            configuration.serviceName = "larder"
            configuration.metrics.enabled = false
            configuration.logs.enabled = false
            configuration.propagators = [.traceContext]
            configuration.diagnosticLogger = .custom(logger)
            configuration.traces.exporter = .otlp
            configuration.traces.otlpExporter.endpoint = endpoint
            configuration.traces.otlpExporter.protocol = .httpProtobuf
            // A span is sent within a second of ending; a collector that is away costs spans,
            // never requests (the queue is bounded and drops).
            configuration.traces.batchSpanProcessor.scheduleDelay = .milliseconds(500)
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            tracer = backend.factory
            group = ServiceGroup(configuration: .init(services: [backend.service], logger: logger))
            self.logger = logger
            let group = self.group
            running = Task.detached {
                do {
                    try await group.run()
                } catch {
                    logger.warning("span export stopped", metadata: ["error": "\(error)"])
                }
            }
        }

        func start(_ name: String, kind: LarderCore.SpanKind, parent: TraceContext?, remote: Bool) -> any RecordedSpan {
            var context = ServiceContext.topLevel
            // The caller's tracestate goes upstream as received (RequestIdentity); the tracer
            // needs only the parent's ids.
            if let parent { tracer.extract(["traceparent": parent.traceParentHeaderValue], into: &context, using: DictionaryCarrier()) }
            let span = tracer.startAnySpan(name, context: context, ofKind: kind.otel)
            var injected: [String: String] = [:]
            tracer.inject(span.context, into: &injected, using: DictionaryCarrier())
            var random = SystemRandomNumberGenerator()
            let own =
                injected["traceparent"].flatMap {
                    try? TraceContext(traceParentHeaderValue: $0, traceStateHeaderValue: injected["tracestate"])
                }
                ?? TraceContext(
                    traceID: parent?.traceID ?? .random(using: &random), spanID: .random(using: &random), flags: parent?.flags ?? [],
                    state: TraceState())
            return OTLPSpan(span: span, context: own)
        }

        func shutdown(waitingAtMost seconds: Double) {
            let done = DispatchSemaphore(value: 0)
            let group = self.group
            let running = self.running
            Task.detached {
                await group.triggerGracefulShutdown()
                await running.value
                done.signal()
            }
            if done.wait(timeout: .now() + seconds) == .timedOut {
                logger.warning("span export did not finish flushing in \(seconds) s")
            }
        }
    }

    private struct OTLPSpan: RecordedSpan {
        let span: any Tracing.Span
        let context: TraceContext

        func end(name: String?, attributes: LarderCore.SpanAttributes, errorType: String?) {
            if let name { span.operationName = name }
            var otel = Tracing.SpanAttributes()
            for (key, value) in attributes { otel[key] = value.otel }
            if let errorType {
                otel["error.type"] = SpanAttribute.string(errorType)
                span.setStatus(SpanStatus(code: .error))
            }
            span.attributes = otel
            span.end()
        }
    }

    /// A [String: String] carrier for the W3C propagator.
    private struct DictionaryCarrier: Extractor, Injector {
        func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
        func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) { carrier[key] = value }
    }

    extension LarderCore.SpanKind {
        fileprivate var otel: Tracing.SpanKind {
            switch self {
            case .server: .server
            case .client: .client
            case .internal: .internal
            }
        }
    }

    extension LarderCore.SpanValue {
        fileprivate var otel: SpanAttribute {
            switch self {
            case .string(let text): .string(text)
            case .int(let number): .int64(Int64(number))
            case .double(let number): .double(number)
            case .bool(let flag): .bool(flag)
            }
        }
    }
#endif
