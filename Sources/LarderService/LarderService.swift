// Wires the adapters together and runs them: SQLite store, libcurl upstream, fetch engine,
// libmicrohttpd server. Used by the `larder` executable and by the integration tests.

import Dispatch
import Foundation
public import LarderCore
import LarderCurl
public import LarderEngine
import LarderHTTP
import LarderRedis
import LarderSQLite
import LarderSync
import LarderZstd
public import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// The service: made with its configuration, then started (`start` builds every running part
/// once, as a `Running`), reloaded, and shut down. Its parts are never changed in place: what a
/// reload changes lives behind the locks made for it (the configuration, the router slot, the
/// named upstreams), and the started service is one value that `start` sets and `shutdown`
/// clears.
public final class LarderService: Sendable {
    /// The running configuration: the one started with, then each reload's.
    public var configuration: LarderConfiguration { currentConfiguration.withLock { $0 } }
    private let currentConfiguration: Locked<LarderConfiguration>
    let logger: Logger
    /// The started service: nil before `start` and after `shutdown`.
    private let started = Locked<Running?>(nil)
    /// The started service's parts, if it is started.
    var running: Running? { started.withLock { $0 } }

    /// A reload's account: the settings it applied and those whose new values wait for a restart.
    public struct ReloadReport: Sendable {
        public let applied: [String]
        public let keptUntilRestart: [String]
    }

    private static let curlInitialised: Void = CurlUpstream.globalInit()

    /// `clock` drives cache ages and freshness (tests inject one); upstream deadlines always
    /// use the real clock.
    private let clock: Clock
    /// Where spans go: `spans` when given (tests record them), else the OTLP exporter that
    /// `--otlp-endpoint` names; without either, spans are only ids.
    private let givenSpans: (any SpanRecorder)?

    /// Where access-log lines go; nil: standard error, in the configuration's format, at the
    /// logger's level.
    private let accessLogOutput: AccessLogOutput?

    public init(
        configuration: LarderConfiguration, logger: Logger, clock: Clock = .system, spans: (any SpanRecorder)? = nil,
        accessLogOutput: AccessLogOutput? = nil
    ) {
        self.currentConfiguration = Locked(configuration)
        self.logger = logger
        self.clock = clock
        self.givenSpans = spans
        self.accessLogOutput = accessLogOutput
    }

    /// Access-log lines dropped because their output was slower than the requests.
    public var accessLogDropped: Int { running?.wiring.accessLog.dropped ?? 0 }

    /// The port the server listens on (useful when configured as 0).
    public var port: Int { running?.server.port ?? 0 }

    /// Requests the main listener handed to the router so far, by event loop; for tests.
    public var requestsPerLoop: [Int] { running?.server.requestsPerLoop ?? [] }

    /// Requests that joined another request's upstream fetch instead of sending their own.
    public var coalescedCount: Int { running?.wiring.engine.coalescedCount ?? 0 }

    /// The most bytes of upstream bodies being received there ever were at once
    /// (`maxInflightBodyBytes` bounds it, but for one body); for tests.
    public var peakInflightBodyBytes: Int { running?.upstream.peakInflightBodyBytes ?? 0 }

    /// Waits until the SQLite store's writer is idle: what was acknowledged is committed, and the
    /// evictions and sweeps it started are done; for tests. Returns at once on other stores.
    public func waitForIdleStoreWriter() { (running?.wiring.store as? SQLiteCacheStore)?.waitForTrimming() }

    /// The most bytes the SQLite store held at once (right after a commit, before the eviction
    /// that follows it); 0 on other stores or without --max-bytes; for tests.
    public var peakStoredBytes: Int { (running?.wiring.store as? SQLiteCacheStore)?.peakUsedByteCount ?? 0 }

    /// Saves the SQLite store slowed because its writer was behind; 0 on other stores; for tests.
    public var throttledSaveCount: Int { (running?.wiring.store as? SQLiteCacheStore)?.throttledSaves ?? 0 }

    /// Runs `work` on the SQLite store's writer, which commits nothing until it returns: a test
    /// holds the writer up with it, as a stalled disk would. Nothing happens on other stores;
    /// for tests.
    public func onStoreWriter(_ work: @escaping @Sendable () -> Void) { (running?.wiring.store as? SQLiteCacheStore)?.onWriter(work) }

    /// The proxy-root listener's port, when there is one.
    public var proxyPort: Int? { running?.proxyServer?.port }
    /// The --admin-port listener's port (nil without one).
    public var adminPort: Int? { running?.adminServer?.port }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }

    public func start() throws {
        try configuration.validate()
        // Read and checked before anything opens: a bad file stops start-up, naming it.
        let certificates = try ListenerCertificates(configuration)
        for warning in certificates.warnings { logger.warning("\(warning)") }
        // A write to a peer that closed (an origin; a Redis that restarted, which hiredis writes
        // to with write(2) from threads of its own) must fail that write, not end the process,
        // whoever embeds the service (the executable ignores SIGPIPE too; so must the tests).
        signal(SIGPIPE, SIG_IGN)
        _ = Self.curlInitialised
        let secret = try Self.secret(configuration)
        if let exposure = SecretFile.exposure(at: configuration.resolvedSecretPath) { logger.warning("\(exposure)") }
        let exporter = givenSpans == nil ? try SpanExport.exporter(endpoint: configuration.otlpEndpoint, logger: logger) : nil
        let store = try openClaimedStore(secret: secret)
        // Filled by the listeners below as each binds, before it accepts: no upstream connection
        // may reach them, or a /fetch caller could drive this instance's own routes.
        let ownListeners = OwnListeners()
        let redaction = QueryRedaction(names: configuration.redactQuery)
        let upstream = makeUpstream(ownListeners: ownListeners, redaction: redaction)
        upstream.start()
        let loop = LoopDetection(token: LoopDetection.randomToken())
        let (engine, tier) = makeEngine(store: store, upstream: upstream, secret: secret, redaction: redaction, loop: loop)
        // The listeners, for their connection gauges; weak: each server holds the router, which
        // holds the scrape closure.
        let listeners = Locked<[(name: String, server: WeakServer)]>([])
        let metrics = LarderMetrics(namespaceLimit: configuration.metricsNamespaces, startedAt: Date().timeIntervalSince1970)
        engine.traffic.observe(with: metrics)
        let upstreams = Live(Self.upstreamsByName(configuration))
        let warmJobs = makeWarmJobs(engine: engine, store: store, secret: secret, upstreams: upstreams)
        let connections: @Sendable () -> [(name: String, open: Int, limit: Int)] = {
            listeners.withLock { listeners in
                listeners.compactMap { listener in
                    listener.server.server.map { server in
                        let connections = server.connections
                        return (name: listener.name, open: connections.open, limit: connections.limit)
                    }
                }
            }
        }
        let wiring = Wiring(
            engine: engine, tier: tier, store: store, loop: loop, metrics: metrics, warmJobs: warmJobs,
            connections: connections, routers: RouterSlot(), upstreams: upstreams, spans: givenSpans ?? exporter,
            accessLog: AccessLogWriter(
                output: accessLogOutput
                    ?? .standardError(LogControl(level: logger.logLevel, format: configuration.resolvedLogFormat)),
                shards: 3 * configuration.serverThreads),
            history: TrafficHistory(traffic: engine.traffic, clock: clock, interval: configuration.trafficHistorySeconds))
        wiring.routers.set(makeRouter(configuration, wiring))
        warnIfAdminRoutesOpen(configuration)
        if configuration.browserRequestRules.acceptsAnyName {
            logger.warning(
                """
                listening beyond loopback with no --server-name: any name is accepted in Host, so a browser page whose name \
                points here (DNS rebinding) is not refused; name this server with --server-name
                """)
        }
        let servers = makeServers(
            routers: wiring.routers, base: serverConfiguration(store: store, upstream: upstream, accessLog: wiring.accessLog),
            ownListeners: ownListeners,
            certificates: certificates)
        listeners.withLock { listeners in
            listeners = [("main", WeakServer(servers.main))]
            if let proxy = servers.proxy { listeners.append(("proxy", WeakServer(proxy))) }
            if let admin = servers.admin { listeners.append(("admin", WeakServer(admin))) }
        }
        do {
            try servers.main.start()
            try servers.proxy?.start()
            try servers.admin?.start()
        } catch {
            servers.proxy?.stop()
            servers.main.stop()
            upstream.shutdown()
            wiring.accessLog.close()
            store.close()
            exporter?.shutdown(waitingAtMost: 1)
            throw error
        }
        warmJobs.resumeUnfinished()
        let running = Running(
            wiring: wiring, upstream: upstream, server: servers.main, proxyServer: servers.proxy, adminServer: servers.admin,
            spanExporter: exporter)
        started.withLock { $0 = running }
        logListening(running)
        warnOfPlaintextTokens(adminListener: servers.admin ?? servers.main)
    }

    /// The configured store, open; on a shared one, with this instance's secret compared to the
    /// others' (see `RedisCacheStore.claimSecret`).
    private func openClaimedStore(secret: [UInt8]) throws -> any OperatedStore {
        let store = try Self.openStore(configuration, secret: secret, logger: logger)
        if let redis = store as? RedisCacheStore {
            // Instances on one shared store must have the same secret, or they would key the
            // same request differently and split the cache: the first records its fingerprint,
            // the others compare.
            do {
                try redis.claimSecret()
            } catch  where configuration.storeFallbackPassThrough && !redis.storageHealthy {
                logger.warning("cannot compare the secret's fingerprint with Redis's now; it is compared when Redis answers")
            } catch {
                store.close()
                throw ConfigurationError("cannot start on \(redis.addressDisplay): \(error)")
            }
        }
        return store
    }

    /// The libcurl upstream, under the access policy (which refuses Larder's own listeners).
    private func makeUpstream(ownListeners: OwnListeners, redaction: QueryRedaction) -> CurlUpstream {
        let policy = UpstreamAccessPolicy(
            allowHosts: configuration.allowHosts, denyPrivate: configuration.denyPrivate,
            ownListeners: ownListeners)
        return CurlUpstream(
            policy: policy, clock: .system, userAgent: "larder/\(LarderVersion.string)", logger: logger,
            maxTransfers: configuration.maxUpstreamTransfers,
            maxInflightBodyBytes: configuration.maxInflightBodyBytes, resolve: configuration.resolve,
            redaction: redaction)
    }

    /// The fetch engine, over the memory tier in front of `store`.
    private func makeEngine(
        store: any OperatedStore, upstream: CurlUpstream, secret: [UInt8], redaction: QueryRedaction, loop: LoopDetection
    ) -> (FetchEngine, MemoryTier) {
        let limits = Self.limits(configuration, loop: loop)
        let codec = ZstdCodec()
        let tier = MemoryTier(backing: store, capacityBytes: configuration.memoryTierBytes, bodyCodec: codec)
        let redis = store as? RedisCacheStore
        // An acknowledged save that could not be committed leaves memory too.
        (store as? SQLiteCacheStore)?.onEntryDropped { [weak tier] primaryKey in tier?.forget(primaryKey) }
        // Another instance removed entries: this memory tier must not keep serving them.
        redis?.onForget { [weak tier] key in
            if let key { tier?.forget(key) } else { tier?.forgetAll() }
        }
        let engine = FetchEngine(
            store: tier, upstream: upstream, keys: CacheKeyBuilder(secret: secret),
            clock: clock, limits: limits, sharedFlights: redis, bodyCodec: codec, dictionaryStore: store as? DictionaryStore,
            logger: logger)
        redis?.onNamespaceVersion { [weak engine] namespace, version in engine?.namespaces.set(namespace, to: version) }
        return (engine, tier)
    }

    /// The engine's limits a configuration sets (a reload sets them again).
    private static func limits(_ configuration: LarderConfiguration, loop: LoopDetection) -> FetchEngine.Limits {
        var limits = FetchEngine.Limits()
        limits.maxUpstreamBodyBytes = configuration.maxUpstreamBodyBytes
        limits.maxStoredBodyBytes = configuration.resolvedMaxObjectBytes
        limits.staleOnError = configuration.staleOnErrorSeconds
        limits.rangeFetchOver = configuration.rangeFetchOverBytes
        limits.tagHeaders = configuration.tagHeaders
        limits.targetedFields = configuration.targetedCacheControl
        limits.negativeTTL = configuration.negativeTTL
        limits.uncacheableMemory = configuration.uncacheableMemorySeconds
        limits.compression = CompressionRules(minBytes: configuration.compressMinBytes, contentTypes: configuration.compressTypes)
        limits.dictionaries = DictionaryTraining(samples: configuration.compressDictionarySamples)
        limits.redaction = QueryRedaction(names: configuration.redactQuery)
        limits.loopToken = loop.token
        return limits
    }

    private static func upstreamsByName(_ configuration: LarderConfiguration) -> [String: NamedUpstream] {
        Dictionary(configuration.upstreams.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// The warm jobs, resolving named upstreams against the running ones.
    private func makeWarmJobs(
        engine: FetchEngine, store: any OperatedStore, secret: [UInt8], upstreams: Live<[String: NamedUpstream]>
    ) -> WarmJobs {
        let sealing = SpecSealing(secret: secret)
        return WarmJobs(
            engine: engine, store: store, clock: clock,
            retention: WarmJobs.Retention(
                seconds: configuration.warmJobRetentionSeconds, maxFinished: configuration.maxFinishedWarmJobs),
            makeRequest: { spec, path throws(LarderError) in
                try FetchRequest.parse(spec, path: path, upstreams: upstreams.current)
            },
            seal: { sealing.seal($0) }, open: { sealing.open($0) })
    }

    /// The router every listener hands its requests to, built for `configuration` (at start, and
    /// again on each reload).
    private func makeRouter(_ configuration: LarderConfiguration, _ wiring: Wiring) -> Router {
        let upstreamsByName = Self.upstreamsByName(configuration)
        let admin = AdminRoute(
            engine: wiring.engine, upstreams: upstreamsByName, store: wiring.store, tier: wiring.tier,
            traffic: wiring.engine.traffic, clock: clock, token: configuration.adminToken.map { Array($0.utf8) }, metrics: wiring.metrics,
            history: wiring.history)
        let (metrics, store, warmJobs, connections) = (wiring.metrics, wiring.store, wiring.warmJobs, wiring.connections)
        let (accessLog, engine) = (wiring.accessLog, wiring.engine)
        return Router(
            engine: wiring.engine, clock: clock, logger: logger, configuration: configuration,
            upstreams: upstreamsByName, warmJobs: wiring.warmJobs, admin: admin, metrics: wiring.metrics,
            accessLog: configuration.accessLog ? wiring.accessLog : nil,
            health: wiring.store, loop: wiring.loop, spans: wiring.spans,
            scrape: { [weak tier = wiring.tier] memoBytes in
                let connections = connections()
                return tier.map {
                    metrics.scrape(
                        store: store, tier: $0, warmJobs: warmJobs, memoBytes: memoBytes, listeners: connections,
                        accessLogDropped: accessLog.dropped, uncacheable: engine.uncacheableFigures,
                        compression: engine.compressionFigures)
                } ?? []
            })
    }

    private func warnIfAdminRoutesOpen(_ configuration: LarderConfiguration) {
        guard configuration.adminToken == nil else { return }
        if Self.isLoopback(configuration.host) {
            logger.warning(
                """
                the /cache admin routes have no token: every process on this machine may purge, write and read the cache \
                (browser pages are refused by Host, Origin and Sec-Fetch-Site); set --admin-token (or LARDER_ADMIN_TOKEN)
                """)
        } else {
            logger.warning(
                """
                the /cache admin routes are open to anyone who can reach \(configuration.host): \
                set --admin-token (or LARDER_ADMIN_TOKEN)
                """)
        }
    }

    /// Applies `proposed` to the running service: the settings a reload can change take effect
    /// for requests that arrive from now on (those under way finish as they began); the others
    /// keep their running values until a restart, and the report names them. The TLS certificate
    /// files are read again and installed for new connections. Throws, changing nothing, when
    /// `proposed` is not valid, the configuration that would run (`proposed` with the running
    /// values of what takes a restart) is not, or a certificate cannot be used.
    public func reload(_ proposed: LarderConfiguration) throws -> ReloadReport {
        guard let wiring = running?.wiring else { throw ConfigurationError("the service is not running") }
        let current = configuration
        let (new, kept) = try Setting.reload(to: proposed, running: current)
        var applied = Setting.all.filter { $0.isLive && $0.describe(current) != $0.describe(new) }.map(\.key)
        if !applied.contains("upstreams"), current.upstreams != new.upstreams { applied.append("upstreams") }
        // The certificate files are read again (their paths take a restart): a rotation. First,
        // because it is the one step that can fail, and it changes nothing when it does.
        if current.tlsCertificatePath != nil || current.adminTLSCertificatePath != nil {
            try reloadCertificates()
            applied.append("TLS certificates")
        }
        wiring.engine.setLimits(Self.limits(new, loop: wiring.loop))
        wiring.upstreams.set(Self.upstreamsByName(new))
        wiring.routers.set(makeRouter(new, wiring))
        currentConfiguration.withLock { $0 = new }
        if new.adminToken != current.adminToken { warnIfAdminRoutesOpen(new) }
        if current.adminToken != nil, new.adminToken == nil {
            logger.warning("the reload removed the admin token: every /cache route is now open to whoever reaches \(new.host)")
        }
        return ReloadReport(applied: applied, keptUntilRestart: kept)
    }

    /// What every listener shares: host, threads, limits, timeouts, and the answers the server
    /// gives by itself.
    private func serverConfiguration(
        store: any OperatedStore, upstream: CurlUpstream, accessLog: AccessLogWriter
    ) -> HTTPServerConfiguration {
        var serverConfiguration = HTTPServerConfiguration()
        serverConfiguration.host = configuration.host
        serverConfiguration.port = configuration.port
        serverConfiguration.threads = configuration.serverThreads
        serverConfiguration.maxRequestBodyBytes = configuration.maxRequestBodyBytes
        serverConfiguration.drainResponse = HTTPServerResponse(
            status: 503, headers: [("Content-Type", "application/json")],
            body: LarderError(.shuttingDown, "Larder is shutting down; retry on another instance").jsonBody)
        serverConfiguration.headerTimeoutSeconds = configuration.headerTimeoutSeconds
        serverConfiguration.connectionsPerAddress = configuration.connectionsPerAddress
        serverConfiguration.connectionTimeoutSeconds = configuration.clientTimeoutSeconds
        // Always set: the limit's default is LarderConfiguration's, not HTTPServerConfiguration's.
        serverConfiguration.connectionLimit = configuration.maxConnections
        // The body files the store keeps open come out of the connection budget too.
        serverConfiguration.reservedDescriptors += (store as? SQLiteCacheStore)?.keptBodyFileCapacity ?? 0
        // Each event loop runs the upstream transfers of its own requests (CurlUpstream).
        serverConfiguration.loopCompanion = { upstream.loopCompanion() }
        serverConfiguration.rejectResponse = { status, reason in
            let error = status == 501 ? LarderError(.notImplemented, reason) : LarderError.invalid("headers", reason)
            return HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")], body: error.jsonBody)
        }
        let libraryLogger = self.logger
        serverConfiguration.onLibraryMessage = { message in
            libraryLogger.notice("\(message)", metadata: ["source": "libmicrohttpd"])
        }
        if configuration.accessLog {
            serverConfiguration.onReject = { method, path, status, _ in
                AccessLog.writeRefusal(
                    method: method, path: path, status: status, code: status == 501 ? "not_implemented" : "invalid_request",
                    to: accessLog)
            }
        }
        return serverConfiguration
    }

    /// The main listener, and the proxy-root and admin listeners when configured; each records
    /// its address in `ownListeners` as it binds.
    private func makeServers(
        routers: RouterSlot, base: HTTPServerConfiguration, ownListeners: OwnListeners, certificates: ListenerCertificates
    ) -> (main: HTTPServer, proxy: HTTPServer?, admin: HTTPServer?) {
        func registering(_ name: String) -> @Sendable (IPAddress, Int) -> Void {
            { address, port in ownListeners.add(ListenerEndpoint(name: name, address: address, port: port)) }
        }
        // Each listener's loops are numbered on from the one before (main, proxy-root, admin), so
        // what is kept per loop (LoopSlots, the access log's buffers) is not shared between them.
        let threads = base.threads
        var mainConfiguration = base
        mainConfiguration.onListening = registering("main")
        mainConfiguration.tls = certificates.main
        let server = HTTPServer(
            configuration: mainConfiguration,
            handler: ListenerHandler(routers: routers, listener: .main, loops: 0..<threads))
        var proxyServer: HTTPServer?
        if configuration.proxyRoot != nil {
            var proxyConfiguration = mainConfiguration
            proxyConfiguration.port = configuration.proxyPort
            proxyConfiguration.onListening = registering("proxy")
            proxyConfiguration.firstLoopIndex = threads
            proxyServer = HTTPServer(
                configuration: proxyConfiguration,
                handler: ListenerHandler(routers: routers, listener: .proxyRoot, loops: threads..<2 * threads))
        }
        var adminServer: HTTPServer?
        if let adminPort = configuration.adminPort {
            var adminConfiguration = mainConfiguration
            adminConfiguration.port = adminPort
            adminConfiguration.onListening = registering("admin")
            adminConfiguration.tls = certificates.admin
            // Admin requests that fetch (warm jobs) go through the upstream's own thread.
            adminConfiguration.loopCompanion = nil
            adminConfiguration.firstLoopIndex = 2 * threads
            adminServer = HTTPServer(
                configuration: adminConfiguration,
                handler: ListenerHandler(routers: routers, listener: .admin, loops: 2 * threads..<3 * threads))
        }
        return (server, proxyServer, adminServer)
    }

    private func logListening(_ running: Running) {
        let storeDisplay =
            (running.wiring.store as? RedisCacheStore).map { "store \($0.addressDisplay) (Redis, prefix \(configuration.storePrefix))" }
            ?? "database \(configuration.databasePath)"
        logger.info("larder \(LarderVersion.string) listening on \(address(of: running.server)), \(storeDisplay)")
        if let proxyServer = running.proxyServer, let root = configuration.proxyRoot {
            logger.info("proxying every path to upstream '\(root)' on \(address(of: proxyServer))")
        }
        if let adminServer = running.adminServer {
            logger.info("admin routes and metrics on \(address(of: adminServer))")
        }
    }

    /// The instance secret. On a shared store it is the operator's (--secret-file, required
    /// and never created: every instance needs the same one, and it must not live in the store
    /// it protects). On SQLite it is `--secret-file` when given, else `<db>.secret`, created on
    /// first start when absent.
    static func secret(_ configuration: LarderConfiguration) throws -> [UInt8] {
        guard configuration.isSharedStore else {
            // `<db>.secret` lives beside the database: an unwritable directory is told as such.
            if configuration.secretPath == nil { try requireWritableDatabase(at: configuration.databasePath) }
            return try SecretFile.loadOrCreate(at: configuration.resolvedSecretPath)
        }
        guard let path = configuration.secretPath else { throw ConfigurationError(LarderConfiguration.sharedSecretRequired) }
        return try SecretFile.load(at: path)
    }

    /// The configured store: SQLite (the default) or Redis (`--store redis://…`).
    static func openStore(_ configuration: LarderConfiguration, secret: [UInt8], logger: Logger) throws -> any OperatedStore {
        guard configuration.store != "sqlite" else {
            var capacity = StoreCapacity()
            capacity.maxBytes = configuration.maxBytes
            capacity.retention = configuration.retentionSeconds
            capacity.keepStaleFor = configuration.staleOnErrorSeconds
            capacity.namespaceMaxBytes = configuration.namespaceMaxBytes
            try requireWritableDatabase(at: configuration.databasePath)
            let path = configuration.databasePath
            return try SQLiteCacheStore.open(
                path: path, maxVariants: configuration.maxVariants, bodyFileThreshold: configuration.bodyFileThresholdBytes,
                capacity: capacity, logger: logger
            ) { error in
                guard configuration.renameCorruptDatabase else {
                    throw ConfigurationError(
                        "the database \(path) is damaged or not a Larder database (\(error.message)); "
                            + "move it aside, or start with --on-corrupt rename to do so and start empty")
                }
            }
        }
        var settings = RedisCacheStore.Settings()
        settings.prefix = configuration.storePrefix
        settings.timeoutMs = configuration.storeTimeoutMs
        settings.retention = configuration.retentionSeconds
        let require = !configuration.storeFallbackPassThrough
        let store =
            configuration.store.hasPrefix("redis-cluster://")
            ? try RedisCacheStore(
                clusterURL: configuration.store, secret: secret, settings: settings, requireConnection: require,
                logger: logger)
            : try RedisCacheStore(
                address: try RedisAddress(url: configuration.store), secret: secret, settings: settings,
                requireConnection: require, logger: logger)
        if !store.storageHealthy {
            logger.warning(
                """
                Redis at \(store.addressDisplay) is unreachable; \
                serving uncached until it returns (--store-fallback pass-through)
                """)
        }
        return store
    }

    /// Drains (new requests get 503 `shutting_down`), lets in-flight requests finish (up to the
    /// grace period), cancels the rest, resumes every suspended connection, stops the server and
    /// closes the database.
    public func shutdown() {
        guard let running else { return }
        let servers = running.listeners
        for listener in servers { listener.stopAccepting() }
        logger.info("draining: new requests are answered 503 shutting_down")
        let deadline = Date().addingTimeInterval(configuration.shutdownGraceSeconds)
        for listener in servers where !listener.waitForPending(timeout: max(0, deadline.timeIntervalSinceNow)) {
            logger.warning("cancelling \(listener.pendingCount) requests still in flight")
        }
        // Jobs aborted from here on stay pending, to be taken up on the next start.
        running.wiring.warmJobs.stop()
        running.wiring.history.stop()
        running.upstream.shutdown()
        for listener in servers where !listener.waitForPending(timeout: 10) {
            logger.error("requests still unanswered after cancellation: answering them 503 shutting_down (streams cut short) and stopping")
        }
        for listener in servers { listener.stop() }
        running.wiring.accessLog.close()
        running.spanExporter?.shutdown(waitingAtMost: 5)
        running.wiring.store.close()
        started.withLock { $0 = nil }
        logger.info("larder stopped")
    }
}
