// GET /metrics: Prometheus text exposition, through swift-metrics with swift-prometheus.
//
// Each service has its own registry and factory (no global bootstrap, so several services can
// run in one process, as the tests do). Metric objects are made once per label set and kept.
// A request's counts (requests by route and status, lookups by namespace and outcome) go to its
// event loop's own tally and are added to the registry's counters when scraped; its duration is
// recorded in the route's histogram (swift-prometheus's lock, shared by the loops). Label sets
// are bounded: routes and outcomes are fixed lists, statuses are three digits, and namespaces
// past the first `namespaceLimit` seen are folded into `other`.
// Counters whose labels are known in advance (the upstream error codes) are made at start, so
// that each series is there at 0 before its first event (a rate() over a series that appears
// only at its first increment misses that increment). What the database holds (entries, bytes,
// evictions), the memory tier, warm jobs and the process figures are read when scraped; every
// family's `# HELP` line is added then (MetricHelp).

import CMalloc
import CoreMetrics
import Foundation
import LarderCore
import LarderEngine
import LarderSQLite
import LarderSync
import Metrics
import Prometheus

final class LarderMetrics: TrafficObserver, Sendable {
    let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let namespaceLimit: Int
    /// When the process started (process_start_time_seconds).
    private let startedAt: Double

    private struct Key: Hashable {
        let name: String
        let labels: [String]
    }

    private let counters = Locked<[Key: CoreMetrics.Counter]>([:])
    private let gauges = Locked<[Key: CoreMetrics.Gauge]>([:])
    private let namespaces = Locked<Set<String>>([])
    private let upstreams = Locked<[String: UpstreamMetrics]>([:])
    private let reportedAdmission = Locked(AdmissionFigures())
    private let reported = Locked<(evictions: Int, expired: Int, failures: Int, shed: Int, skipped: Int, rejected: Int)>((0, 0, 0, 0, 0, 0))
    /// The access-log drops already added to larder_access_log_dropped_total.
    private let reportedAccessLogDrops = Locked<Int>(0)
    private let reportedUncacheablePasses = Locked<Int>(0)
    private let reportedCompressedStores = Locked<Int>(0)
    private let reportedCompressionSavings = Locked<Int>(0)
    private let reportedDictionaries = Locked<Int>(0)
    /// The CPU seconds already added to process_cpu_seconds_total.
    private let reportedCPUSeconds = Locked<Double>(0)
    private let cpuSeconds: CoreMetrics.FloatingPointCounter

    /// The codes an upstream request fails with (CurlUpstream, RedirectPolicy), each counted
    /// from 0 at start; another code is counted too, from its first occurrence.
    static let upstreamErrorCodes: [LarderError.Code] = [
        .upstreamUnreachable, .upstreamTimeout, .upstreamTooLarge, .upstreamForbidden, .upstreamError, .tooManyRedirects,
        .cancelled, .shuttingDown
    ]

    /// `startedAt`: when the process started, where /proc does not say.
    init(namespaceLimit: Int, startedAt: Double, version: String = LarderVersion.string, revision: String = LarderVersion.revision) {
        var factory = PrometheusMetricsFactory(registry: registry)
        // Request and upstream durations: 100 µs to 30 s.
        factory.defaultDurationHistogramBuckets = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
            .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30)
        ]
        self.factory = factory
        self.namespaceLimit = namespaceLimit
        self.startedAt = ProcessFigures.read()?.startTime ?? startedAt
        cpuSeconds = CoreMetrics.FloatingPointCounter(label: "process_cpu_seconds_total", dimensions: [], factory: factory)
        routeMetrics = Dictionary(
            uniqueKeysWithValues: Self.routes.enumerated().map { index, route in
                (
                    route,
                    RouteMetrics(
                        index: index,
                        duration: CoreMetrics.Timer(
                            label: "larder_request_duration_seconds", dimensions: [("route", route)],
                            factory: factory),
                        ok: CoreMetrics.Counter(
                            label: "larder_requests_total", dimensions: [("route", route), ("status", "200")],
                            factory: factory))
                )
            })
        gauge("larder_build_info", [("version", version), ("revision", revision)]).record(1)
        for code in Self.upstreamErrorCodes { _ = counter("larder_upstream_errors_total", [("code", code.rawValue)]) }
    }

    /// The metric kept under `key` in `table`, made by `make` the first time.
    private func kept<Metric>(_ table: borrowing Locked<[Key: Metric]>, _ key: Key, _ make: () -> Metric) -> Metric {
        table.withLock { metrics in
            if let metric = metrics[key] { return metric }
            let metric = make()
            metrics[key] = metric
            return metric
        }
    }

    private func counter(_ name: String, _ labels: [(String, String)]) -> CoreMetrics.Counter {
        kept(counters, Key(name: name, labels: labels.map(\.1))) { CoreMetrics.Counter(label: name, dimensions: labels, factory: factory) }
    }

    private func gauge(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Gauge {
        kept(gauges, Key(name: name, labels: labels.map(\.1))) { CoreMetrics.Gauge(label: name, dimensions: labels, factory: factory) }
    }

    /// The namespace as a label: its own for the first `namespaceLimit` seen, `other` after.
    private func namespaceLabel(_ namespace: String) -> String {
        namespaces.withLock { seen in
            if seen.contains(namespace) { return namespace }
            guard seen.count < namespaceLimit else { return "other" }
            seen.insert(namespace)
            return namespace
        }
    }

    // MARK: - Recording

    /// Entries a purge removed, and entries a soft purge marked stale.
    func countPurged(removed: Int, invalidated: Int) {
        if removed > 0 { counter("larder_cache_purged_total", [("mode", "hard")]).increment(by: removed) }
        if invalidated > 0 { counter("larder_cache_purged_total", [("mode", "soft")]).increment(by: invalidated) }
    }

    /// A route's metrics: its duration histogram, and its request counter per status (200 made
    /// with the route), to which a scrape adds the loops' tallies.
    private final class RouteMetrics: Sendable {
        /// Its place in `LarderMetrics.routes`: what the loops' tallies count it by.
        let index: Int
        let duration: CoreMetrics.Timer
        let ok: CoreMetrics.Counter
        let byStatus = Locked<[Int: CoreMetrics.Counter]>([:])
        init(index: Int, duration: CoreMetrics.Timer, ok: CoreMetrics.Counter) {
            self.index = index
            self.duration = duration
            self.ok = ok
        }
    }

    /// A namespace's lookup counters, one per outcome (and coalesced), made together.
    private final class LookupCounters: Sendable {
        let byOutcome: [CoreMetrics.Counter]
        init(byOutcome: [CoreMetrics.Counter]) { self.byOutcome = byOutcome }
    }

    static let routes = ["fetch", "batch", "chain", "proxy", "admin", "warm", "metrics", "healthz", "livez", "readyz", "other"]
    private static let outcomeLabels = CacheOutcome.allCases.map(\.rawValue) + ["coalesced"]
    /// Every route's metrics, made at start (the routes are a fixed list): read without a lock.
    private let routeMetrics: [String: RouteMetrics]
    private let lookups = Locked<[String: LookupCounters]>([:])

    private func metrics(forRoute route: String) -> RouteMetrics {
        routeMetrics[route] ?? routeMetrics["other"]!
    }

    /// A namespace label's counters (a namespace's own name, or `other`), made the first time.
    private func lookupCounters(forLabel label: String) -> LookupCounters {
        lookups.withLock { all in
            if let existing = all[label] { return existing }
            let made = LookupCounters(
                byOutcome: Self.outcomeLabels.map { outcome in
                    counter("larder_cache_lookups_total", [("outcome", outcome), ("namespace", label)])
                })
            all[label] = made
            return made
        }
    }

    /// The route a path belongs to, from a fixed list.
    static func route(for path: String) -> String {
        switch path {
        case "/fetch": "fetch"
        case "/batch": "batch"
        case "/chain": "chain"
        case "/healthz": "healthz"
        case "/livez": "livez"
        case "/readyz": "readyz"
        case "/metrics": "metrics"
        default:
            if path.hasPrefix("/cache/warm") {
                "warm"
            } else if path == "/cache" || path.hasPrefix("/cache/") {
                "admin"
            } else if path.hasPrefix("/proxy/") {
                "proxy"
            } else {
                "other"
            }
        }
    }

    // MARK: - Counts kept per event loop

    /// What one event loop's requests add to `larder_requests_total` and
    /// `larder_cache_lookups_total`, kept by the loop (`LoopSlots`) and added to the registry's
    /// counters when scraped: a hit writes only its own loop's memory. The lock is nearly always
    /// its loop's thread's alone; an answer completed on another thread and a scrape take it too.
    /// The duration histograms are shared.
    private final class LoopTally: Sendable {
        struct Counts {
            /// Requests answered with 200, by route index; others by route index and status
            /// (`index << 16 | status`).
            var ok = [Int](repeating: 0, count: LarderMetrics.routes.count)
            var otherStatuses: [Int: Int] = [:]
            /// Lookups by namespace label (in `labelNames`' order), one count per outcome label.
            var lookups: [[Int]] = []
            /// Each namespace label this loop counted, in `lookups`' order, and each namespace's
            /// place there (its label decided once, in the order namespaces are first seen, by
            /// `namespaceLabel`); kept across scrapes, up to `labelsKept` namespaces.
            var labelNames: [String] = []
            var labelIndex: [String: Int] = [:]
        }
        let counts = Locked(Counts())
    }

    /// The namespaces a loop remembers the label of; past them it asks `namespaceLabel` each time.
    static let labelsKept = 1024
    private let tallies: [LoopTally] = (0..<LoopSlots.count).map { _ in LoopTally() }

    /// `loop`: the event loop that received the request (`HTTPServerRequest.loop`).
    func requestFinished(route: String, status: Int, seconds: Double, loop: Int = 0) {
        let metrics = metrics(forRoute: route)
        tallies[LoopSlots.slot(of: loop)].counts.withLock { counts in
            if status == 200 {
                counts.ok[metrics.index] += 1
            } else {
                counts.otherStatuses[metrics.index << 16 | (status & 0xFFFF), default: 0] += 1
            }
        }
        metrics.duration.recordNanoseconds(Int64(max(0, seconds) * 1e9))
    }

    /// The registry's counter for `route` and `status` (200 made with the route).
    private func requestCounter(route: String, status: Int) -> CoreMetrics.Counter {
        let metrics = metrics(forRoute: route)
        guard status != 200 else { return metrics.ok }
        return metrics.byStatus.withLock { byStatus in
            if let existing = byStatus[status] { return existing }
            let made = self.counter("larder_requests_total", [("route", route), ("status", String(status))])
            byStatus[status] = made
            return made
        }
    }

    /// Adds what every loop counted since the last scrape to the registry's counters.
    private func foldTallies() {
        for tally in tallies {
            let (ok, otherStatuses, lookups, labelNames) = tally.counts.withLock { counts in
                defer {
                    counts.ok = [Int](repeating: 0, count: Self.routes.count)
                    counts.otherStatuses = [:]
                    counts.lookups = counts.lookups.map { _ in [Int](repeating: 0, count: Self.outcomeLabels.count) }
                }
                return (counts.ok, counts.otherStatuses, counts.lookups, counts.labelNames)
            }
            for (index, count) in ok.enumerated() where count > 0 {
                requestCounter(route: Self.routes[index], status: 200).increment(by: count)
            }
            for (key, count) in otherStatuses {
                requestCounter(route: Self.routes[key >> 16], status: key & 0xFFFF).increment(by: count)
            }
            for (slot, byOutcome) in lookups.enumerated() {
                let counters = lookupCounters(forLabel: labelNames[slot]).byOutcome
                for (index, count) in byOutcome.enumerated() where count > 0 { counters[index].increment(by: count) }
            }
        }
    }

    func answered(outcome: CacheOutcome?, coalesced: Bool, errorCode: String?, namespace: String, loop: Int) {
        guard let outcome else { return }
        let index: Int
        if coalesced {
            index = 5
        } else {
            // The order of CacheOutcome.allCases (outcomeLabels), without building that array.
            switch outcome {
            case .hit: index = 0
            case .miss: index = 1
            case .stale: index = 2
            case .bypass: index = 3
            case .revalidated: index = 4
            }
        }
        tallies[LoopSlots.slot(of: loop)].counts.withLock { counts in
            let slot: Int
            if let known = counts.labelIndex[namespace] {
                slot = known
            } else {
                let label = namespaceLabel(namespace)
                if let existing = counts.labelNames.firstIndex(of: label) {
                    slot = existing
                } else {
                    slot = counts.labelNames.count
                    counts.labelNames.append(label)
                    counts.lookups.append([Int](repeating: 0, count: Self.outcomeLabels.count))
                }
                if counts.labelIndex.count < Self.labelsKept { counts.labelIndex[namespace] = slot }
            }
            counts.lookups[slot][index] += 1
        }
    }

    /// An upstream's metrics, found by its name alone: an exchange builds no label array and no
    /// status string (this runs on every miss).
    private final class UpstreamMetrics: Sendable {
        let name: String
        let factory: PrometheusMetricsFactory
        let duration: CoreMetrics.Timer
        let byStatus = Locked<[Int: CoreMetrics.Counter]>([:])

        init(name: String, factory: PrometheusMetricsFactory) {
            self.name = name
            self.factory = factory
            duration = CoreMetrics.Timer(label: "larder_upstream_duration_seconds", dimensions: [("upstream", name)], factory: factory)
        }

        func requests(status: Int) -> CoreMetrics.Counter {
            byStatus.withLock { counters in
                if let counter = counters[status] { return counter }
                let counter = CoreMetrics.Counter(
                    label: "larder_upstream_requests_total",
                    dimensions: [("upstream", name), ("status", String(status))], factory: factory)
                counters[status] = counter
                return counter
            }
        }
    }

    func exchanged(upstream: String, status: Int?, errorCode: String?, seconds: Double) {
        if let status {
            let metrics = upstreams.withLock { table in
                if let metrics = table[upstream] { return metrics }
                let metrics = UpstreamMetrics(name: upstream, factory: factory)
                table[upstream] = metrics
                return metrics
            }
            metrics.requests(status: status).increment()
            metrics.duration.recordNanoseconds(Int64(max(0, seconds) * 1e9))
        } else if let errorCode {
            counter("larder_upstream_errors_total", [("code", errorCode)]).increment()
        }
    }

    // MARK: - Scraping

    /// The exposition, after reading what is measured at scrape time (`memoBytes`: what the
    /// router's request memos hold).
    func scrape(
        store: any OperatedStore, tier: MemoryTier, warmJobs: WarmJobs?, memoBytes: Int,
        listeners: [(name: String, open: Int, limit: Int)] = [], accessLogDropped: Int = 0,
        uncacheable: (passes: Int, keys: Int) = (0, 0), compression: (stored: Int, savedBytes: Int, dictionaries: Int) = (0, 0, 0)
    ) -> [UInt8] {
        foldTallies()
        let figures = store.figures
        advance("larder_access_log_dropped_total", to: accessLogDropped, reported: reportedAccessLogDrops)
        advance("larder_uncacheable_passes_total", to: uncacheable.passes, reported: reportedUncacheablePasses)
        gauge("larder_uncacheable_keys").record(uncacheable.keys)
        advance("larder_compressed_stores_total", to: compression.stored, reported: reportedCompressedStores)
        advance("larder_compression_saved_bytes_total", to: compression.savedBytes, reported: reportedCompressionSavings)
        advance("larder_compression_dictionaries_trained_total", to: compression.dictionaries, reported: reportedDictionaries)
        for listener in listeners {
            gauge("larder_http_connections", [("listener", listener.name)]).record(listener.open)
            gauge("larder_http_connection_limit", [("listener", listener.name)]).record(listener.limit)
        }
        // Only configured namespaces: their labels are bounded by the configuration.
        for (name, budget) in figures.namespaceBudgets {
            gauge("larder_namespace_bytes", [("namespace", name)]).record(budget.bytes)
            gauge("larder_namespace_entries", [("namespace", name)]).record(budget.entries)
            gauge("larder_namespace_max_bytes", [("namespace", name)]).record(budget.maxBytes)
            gauge("larder_namespace_evictions", [("namespace", name)]).record(budget.evictions)
        }
        gauge("larder_cache_entries").record(figures.entries)
        gauge("larder_cache_bytes").record(figures.bytes)
        gauge("larder_cache_capacity_bytes").record(figures.capacityBytes ?? 0)
        gauge("larder_cache_eviction_backlog").record(figures.evictionBacklog)
        gauge("larder_storage_healthy").record(store.storageHealthy ? 1 : 0)
        // Counters kept by the store; Prometheus counters advance by what changed since.
        let (evicted, expired, failed, shed, skipped, rejected) = reported.withLock { reported -> (Int, Int, Int, Int, Int, Int) in
            defer {
                reported = (
                    figures.evictions, figures.expiredRemovals, figures.failures, figures.shedWrites, figures.lookupsSkipped,
                    figures.rejectedEntries
                )
            }
            return (
                figures.evictions - reported.evictions, figures.expiredRemovals - reported.expired, figures.failures - reported.failures,
                figures.shedWrites - reported.shed, figures.lookupsSkipped - reported.skipped,
                figures.rejectedEntries - reported.rejected
            )
        }
        counter("larder_cache_evictions_total", []).increment(by: max(0, evicted))
        counter("larder_cache_expired_removals_total", []).increment(by: max(0, expired))
        counter("larder_store_errors_total", []).increment(by: max(0, failed))
        counter("larder_store_writes_shed_total", []).increment(by: max(0, shed))
        counter("larder_store_lookups_skipped_total", []).increment(by: max(0, skipped))
        counter("larder_store_rejected_entries_total", []).increment(by: max(0, rejected))
        if let admission = figures.admission { recordAdmission(admission) }
        gauge("larder_memory_tier_bytes").record(tier.bytes)
        gauge("larder_body_files_open").record(figures.bodyFilesOpen)
        gauge("larder_request_memo_bytes").record(memoBytes)
        var states: [String: Int] = ["queued": 0, "running": 0, "done": 0, "cancelled": 0]
        for job in warmJobs?.list() ?? [] { states[job.state.rawValue, default: 0] += 1 }
        for (state, count) in states { gauge("larder_warm_jobs", [("state", state)]).record(count) }
        recordProcessFigures()
        // glibc's heap: what is allocated (arenas and mmapped blocks) and what is free inside
        // the arenas, so resident memory can be told apart from memory in use (fragmentation).
        let heap = mallinfo2()
        gauge("larder_heap_bytes", [("state", "in_use")]).record(Int(heap.uordblks + heap.hblkhd))
        gauge("larder_heap_bytes", [("state", "free")]).record(Int(heap.fordblks))
        return MetricHelp.adding(to: registry.emitToBuffer())
    }

    /// Advances counter `name` to `total`, a count kept elsewhere, by what changed since the
    /// last scrape (`reported`).
    private func advance(_ name: String, to total: Int, reported: borrowing Locked<Int>) {
        let added = reported.withLock { reported in
            defer { reported = max(reported, total) }
            return total - reported
        }
        counter(name, []).increment(by: max(0, added))
    }

    /// The admission policy's counters (docs/operations.md lists them), advanced by what changed
    /// since the last scrape.
    private func recordAdmission(_ admission: AdmissionFigures) {
        let previous = reportedAdmission.withLock { reported in
            defer { reported = admission }
            return reported
        }
        let counts: [(String, [(String, String)], KeyPath<AdmissionFigures, Int>)] = [
            ("larder_admission_admitted_total", [], \.admitted),
            ("larder_admission_held_total", [], \.held),
            ("larder_admission_rejected_total", [], \.rejected),
            ("larder_admission_promoted_total", [], \.promoted),
            ("larder_admission_frequency_admitted_total", [], \.admittedByFrequency),
            ("larder_admission_frequency_refused_total", [], \.refusedByFrequency),
            ("larder_admission_ghost_hits_total", [], \.ghostHits),
            ("larder_admission_evicted_total", [("queue", "small")], \.evictedFromSmall),
            ("larder_admission_evicted_total", [("queue", "main")], \.evictedFromMain),
            ("larder_admission_reinserted_total", [], \.reinserted)
        ]
        for (name, labels, field) in counts {
            counter(name, labels).increment(by: max(0, admission[keyPath: field] - previous[keyPath: field]))
        }
        gauge("larder_admission_held_entries").record(admission.heldEntriesNow)
        gauge("larder_admission_held_bytes").record(admission.heldBytesNow)
    }

    /// The standard process metrics (ProcessFigures).
    private func recordProcessFigures() {
        gauge("process_start_time_seconds").record(startedAt)
        if let open = ProcessFigures.openDescriptors() { gauge("process_open_fds").record(open) }
        if let limit = ProcessFigures.maxDescriptors() { gauge("process_max_fds").record(limit) }
        guard let figures = ProcessFigures.read() else { return }
        gauge("process_resident_memory_bytes").record(figures.residentBytes)
        gauge("process_virtual_memory_bytes").record(figures.virtualBytes)
        // A counter advances by what was spent since the last scrape.
        let spent = reportedCPUSeconds.withLock { reported in
            defer { reported = max(reported, figures.cpuSeconds) }
            return figures.cpuSeconds - reported
        }
        if spent > 0 { cpuSeconds.increment(by: spent) }
    }
}
