// The `larder` executable: parse the command line, build the configuration, run the service,
// stop cleanly on SIGTERM/SIGINT. Kept out of main.swift: in Swift 6, closures inside C
// callbacks written in main.swift are treated as main-actor code.

import ArgumentParser
import Foundation
import LarderCore
import LarderService
import Logging

#if canImport(Glibc)
    import Glibc
#endif

@main
struct Larder: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "larder",
        abstract: "An HTTP caching microservice.",
        version: LarderVersion.string,
        subcommands: [Serve.self, Cache.self, Healthcheck.self]
    )
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve POST /fetch from a persistent SQLite cache.")

    @Option(help: "A YAML or JSON settings file (docs/larder.example.yaml has every key); command-line options override it.")
    var config: String?

    @Option(help: "Address to listen on (env LARDER_HOST; default 127.0.0.1).")
    var host: String?

    @Option(help: "Port to listen on, 0 for any free port (env LARDER_PORT; default 8080).")
    var port: Int?

    @Option(help: "SQLite database file (env LARDER_DB; default data/larder.sqlite).")
    var db: String?

    @Option(
        help:
            "File holding the key secret, at least 32 bytes (env LARDER_SECRET_FILE). Required with a shared store (--store redis…): the same file on every instance, made once with `head -c 32 /dev/urandom | base64 > larder.secret`. With SQLite, default <db>.secret, created when absent."
    )
    var secretFile: String?

    @Option(
        name: .customLong("upstream"), help: "A named upstream, NAME=URL (repeatable); use it from /fetch with \"upstream\" and \"path\".")
    var upstreams: [String] = []

    @Option(help: "Also listen on --proxy-port and proxy every path to this named upstream, at the root.")
    var proxyRoot: String?

    @Option(help: "Port of the proxy-root listener (default 8081).")
    var proxyPort: Int?

    @Option(
        name: .customLong("allow-host"),
        help: "Only fetch from hosts matching this pattern, e.g. api.example.com or *.example.com (repeatable; default any host).")
    var allowHosts: [String] = []

    @Flag(help: "Also refuse upstream addresses in loopback and private ranges.")
    var denyPrivate = false

    @Option(help: "HTTP event loops, a thread each (default 2).")
    var threads: Int?

    @Option(help: "Largest upstream response body in bytes (default 67108864).")
    var maxBodyBytes: Int?

    @Option(help: "Upstream transfers in progress at once; more wait their turn (default 256).")
    var maxUpstreamTransfers: Int?

    @Option(help: "Megabytes of upstream bodies received at once; more waits, except the oldest transfer (default 256).")
    var maxInflightMb: Int?

    @Option(help: "Seconds from accept within which a new connection's first request headers must be complete, however paced (default 10).")
    var headerTimeout: Int?

    @Option(
        name: .customLong("resolve"),
        help:
            "HOST:PORT:ADDRESS[,ADDRESS…]: resolve that name to those addresses instead of through DNS, as curl's --resolve (repeatable); the access rules still check each address."
    )
    var resolve: [String] = []

    @Option(help: "A damaged database file (or one that is not SQLite): fail (default) or rename (move it aside and start empty).")
    var onCorrupt: String?

    @Option(help: "Seconds a client connection may stay idle before it is closed (default 30).")
    var clientTimeout: Int?

    @Option(help: "Connections open at once; more wait in the listen backlog until one closes (default 10000).")
    var maxConnections: Int?

    @Option(help: "Connections open at once from one client address; 0 = no limit (default 1024).")
    var connectionsPerAddress: Int?

    @Option(
        help:
            "Proxied range requests fetch only their range; representations up to this many bytes are then fetched whole in the background (default 0 = never)."
    )
    var rangeFetchOver: Int?

    @Option(help: "Seconds past freshness a stored response answers when the upstream is down or fails (default 0 = off).")
    var staleOnError: Double?

    @Flag(help: "Remove CDN-Cache-Control from proxied responses (Larder is the last cache); by default it is passed on.")
    var stripTargetedCacheControl = false

    @Option(help: "Requests in one POST /batch (default 100).")
    var maxBatch: Int?

    @Option(help: "Steps in one POST /chain (default 50).")
    var maxChainSteps: Int?

    @Option(
        help:
            "Bytes of items one /batch or /chain answer may hold, e.g. 64MiB; past it, items fail with response_too_large (default 64MiB).")
    var maxBatchBytes: String?

    @Option(help: "Variants kept per cache key for responses with Vary (default 16).")
    var maxVariants: Int?

    @Option(
        help:
            "Megabytes of memory for caching: hot entries kept in front of the store, and the request memos; 0 disables both (default 64).")
    var memoryMb: Int?

    @Option(
        help:
            "Of --memory-mb, megabytes of parsed requests remembered by their bytes, so repeated requests skip parsing and keying; 0 disables (default: half of --memory-mb, at most 30)."
    )
    var requestMemoMb: Int?

    @Option(help: "Bytes the cache may hold, e.g. 1GiB or 100MB; least recently used entries are evicted past it (default 1GiB).")
    var maxBytes: String?

    @Option(help: "Largest response stored, e.g. 50MB; larger ones are served, not stored (default 5% of --max-bytes).")
    var maxObjectBytes: String?

    @Option(help: "Entries not written for this long are removed, e.g. 7d or 12h (default 7d).")
    var retention: String?

    @Option(help: "Require 'Authorization: Bearer TOKEN' on every /cache route (or LARDER_ADMIN_TOKEN).")
    var adminToken: String?

    @Option(
        name: .customLong("redact-query"),
        help:
            "Query parameter whose value is kept out of stored URLs, the admin listing and logs (repeatable; default api_key, access_token, token, sig, signature, key; 'none' for none)."
    )
    var redactQuery: [String] = []

    @Option(
        help:
            "The store: sqlite (embedded, the default), redis://[user:password@]host:port[/db] or redis-cluster://host:port,host:port shared by many instances (env LARDER_STORE)."
    )
    var store: String?

    @Option(help: "Prefix of every Redis key (default larder:).")
    var storePrefix: String?

    @Option(help: "Milliseconds a Redis operation may take; slower is a miss (default 250).")
    var storeTimeoutMs: Int?

    @Option(help: "With Redis unreachable at start: fail (default) or pass-through (serve uncached until it returns).")
    var storeFallback: String?

    @Option(help: "Serve the /cache admin routes and /metrics on this port only, not on --port (same --host; 0 = any free port).")
    var adminPort: Int?

    @Option(
        name: .customLong("tag-header"),
        help:
            "Response field whose values tag the stored entry, for purging by tag (repeatable; default Surrogate-Key and Cache-Tag; 'none' for neither)."
    )
    var tagHeaders: [String] = []

    @Option(help: "Require 'Authorization: Bearer TOKEN' on GET /metrics (or LARDER_METRICS_TOKEN).")
    var metricsToken: String?

    @Option(help: "Namespaces with their own label in /metrics; later ones are counted as 'other' (default 20).")
    var metricsNamespaces: Int?

    @Option(help: "Bodies of at least this many bytes are kept as files beside the database and sent with sendfile (default 32768).")
    var bodyFileThreshold: Int?

    @Option(help: "Seconds in-flight requests get to finish on SIGTERM (default 10).")
    var shutdownGrace: Double?

    @Flag(inversion: .prefixedNo, help: "One access-log line per request on stderr (default on).")
    var accessLog: Bool?

    /// Defaults, then the config file, then the environment, then the command line.
    func configuration() throws -> LarderConfiguration {
        var configuration = LarderConfiguration()
        if let config {
            do {
                try ConfigFile.apply(config, to: &configuration)
            } catch {
                throw ValidationError(error.description)
            }
        }
        let environment = ProcessInfo.processInfo.environment
        if let raw = environment["LARDER_HOST"] { configuration.host = raw }
        if let raw = environment["LARDER_PORT"] {
            guard let port = Int(raw) else { throw ValidationError("LARDER_PORT '\(raw)' is not a port number") }
            configuration.port = port
        }
        if let raw = environment["LARDER_DB"] { configuration.databasePath = raw }
        // Set but empty is refused, not read as unset: it would leave the routes open silently.
        for (name, setting) in [
            ("LARDER_ADMIN_TOKEN", \LarderConfiguration.adminToken), ("LARDER_METRICS_TOKEN", \.metricsToken),
            ("LARDER_SECRET_FILE", \.secretPath)
        ] {
            guard let raw = environment[name] else { continue }
            guard !raw.isEmpty else {
                throw ValidationError("\(name) is set but empty: give a value, or unset it (an empty token would leave the routes open)")
            }
            configuration[keyPath: setting] = raw
        }
        if let host { configuration.host = host }
        if let port { configuration.port = port }
        if let db { configuration.databasePath = db }
        if let secretFile { configuration.secretPath = secretFile }
        for entry in upstreams {
            guard let equals = entry.firstIndex(of: "=") else {
                throw ValidationError("--upstream '\(entry)' is not NAME=URL")
            }
            let name = String(entry[..<equals])
            configuration.upstreams.removeAll { $0.name == name }
            configuration.upstreams.append(NamedUpstream(name: name, baseURL: String(entry[entry.index(after: equals)...])))
        }
        if !allowHosts.isEmpty { configuration.allowHosts = allowHosts }
        if let proxyRoot { configuration.proxyRoot = proxyRoot }
        if let proxyPort { configuration.proxyPort = proxyPort }
        if denyPrivate { configuration.denyPrivate = true }
        if let threads { configuration.serverThreads = threads }
        if let maxBodyBytes { configuration.maxUpstreamBodyBytes = maxBodyBytes }
        if let memoryMb { configuration.memoryCapacityBytes = try megabytes(memoryMb, "--memory-mb") }
        if let requestMemoMb { configuration.requestMemoBytes = try megabytes(requestMemoMb, "--request-memo-mb") }
        if let maxUpstreamTransfers { configuration.maxUpstreamTransfers = maxUpstreamTransfers }
        if let maxInflightMb { configuration.maxInflightBodyBytes = try megabytes(maxInflightMb, "--max-inflight-mb") }
        if let headerTimeout { configuration.headerTimeoutSeconds = headerTimeout }
        if stripTargetedCacheControl { configuration.stripTargetedCacheControl = true }
        if let staleOnError { configuration.staleOnErrorSeconds = staleOnError }
        if let rangeFetchOver { configuration.rangeFetchOverBytes = rangeFetchOver }
        if let maxBatch { configuration.maxBatch = maxBatch }
        if let maxChainSteps { configuration.maxChainSteps = maxChainSteps }
        if let maxBatchBytes {
            guard let value = Quantity.bytes(maxBatchBytes) else {
                throw ValidationError("--max-batch-bytes '\(maxBatchBytes)' is not a size (e.g. 64MiB)")
            }
            configuration.maxBatchBytes = value
        }
        if let connectionsPerAddress { configuration.connectionsPerAddress = connectionsPerAddress }
        if let clientTimeout { configuration.clientTimeoutSeconds = clientTimeout }
        if !resolve.isEmpty { configuration.resolve = resolve }
        if let onCorrupt {
            guard ["fail", "rename"].contains(onCorrupt) else { throw ValidationError("--on-corrupt must be fail or rename") }
            configuration.renameCorruptDatabase = onCorrupt == "rename"
        }
        if let maxConnections { configuration.maxConnections = maxConnections }
        if let maxVariants { configuration.maxVariants = maxVariants }
        if let bodyFileThreshold { configuration.bodyFileThresholdBytes = bodyFileThreshold }
        if let adminToken { configuration.adminToken = adminToken }
        if let metricsToken { configuration.metricsToken = metricsToken }
        if let adminPort { configuration.adminPort = adminPort }
        if !redactQuery.isEmpty { configuration.redactQuery = redactQuery == ["none"] ? [] : redactQuery }
        if let raw = environment["LARDER_STORE"], !raw.isEmpty, store == nil { configuration.store = raw }
        if let store { configuration.store = store }
        if let storePrefix { configuration.storePrefix = storePrefix }
        if let storeTimeoutMs { configuration.storeTimeoutMs = storeTimeoutMs }
        if let storeFallback {
            guard ["fail", "pass-through"].contains(storeFallback) else {
                throw ValidationError("--store-fallback must be fail or pass-through")
            }
            configuration.storeFallbackPassThrough = storeFallback == "pass-through"
        }
        if !tagHeaders.isEmpty {
            configuration.tagHeaders = tagHeaders == ["none"] ? [] : tagHeaders.map { $0.lowercased() }
        }
        if let metricsNamespaces { configuration.metricsNamespaces = metricsNamespaces }
        if let maxBytes {
            guard let value = Quantity.bytes(maxBytes) else {
                throw ValidationError("--max-bytes '\(maxBytes)' is not a size (e.g. 1GiB, 100MB)")
            }
            configuration.maxBytes = value
        }
        if let maxObjectBytes {
            guard let value = Quantity.bytes(maxObjectBytes) else {
                throw ValidationError("--max-object-bytes '\(maxObjectBytes)' is not a size")
            }
            configuration.maxObjectBytes = value
        }
        if let retention {
            guard let value = Quantity.seconds(retention) else {
                throw ValidationError("--retention '\(retention)' is not a duration (e.g. 7d, 12h)")
            }
            configuration.retentionSeconds = value
        }
        if let shutdownGrace { configuration.shutdownGraceSeconds = shutdownGrace }
        if let accessLog { configuration.accessLog = accessLog }
        do {
            try configuration.validate()
        } catch {
            throw ValidationError(error.description)
        }
        return configuration
    }

    private func megabytes(_ value: Int, _ option: String) throws -> Int {
        guard (0...(1 << 30)).contains(value) else { throw ValidationError("\(option) \(value) is out of range") }
        return value << 20
    }

    func run() throws {
        // Block the signals before any thread starts, so only `sigwait` below receives them.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGPIPE, SIG_IGN)

        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .info
            return handler
        }
        let logger = Logger(label: "larder")
        let configuration = try configuration()

        let memory = MemoryDiscipline()
        let service = LarderService(configuration: configuration, logger: logger)
        do {
            try service.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
        var received: Int32 = 0
        sigwait(&signals, &received)
        memory.stop()
        logger.info("received signal \(received); shutting down")
        service.shutdown()
    }
}
