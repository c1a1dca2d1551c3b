// Larder's configuration: one Sendable value, built once by the executable (or a test) and
// passed down. Every field has a documented default and unit.

public import LarderCore
import LarderRedis
public import Logging

public struct LarderConfiguration: Sendable {
    /// Address to listen on.
    public var host: String = "127.0.0.1"
    /// Port to listen on; 0 picks a free one.
    public var port: Int = 8080
    /// The SQLite file (created with its directory when absent).
    public var databasePath: String = "data/larder.sqlite"
    /// The file holding the instance secret, which keys the cache-key HMAC, seals warm jobs and
    /// authenticates a shared store's entries (at least 32 bytes; see `SecretFile`). Required
    /// with a shared store, and never created then; with SQLite, nil = `<database>.secret`,
    /// created on first start.
    public var secretPath: String?
    /// Named upstreams, usable from /fetch as `"upstream": NAME, "path": …`.
    public var upstreams: [NamedUpstream] = []
    /// Serve a second listener where every path is proxied to this named upstream, at the root
    /// (deployment in front of one origin, as Varnish or nginx are deployed).
    public var proxyRoot: String?
    /// Port of the proxy-root listener (same host); 0 picks a free one.
    public var proxyPort: Int = 8081
    /// Host patterns Larder may fetch from ("api.example.com", "*.example.com"); empty = any.
    public var allowHosts: [String] = []
    /// Also refuse loopback and private address ranges upstream.
    public var denyPrivate: Bool = false
    /// Names this server answers to in `Host` ("larder.internal", "*.example.com"), beside IP
    /// literals and localhost: a browser page whose own name points here (DNS rebinding) is
    /// refused. Empty: loopback literals and localhost when bound to loopback, any name otherwise.
    public var serverNames: [String] = []
    /// HTTP event loops per listener, a thread each (2 or more).
    public var serverThreads: Int = 2
    /// Largest /fetch request body, bytes.
    public var maxRequestBodyBytes: Int = 1 << 20
    /// Largest upstream response body, bytes (larger → `upstream_too_large`); at most
    /// 1,000,000,000 (SQLite's largest value).
    public var maxUpstreamBodyBytes: Int = 64 << 20
    /// Upstream transfers in progress at once; more wait their turn (their deadlines run).
    public var maxUpstreamTransfers: Int = 256
    /// Bytes of upstream bodies being received at once; a transfer that would go over waits
    /// (paused) until others finish, except the oldest, so one always progresses.
    public var maxInflightBodyBytes: Int = 256 << 20
    /// The proxy removes CDN-Cache-Control from the responses it passes on: for deployments where
    /// Larder is the last (CDN-class) cache before clients. By default it is passed on (RFC 9213).
    public var stripTargetedCacheControl = false
    /// The targeted Cache-Control fields Larder reads, first valid wins (RFC 9213 §2.2; lower-case).
    public var targetedCacheControl: [String] = CacheRules.defaultTargetedFields
    /// Pass Larder's own targeted fields (all of `targetedCacheControl` but CDN-Cache-Control) on
    /// to the proxy's clients; by default they are removed, being meant for this cache alone.
    public var passOwnCacheControl = false
    /// The proxy's Cache-Status carries the cache key (RFC 9211 §2.7).
    public var cacheStatusKey = false
    /// Negative-caching lifetimes by status (`--negative-ttl 404=30s`).
    public var negativeTTL = NegativeTTL()
    /// Seconds a key whose answer could not be stored is remembered so (its misses then go
    /// upstream at once, in parallel); 0: off.
    public var uncacheableMemorySeconds: Double = 120
    /// Seconds past freshness a stored response answers when the upstream cannot be reached,
    /// times out or answers 500/502/503/504 (RFC 9111 §4.2.4), unless the response forbids
    /// serving stale; 0 = off (only stale-if-error). Named upstreams may set their own.
    public var staleOnErrorSeconds: Double = 0
    /// Range requests through the proxy fetch only their range; a representation up to this
    /// many bytes is then fetched whole in the background (so small objects end up stored
    /// whole); 0 = never.
    public var rangeFetchOverBytes: Int = 0
    /// Requests in one POST /batch.
    public var maxBatch: Int = 100
    /// Steps in one POST /chain.
    public var maxChainSteps: Int = 50
    /// Bytes of rendered items one /batch or /chain answer may hold; past it, items fail with
    /// `response_too_large` (AnswerBudget).
    public var maxBatchBytes: Int = AnswerBudget.defaultLimit
    /// Seconds from accept by which a new connection's first header section must be complete,
    /// however it is paced (a kept-alive one has the client timeout plus this for its next).
    public var headerTimeoutSeconds: Int = 10
    /// Seconds a client connection may stay idle (no bytes received while Larder waits for
    /// them) before it is closed: slow or stalled clients do not hold a connection.
    public var clientTimeoutSeconds: Int = 30
    /// Connections open at once on each listener (lowered at start to what the open-file limit
    /// allows); more wait in the listen backlog until one closes. This is the one default: the
    /// service always passes it to the server, whose own `connectionLimit` default is not used.
    public var maxConnections: Int = 10_000
    /// Connections open at once from one client address (0 = no limit).
    public var connectionsPerAddress: Int = 1024
    /// Variants kept per cache key for responses with Vary; the oldest are replaced.
    public var maxVariants: Int = 16
    /// Bytes of memory for caching, all told: hot entries kept in front of the store (the
    /// memory tier) and parsed requests remembered by their bytes (the request memos). 0 turns
    /// both off.
    public var memoryCapacityBytes: Int = 64 << 20
    /// The request memos' share of `memoryCapacityBytes` (estimated bytes, over all of them; see
    /// `RequestMemoBudgets`); nil: half of it, at most 30 MiB. 0 turns them off.
    public var requestMemoBytes: Int?

    /// What the request memos get: the setting, or half the memory, at most 30 MiB.
    public var effectiveRequestMemoBytes: Int { requestMemoBytes ?? min(30 << 20, memoryCapacityBytes / 2) }
    /// What the memory tier gets: the rest.
    public var memoryTierBytes: Int { max(0, memoryCapacityBytes - effectiveRequestMemoBytes) }
    /// Bodies at least this large are kept as files beside the database and sent with sendfile.
    public var bodyFileThresholdBytes: Int = 32 << 10
    /// On SIGTERM, seconds to let in-flight requests finish before they are cancelled.
    public var shutdownGraceSeconds: Double = 10
    /// One line per request on stderr.
    public var accessLog: Bool = true
    /// `text` or `json` (LogFormat).
    public var logFormat: String = "text"
    /// The least severe level logged: trace, debug, info, notice, warning, error or critical.
    public var logLevel: String = "info"
    /// Where spans are exported over OTLP/HTTP (a collector's /v1/traces URL); nil: not exported.
    public var otlpEndpoint: String?
    /// When set, every /cache route requires `Authorization: Bearer <token>`.
    public var adminToken: String?
    /// When set, GET /metrics requires `Authorization: Bearer <token>`.
    public var metricsToken: String?
    /// Namespaces with their own label in /metrics; later ones are counted as `other`.
    public var metricsNamespaces: Int = 20
    /// Bytes the store may hold (bodies, body files and metadata); LRU eviction past it.
    public var maxBytes: Int = 1 << 30
    /// Largest response stored; nil: 5% of `maxBytes` (NSURLCache's rule), at most the largest body.
    public var maxObjectBytes: Int?
    /// Seconds after which an entry not written since is removed.
    public var retentionSeconds: Double = 7 * 86_400
    /// Seconds a finished warm job (done or cancelled) is kept, readable, before it is removed.
    public var warmJobRetentionSeconds: Double = 86_400
    /// Finished warm jobs kept at most; past it, the oldest finished are removed first.
    public var maxFinishedWarmJobs: Int = 1000
    /// `HOST:PORT:ADDRESS[,ADDRESS…]`: those names resolve to those addresses instead of through
    /// DNS (curl's --resolve); the upstream access policy still checks every address.
    public var resolve: [String] = []
    /// A database file that is damaged or not SQLite: stop with an error (false), or move it
    /// aside and start empty (`--on-corrupt rename`).
    public var renameCorruptDatabase = false
    /// Query parameters whose values are kept out of stored URLs, the admin listing and logs.
    public var redactQuery: [String] = QueryRedaction.defaultNames
    /// `sqlite` (the embedded store, the default) or `redis://[user:password@]host:port[/db]`.
    public var store: String = "sqlite"
    /// Prefix of every Redis key (several deployments can share one Redis).
    public var storePrefix: String = "larder:"
    /// With Redis unreachable at start: start anyway and serve uncached until it returns.
    public var storeFallbackPassThrough = false
    /// GET /readyz answers 200 while the store is degraded, instead of 503 while it fails (for a
    /// store every instance shares, whose loss would take them all out of rotation at once).
    public var readyWhileDegraded = false
    /// Milliseconds a Redis operation may take; slower is a miss, not a stall.
    public var storeTimeoutMs: Int = 250
    /// Response fields whose values tag the stored entry (lower-case); never passed on by /proxy.
    public var tagHeaders: [String] = CacheTags.defaultHeaderNames
    /// Seconds between the readings of the traffic counters GET /cache/stats/history keeps (ten
    /// minutes of them); set only from Swift (tests read it faster).
    public var trafficHistorySeconds: Double = 5
    /// Bytes a namespace may hold at most (SQLite store), by namespace.
    public var namespaceBudgets = NamespaceBudgets()
    public var namespaceMaxBytes: [String: Int] {
        get { namespaceBudgets.maxBytes }
        set { namespaceBudgets.maxBytes = newValue }
    }
    /// Stored bodies of these types and at least this size are compressed at rest (CompressionRules).
    public var compressMinBytes = CompressionRules.defaultMinBytes
    public var compressTypes = CompressionRules.defaultContentTypes
    /// Bodies a namespace's compression dictionary is trained from (DictionaryTraining); 0: none.
    public var compressDictionarySamples = DictionaryTraining.defaultSamples
    /// When set, /cache routes and /metrics are served on this port only (0: any free port),
    /// on the same host; nil: on the main port.
    public var adminPort: Int?
    /// PEM certificate (chain) and private key files: every listener serves HTTPS with them
    /// (the admin listener with its own pair when one is given). Both or neither; read at start
    /// and again by `LarderService.reloadCertificates()`.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// The admin listener's own certificate and key (it may be reached by another name, or
    /// certified by another CA, than the listeners applications call); nil: `tlsCertificatePath`
    /// and `tlsKeyPath`. Needs `adminPort`.
    public var adminTLSCertificatePath: String?
    public var adminTLSKeyPath: String?

    /// The largest response stored.
    public var resolvedMaxObjectBytes: Int {
        min(maxObjectBytes ?? maxBytes / 20, maxUpstreamBodyBytes)
    }

    public init() {}

    /// SQLite's default SQLITE_MAX_LENGTH: no blob can be larger.
    public static let maxBodyBytesLimit = 1_000_000_000

    public var resolvedSecretPath: String { secretPath ?? databasePath + ".secret" }

    /// Whether the store is shared by many instances (Redis, Redis Cluster).
    public var isSharedStore: Bool { store != "sqlite" }

    /// What a browser may not send to the routes that act on the cache or read it.
    public var browserRequestRules: BrowserRequestRules {
        BrowserRequestRules(serverNames: serverNames, boundToLoopback: LarderService.isLoopback(host))
    }

    static let sharedSecretRequired =
        "a shared store needs a secret file, the same for every instance and kept out of Redis: "
        + "make one with `head -c 32 /dev/urandom | base64 > larder.secret` and give it with --secret-file larder.secret "
        + "(or LARDER_SECRET_FILE, or secretFile in the config file)"

    /// Checks values a user typed; throws with the option at fault.
    public func validate() throws(ConfigurationError) {
        guard (0...65535).contains(port) else { throw ConfigurationError("port \(port) is out of range 0–65535") }
        guard !databasePath.isEmpty else { throw ConfigurationError("the database path is empty") }
        guard serverThreads >= 2 else { throw ConfigurationError("at least 2 server threads are needed") }
        guard (1...1024).contains(maxVariants) else { throw ConfigurationError("max variants must be 1 to 1024") }
        guard memoryCapacityBytes >= 0 else { throw ConfigurationError("memory capacity must be 0 or more") }
        if let requestMemoBytes {
            guard requestMemoBytes >= 0 else { throw ConfigurationError("request memo budget must be 0 or more") }
            guard requestMemoBytes <= memoryCapacityBytes else {
                throw ConfigurationError("the request memos' budget (--request-memo-mb) is part of --memory-mb and cannot exceed it")
            }
        }
        for (name, token) in [("admin", adminToken), ("metrics", metricsToken)] {
            if token?.isEmpty == true {
                throw ConfigurationError("the \(name) token is empty: give a token, or leave the setting out to run without one")
            }
            if let token, !token.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) {
                throw ConfigurationError("the \(name) token must be 1 or more printable ASCII characters, no spaces")
            }
        }
        guard (0...10_000).contains(metricsNamespaces) else { throw ConfigurationError("metrics namespaces must be 0 to 10000") }
        guard LogFormat(rawValue: logFormat) != nil else { throw ConfigurationError("log format must be text or json") }
        if let otlpEndpoint, !(otlpEndpoint.hasPrefix("http://") || otlpEndpoint.hasPrefix("https://")) {
            throw ConfigurationError("the OTLP endpoint must be an http:// or https:// URL, such as http://collector:4318/v1/traces")
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ConfigurationError("log level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard maxBytes >= 1 << 20 else { throw ConfigurationError("max bytes must be at least 1 MiB") }
        if let maxObjectBytes, !(1...maxBytes).contains(maxObjectBytes) {
            throw ConfigurationError("max object bytes must be 1 to max bytes")
        }
        guard retentionSeconds.isFinite, retentionSeconds >= 60 else { throw ConfigurationError("retention must be at least 60 seconds") }
        guard warmJobRetentionSeconds.isFinite, warmJobRetentionSeconds >= 60 else {
            throw ConfigurationError("warm job retention must be at least 60 seconds")
        }
        guard (1...100_000).contains(maxFinishedWarmJobs) else { throw ConfigurationError("max finished warm jobs must be 1 to 100000") }
        if store != "sqlite" {
            if store.hasPrefix("redis-cluster://") {
                do { _ = try RedisCluster(url: store, timeoutMs: storeTimeoutMs) } catch { throw ConfigurationError(error.description) }
            } else {
                guard store.hasPrefix("redis://") || store.hasPrefix("rediss://") else {
                    throw ConfigurationError(
                        "store '\(AddressRedaction.redacted(store))' must be sqlite, redis://host:port "
                            + "or redis-cluster://host:port,host:port")
                }
                do { _ = try RedisAddress(url: store) } catch { throw ConfigurationError(error.description) }
            }
        }
        if isSharedStore, secretPath == nil { throw ConfigurationError(Self.sharedSecretRequired) }
        if let secretPath, secretPath.isEmpty { throw ConfigurationError("the secret file path is empty") }
        guard !storePrefix.isEmpty, storePrefix.utf8.count <= 64, !storePrefix.contains("{"), !storePrefix.contains("}") else {
            throw ConfigurationError("the store prefix must be 1 to 64 characters without braces")
        }
        guard (1...60_000).contains(storeTimeoutMs) else { throw ConfigurationError("store timeout must be 1 to 60000 ms") }
        for name in serverNames where BrowserRequestRules.split(authority: name.hasPrefix("*.") ? String(name.dropFirst(2)) : name) == nil {
            throw ConfigurationError("server name '\(name)' is not a host name")
        }
        for name in tagHeaders where !HTTPToken.isValidName(name) {
            throw ConfigurationError("tag header '\(name)' is not a valid header name")
        }
        guard uncacheableMemorySeconds.isFinite, (0...86_400).contains(uncacheableMemorySeconds) else {
            throw ConfigurationError("uncacheable memory must be 0 (off) to 1 day")
        }
        for (name, bytes) in namespaceMaxBytes {
            if let refusal = FetchRequest.namespaceRefusal(name) { throw ConfigurationError("namespace budget: a namespace \(refusal)") }
            guard bytes >= 1 << 20 else { throw ConfigurationError("the budget of namespace '\(name)' must be at least 1 MiB") }
        }
        if !namespaceMaxBytes.isEmpty, isSharedStore {
            throw ConfigurationError("namespace budgets (--namespace-max-bytes) apply to the SQLite store; on Redis, memory is Redis's own")
        }
        guard (0...Self.maxBodyBytesLimit).contains(compressMinBytes) else {
            throw ConfigurationError("compress min bytes must be 0 (never) to \(Self.maxBodyBytesLimit)")
        }
        guard (0...DictionaryTraining.maxSamples).contains(compressDictionarySamples) else {
            throw ConfigurationError("compress dictionary samples must be 0 (no dictionaries) to \(DictionaryTraining.maxSamples)")
        }
        for pattern in compressTypes {
            if let refusal = CompressionRules.refusal(pattern: pattern) { throw ConfigurationError("compress type \(refusal)") }
        }
        for name in targetedCacheControl where !HTTPToken.isValidName(name) || name == "cache-control" {
            throw ConfigurationError("targeted cache-control field '\(name)' is not a valid header name other than Cache-Control")
        }
        if let adminPort {
            guard (0...65535).contains(adminPort) else { throw ConfigurationError("admin port \(adminPort) is out of range 0–65535") }
            guard adminPort == 0 || (adminPort != port && (proxyRoot == nil || adminPort != proxyPort)) else {
                throw ConfigurationError("the admin port must differ from the port and the proxy port")
            }
        }
        try validateTLS()
        guard bodyFileThresholdBytes >= 1 else { throw ConfigurationError("body file threshold must be at least 1 byte") }
        guard (1...Self.maxBodyBytesLimit).contains(maxUpstreamBodyBytes) else {
            throw ConfigurationError("max body bytes must be 1 to \(Self.maxBodyBytesLimit) (SQLite's largest value)")
        }
        guard (1...65_536).contains(maxUpstreamTransfers) else { throw ConfigurationError("max upstream transfers must be 1 to 65536") }
        guard maxInflightBodyBytes >= 1 << 20 else { throw ConfigurationError("max in-flight body bytes must be at least 1 MiB") }
        guard (1...3600).contains(headerTimeoutSeconds) else { throw ConfigurationError("header timeout must be 1 to 3600 seconds") }
        guard staleOnErrorSeconds.isFinite, staleOnErrorSeconds >= 0 else {
            throw ConfigurationError("stale-on-error must be 0 or more seconds")
        }
        guard rangeFetchOverBytes >= 0 else { throw ConfigurationError("range-fetch-over must be 0 or more bytes") }
        guard (1...10_000).contains(maxBatch) else { throw ConfigurationError("max batch must be 1 to 10000") }
        guard (1...1_000).contains(maxChainSteps) else { throw ConfigurationError("max chain steps must be 1 to 1000") }
        guard maxBatchBytes >= 1 else { throw ConfigurationError("max batch bytes must be at least 1") }
        for entry in resolve {
            let parts = entry.split(separator: ":", maxSplits: 2)
            guard parts.count == 3, !parts[0].isEmpty, Int(parts[1]).map({ (1...65535).contains($0) }) == true, !parts[2].isEmpty else {
                throw ConfigurationError("resolve entry '\(entry)' must be HOST:PORT:ADDRESS[,ADDRESS…]")
            }
        }
        guard (1...86_400).contains(clientTimeoutSeconds) else { throw ConfigurationError("client timeout must be 1 to 86400 seconds") }
        guard (16...1_000_000).contains(maxConnections) else { throw ConfigurationError("max connections must be 16 to 1000000") }
        guard connectionsPerAddress >= 0 else { throw ConfigurationError("connections per address must be 0 or more") }
        var seen: Set<String> = []
        for upstream in upstreams {
            guard seen.insert(upstream.name).inserted else { throw ConfigurationError("upstream '\(upstream.name)' is defined twice") }
            do {
                try upstream.validate()
            } catch {
                throw ConfigurationError("upstream '\(upstream.name)': \(error.message)")
            }
        }
        if let proxyRoot {
            guard upstreams.contains(where: { $0.name == proxyRoot }) else {
                throw ConfigurationError("proxy root '\(proxyRoot)' is not a named upstream (define it with --upstream or the config file)")
            }
            guard (0...65535).contains(proxyPort) else { throw ConfigurationError("proxy port \(proxyPort) is out of range 0–65535") }
            guard proxyPort == 0 || proxyPort != port else { throw ConfigurationError("the proxy port must differ from the port") }
        }
        for pattern in allowHosts where pattern.isEmpty || pattern.dropFirst(pattern.hasPrefix("*.") ? 2 : 0).contains("*") {
            throw ConfigurationError("allow-host pattern '\(pattern)' must be a host name or '*.' followed by one")
        }
    }
}

extension LarderConfiguration {
    /// The TLS files: each pair given whole, the admin one only with an admin listener.
    func validateTLS() throws(ConfigurationError) {
        let pairs = [
            ("--tls-cert", tlsCertificatePath, "--tls-key", tlsKeyPath),
            ("--admin-tls-cert", adminTLSCertificatePath, "--admin-tls-key", adminTLSKeyPath)
        ]
        for (certificateOption, certificate, keyOption, key) in pairs {
            guard (certificate == nil) == (key == nil) else {
                throw ConfigurationError(
                    "\(certificate == nil ? certificateOption : keyOption) is missing: give \(certificateOption) and \(keyOption) together")
            }
            if certificate?.isEmpty == true || key?.isEmpty == true {
                throw ConfigurationError("the path given with \(certificate?.isEmpty == true ? certificateOption : keyOption) is empty")
            }
        }
        if adminTLSCertificatePath != nil, adminPort == nil {
            throw ConfigurationError("--admin-tls-cert is for the admin listener: give --admin-port too, or use --tls-cert")
        }
    }
}

public struct ConfigurationError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Sizes and durations as people write them: `1073741824`, `100MB`, `1GiB`, `512k`; `604800`,
/// `90s`, `30m`, `12h`, `7d`. KB/MB/GB are powers of 1000, KiB/MiB/GiB (and k/m/g) of 1024.
public enum Quantity {
    public static func bytes(_ text: String) -> Int? {
        let units: [(String, Int)] = [
            ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40),
            ("KB", 1_000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("TB", 1_000_000_000_000),
            ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30),
            ("B", 1)
        ]
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        for (unit, factor) in units where trimmed.hasSuffix(unit) {
            guard let value = Double(trimmed.dropLast(unit.count).trimmingCharacters(in: .whitespaces)), value >= 0,
                value * Double(factor) < 9e18
            else { return nil }
            return Int(value * Double(factor))
        }
        return Int(trimmed).flatMap { $0 >= 0 ? $0 : nil }
    }

    public static func seconds(_ text: String) -> Double? {
        let units: [(String, Double)] = [("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        for (unit, factor) in units where trimmed.hasSuffix(unit) {
            guard let value = Double(trimmed.dropLast(unit.count)), value.isFinite, value >= 0 else { return nil }
            return value * factor
        }
        return Double(trimmed).flatMap { $0.isFinite && $0 >= 0 ? $0 : nil }
    }
}

extension LarderConfiguration {
    /// The log format, once validated (text when not).
    public var resolvedLogFormat: LogFormat { LogFormat(rawValue: logFormat) ?? .text }
    /// The log level, once validated (info when not).
    public var resolvedLogLevel: Logger.Level { Logger.Level(rawValue: logLevel) ?? .info }
}

/// Each namespace's budget (`namespaces: {NAME: {maxBytes: SIZE}}`, `--namespace-max-bytes`).
public struct NamespaceBudgets: Sendable, Equatable {
    public var maxBytes: [String: Int]
    public init(maxBytes: [String: Int] = [:]) { self.maxBytes = maxBytes }
}
