// Every setting an operator can give: the config file's keys, `larder serve`'s options and the
// environment variables all come from this table (see Setting). The fields, their defaults and
// units are LarderConfiguration's. The config file applies its keys in this order, and so does
// the command line. The table is in sections, the sections of `larder serve --help`.
//
// To add a setting: a field in LarderConfiguration (checked in `validate()`), a line in its
// section here, its property in the section's group of `Serve` (Sources/larder/Larder.swift,
// named as the key), and a line in
// docs/larder.example.yaml and docs/operations.md. ServeSettingsTests checks they agree.

extension Setting {
    public static let all: [Setting] = [
        section(
            .network,
            [
                .text("host", \.host, environment: "LARDER_HOST", "Address to listen on"),
                .integer("port", \.port, environment: "LARDER_PORT", expecting: "a port number", "Port to listen on, 0 for any free port"),
                .integer("threads", \.serverThreads, "HTTP event loops, a thread each"),
                .integer("clientTimeout", \.clientTimeoutSeconds, "Seconds a client connection may stay idle before it is closed"),
                .integer("maxConnections", \.maxConnections, "Connections open at once; more wait in the listen backlog until one closes"),
                .text(
                    "proxyRoot", \.proxyRoot, unset: "none",
                    "Also listen on --proxy-port and proxy every path to this named upstream, at the root"),
                .integer("proxyPort", \.proxyPort, "Port of the proxy-root listener"),
                .integer(
                    "adminPort", \.adminPort, unset: "none: on --port",
                    "Serve the /cache admin routes and /metrics on this port only, on the same --host; 0 = any free port"),
                .text(
                    "tlsCert", \.tlsCertificatePath, environment: "LARDER_TLS_CERT", empty: .ignored, unset: "none: plain HTTP",
                    "PEM certificate (chain) file: every listener serves HTTPS only, with --tls-key"),
                .text(
                    "tlsKey", \.tlsKeyPath, environment: "LARDER_TLS_KEY", empty: .ignored, unset: "none",
                    "PEM private key file (unencrypted) of --tls-cert"),
                .text(
                    "adminTlsCert", \.adminTLSCertificatePath, unset: "--tls-cert",
                    "PEM certificate file of the --admin-port listener alone (HTTPS there even without --tls-cert), with --admin-tls-key"),
                .text("adminTlsKey", \.adminTLSKeyPath, unset: "--tls-key", "PEM private key file of --admin-tls-cert"),
                .seconds("shutdownGrace", \.shutdownGraceSeconds, "Seconds in-flight requests get to finish on SIGTERM")
            ]),
        section(
            .storage,
            [
                .text("db", \.databasePath, environment: "LARDER_DB", "SQLite database file"),
                .text(
                    "store", \.store, environment: "LARDER_STORE", empty: .ignored,
                    """
                    The store: sqlite (embedded), redis://[user:password@]host:port[/db] or redis-cluster://host:port,host:port \
                    shared by many instances
                    """),
                .text("storePrefix", \.storePrefix, "Prefix of every Redis key"),
                .integer("storeTimeoutMs", \.storeTimeoutMs, "Milliseconds a Redis operation may take; slower is a miss"),
                .choice(
                    "storeFallback", \.storeFallbackPassThrough, "fail", or: "pass-through",
                    "With Redis unreachable at start: fail, or pass-through (serve uncached until it returns)"),
                .flag(
                    "readyWhileDegraded", \.readyWhileDegraded,
                    """
                    GET /readyz answers 200 while the store is degraded (writes failing, a shared store out of reach), instead of \
                    503 while it fails: for a store every instance shares
                    """),
                .choice(
                    "onCorrupt", \.renameCorruptDatabase, "fail", or: "rename",
                    "A damaged database file (or one that is not SQLite): fail, or rename (move it aside and start empty)"),
                .size(
                    "maxBytes", \.maxBytes, example: "1GiB, 100MB",
                    "Bytes the cache may hold, e.g. 1GiB or 100MB; past it, S3-FIFO keeps what is asked for again"),
                .size(
                    "maxObjectBytes", \.maxObjectBytes, unset: "5% of --max-bytes",
                    "Largest response stored, e.g. 50MB; larger ones are served, not stored"),
                .duration("retention", \.retentionSeconds, "Entries not written for this long are removed, e.g. 7d or 12h"),
                .duration(
                    "warmJobRetention", \.warmJobRetentionSeconds,
                    "Finished warm jobs (done or cancelled) are removed this long after they finished, e.g. 24h"),
                .integer(
                    "maxFinishedWarmJobs", \.maxFinishedWarmJobs, "Finished warm jobs kept at most; past it, the oldest finished go first"),
                .megabytes(
                    "memoryMb", \.memoryCapacityBytes,
                    "Megabytes of memory for caching: hot entries kept in front of the store, and the request memos; 0 disables both"),
                .megabytes(
                    "requestMemoMb", \.requestMemoBytes, unset: "half of --memory-mb, at most 30",
                    """
                    Of --memory-mb, megabytes of parsed requests remembered by their bytes, so repeated requests skip parsing and \
                    keying; 0 disables
                    """),
                .integer(
                    "bodyFileThreshold", \.bodyFileThresholdBytes,
                    "Bodies of at least this many bytes are kept as files beside the database and sent with sendfile"),
                .integer("maxVariants", \.maxVariants, "Variants kept per cache key for responses with Vary"),
                .list(
                    "tagHeaders", \.tagHeaders, option: "tag-header", noneWord: true, lowercased: true,
                    "Response field whose values tag the stored entry, for purging by tag; 'none' for neither"),
                .namespaceBudgets(
                    "namespaces", \.namespaceBudgets, option: "namespace-max-bytes",
                    """
                    NAMESPACE=SIZE: the most that namespace may hold (SQLite); past it its own oldest entries go, never \
                    another namespace's (in the file: namespaces: {NAME: {maxBytes: SIZE}})
                    """),
                .integer(
                    "compressMinBytes", \.compressMinBytes,
                    """
                    Bodies of a --compress-type of at least this many bytes are stored compressed (zstd) when that saves an \
                    eighth or more, and counted against --max-bytes at their stored size; 0 = never
                    """),
                .list(
                    "compressTypes", \.compressTypes, option: "compress-type", noneWord: true, lowercased: true,
                    """
                    Media type whose bodies are stored compressed: type/subtype, type/* or type/*+suffix; 'none' for none. \
                    Bodies the origin encoded (Content-Encoding) are kept as they came
                    """),
                .integer(
                    "compressDictionarySamples", \.compressDictionarySamples,
                    """
                    Bodies of a namespace (up to 64 KiB each, 4 MiB a set) a compression dictionary is trained from, in the \
                    background, and trained again from fresh ones a day later; 0 = no dictionaries
                    """)
            ]),
        section(
            .upstream,
            [
                .upstreams(
                    "upstreams", \.upstreams, option: "upstream",
                    "A named upstream, NAME=URL; use it from /fetch with \"upstream\" and \"path\""),
                .list(
                    "resolve", \.resolve,
                    """
                    HOST:PORT:ADDRESS[,ADDRESS…]: resolve that name to those addresses instead of through DNS, as curl's --resolve; \
                    the access rules still check each address
                    """),
                .integer("maxBodyBytes", \.maxUpstreamBodyBytes, "Largest upstream response body in bytes"),
                .integer("maxUpstreamTransfers", \.maxUpstreamTransfers, "Upstream transfers in progress at once; more wait their turn"),
                .megabytes(
                    "maxInflightMb", \.maxInflightBodyBytes,
                    "Megabytes of upstream bodies received at once; more waits, except the oldest transfer"),
                .integer(
                    "rangeFetchOver", \.rangeFetchOverBytes,
                    """
                    Proxied range requests fetch only their range; representations up to this many bytes are then fetched whole in \
                    the background; 0 = never
                    """),
                .seconds(
                    "staleOnError", \.staleOnErrorSeconds,
                    "Seconds past freshness a stored response answers when the upstream is down or fails; 0 = off"),
                .flag(
                    "stripTargetedCacheControl", \.stripTargetedCacheControl,
                    "Remove CDN-Cache-Control from proxied responses, where Larder is the last cache (otherwise it is passed on)"),
                .list(
                    "targetedCacheControl", \.targetedCacheControl, option: "targeted-cache-control", noneWord: true, lowercased: true,
                    """
                    Response field whose directives Larder follows instead of Cache-Control and Expires (RFC 9213), the first \
                    present and valid in the order given; 'none' for Cache-Control alone
                    """),
                .flag(
                    "passOwnCacheControl", \.passOwnCacheControl,
                    """
                    Pass the targeted fields other than CDN-Cache-Control (Larder-Cache-Control by default) on to proxy clients; \
                    otherwise they are removed
                    """),
                .duration(
                    "uncacheableMemory", \.uncacheableMemorySeconds,
                    """
                    How long a cache key (a URL in a namespace) whose answer could not be stored (private, no-store, a status \
                    that cannot be stored) is remembered: its misses then go to the upstream at once and in parallel instead of \
                    waiting on one another; 0 = off
                    """),
                .flag(
                    "cacheStatusKey", \.cacheStatusKey,
                    "The proxy's Cache-Status names the cache key (key=\"…\", RFC 9211), as /fetch's cache.key does"),
                .negativeTTLs(
                    "negativeTtl", \.negativeTTL, option: "negative-ttl",
                    """
                    STATUS=DURATION: keep answers of that status (300–599 but 304) that carry no freshness of their own for \
                    DURATION (negative caching, e.g. 404=30s); 0 turns a status off
                    """)
            ]),
        section(
            .safety,
            [
                .text(
                    "secretFile", \.secretPath, environment: "LARDER_SECRET_FILE", empty: .refused, unset: "<db>.secret",
                    """
                    File holding the key secret, at least 32 bytes. Required with a shared store (--store redis…): the same file on \
                    every instance, made once with `head -c 32 /dev/urandom | base64 > larder.secret`. With SQLite, created when absent
                    """),
                .text(
                    "adminToken", \.adminToken, environment: "LARDER_ADMIN_TOKEN", empty: .refused, unset: "none",
                    "Require 'Authorization: Bearer TOKEN' on every /cache route"),
                .text(
                    "metricsToken", \.metricsToken, environment: "LARDER_METRICS_TOKEN", empty: .refused, unset: "none",
                    "Require 'Authorization: Bearer TOKEN' on GET /metrics"),
                .list(
                    "allowHosts", \.allowHosts, option: "allow-host", empty: "any host",
                    "Only fetch from hosts matching this pattern, e.g. api.example.com or *.example.com"),
                .flag("denyPrivate", \.denyPrivate, "Also refuse upstream addresses in loopback and private ranges"),
                .list(
                    "serverNames", \.serverNames, option: "server-name", lowercased: true,
                    empty: "localhost and IP literals (any name when bound beyond loopback)",
                    "A name this server answers to in Host, e.g. larder.internal or *.example.com (refuses DNS rebinding)"),
                .list(
                    "redactQuery", \.redactQuery, noneWord: true,
                    "Query parameter whose value is kept out of stored URLs, the admin listing and logs; 'none' for none"),
                .integer(
                    "headerTimeout", \.headerTimeoutSeconds,
                    "Seconds from accept within which a new connection's first request headers must be complete, however paced"),
                .integer(
                    "connectionsPerAddress", \.connectionsPerAddress, "Connections open at once from one client address; 0 = no limit"),
                .integer("maxBatch", \.maxBatch, "Requests in one POST /batch"),
                .integer("maxChainSteps", \.maxChainSteps, "Steps in one POST /chain"),
                .size(
                    "maxBatchBytes", \.maxBatchBytes, example: "64MiB",
                    "Bytes of items one /batch or /chain answer may hold, e.g. 64MiB; past it, items fail with response_too_large")
            ]),
        section(
            .observability,
            [
                .toggle("accessLog", \.accessLog, "One access-log line per request on stderr"),
                .text("logFormat", \.logFormat, environment: "LARDER_LOG_FORMAT", "Log lines as text, or json (one object per line)"),
                .text(
                    "logLevel", \.logLevel, environment: "LARDER_LOG_LEVEL",
                    "Least severe level logged: trace, debug, info, notice, warning, error or critical"),
                .text(
                    "otlpEndpoint", \.otlpEndpoint, unset: "none: spans are not exported",
                    "Export spans over OTLP/HTTP to this URL, e.g. http://collector:4318/v1/traces (a build with the OTLP trait)"),
                .integer(
                    "metricsNamespaces", \.metricsNamespaces,
                    "Namespaces with their own label in /metrics; later ones are counted as 'other'")
            ])
    ].flatMap { $0 }

    /// The settings of one section of `larder serve --help`.
    private static func section(_ group: Group, _ settings: [Setting]) -> [Setting] {
        settings.map { setting in
            var setting = setting
            setting.group = group
            return setting
        }
    }
}
