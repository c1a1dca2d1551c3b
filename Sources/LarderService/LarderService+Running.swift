// A started service's parts: made once by `LarderService.start`, in `let`s, and let go of by
// `shutdown`. Nothing here changes after start; a reload changes what the router slot and the
// named upstreams hold, and the engine's limits, each behind its own lock.

import LarderCore
import LarderCurl
import LarderEngine
import LarderHTTP

extension LarderService {
    /// The parts of a running service a reload keeps, and the two places it changes: the router
    /// every listener asks, and the named upstreams warm jobs resolve against.
    struct Wiring: Sendable {
        let engine: FetchEngine
        let tier: MemoryTier
        let store: any OperatedStore
        let loop: LoopDetection
        let metrics: LarderMetrics
        let warmJobs: WarmJobs
        let connections: @Sendable () -> [(name: String, open: Int, limit: Int)]
        let routers: RouterSlot
        let upstreams: Live<[String: NamedUpstream]>
        /// The spans of every request: the ones the service was given, or the OTLP exporter's.
        let spans: (any SpanRecorder)?
        /// The access log's buffers and writer (used while --access-log is on; a reload turns it
        /// on and off).
        let accessLog: AccessLogWriter
        /// The traffic counters over the last minutes (GET /cache/stats/history).
        let history: TrafficHistory
    }

    /// A started service: what a reload rebuilds the router from, the upstream, the listeners
    /// and the span exporter.
    struct Running: Sendable {
        let wiring: Wiring
        let upstream: CurlUpstream
        /// The main listener.
        let server: HTTPServer
        /// The proxy-root listener, when configured.
        let proxyServer: HTTPServer?
        /// The --admin-port listener, when configured.
        let adminServer: HTTPServer?
        /// The OTLP exporter, flushed at shutdown.
        let spanExporter: (any SpanExporting)?

        /// Every listener, the main one first.
        var listeners: [HTTPServer] { [server] + [proxyServer, adminServer].compactMap { $0 } }
    }
}
