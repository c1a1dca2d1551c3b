// swift-tools-version:6.1
// The map of Larder. Dependencies point inward:
//   larder (executable) → LarderService → adapters (SQLite, Curl, HTTP) → LarderEngine → LarderCore.
// Each C module is imported by exactly one adapter (libxxhash by the SQLite and Redis ones, for
// checksums and key names; the Redis tests use it to forge the former checksum).
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
    // Release builds let the optimiser see across Larder's modules: the cache policy's generic
    // types (S3FIFO, GhostKeys, FrequencySketch in LarderCore) are then specialised where the
    // store uses them, not run through witness tables, and small accessors are inlined
    // (docs/performance.md, "Read transactions kept between commits"). A root package may use
    // unsafeFlags.
    .unsafeFlags(["-cross-module-optimization"], .when(configuration: .release))
]

let package = Package(
    name: "Larder",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "larder", targets: ["larder"])
    ],
    traits: [
        .trait(
            name: "OTLP",
            description: "Span export over OTLP/HTTP (--otlp-endpoint) with swift-otel; adds about six minutes to a clean build")
    ],
    // Exact versions: the ones the machine's package mirror holds. Package.resolved is not
    // committed (the mirror's commit ids are not GitHub's), so the pins live here.
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "3.12.3"),
        .package(url: "https://github.com/jpsim/Yams.git", exact: "5.0.1"),
        // DER, to read a TLS certificate's validity; swift-crypto depends on it already.
        .package(url: "https://github.com/apple/swift-asn1.git", exact: "1.7.4"),
        .package(url: "https://github.com/apple/swift-http-structured-headers.git", exact: "1.7.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", exact: "1.0.0"),
        // Span export (trait OTLP only): swift-otel's OTLP/HTTP exporter, the Tracer API it
        // implements and the service group that runs it.
        .package(url: "https://github.com/swift-otel/swift-otel.git", exact: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", exact: "1.7.3"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0")
    ],
    targets: [
        // System libraries (Debian -dev packages) with thin shims for calls Swift cannot make.
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CXXHash", pkgConfig: "libxxhash", providers: [.apt(["libxxhash-dev"])]),
        .systemLibrary(name: "CHiredis", pkgConfig: "hiredis", providers: [.apt(["libhiredis-dev"])]),
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(name: "CMalloc"), // glibc's <malloc.h>, for the executable's memory discipline
        // RE2 (libre2-dev) is C++: a C face of three functions, compiled here, for LarderRE2.
        .target(name: "CRE2", linkerSettings: [.linkedLibrary("re2")]),

        // The lock shared state lives behind: Synchronization.Mutex, or a pthread mutex that
        // ThreadSanitizer can see when built with -DLARDER_TSAN (scripts/sanitize thread). And the
        // event-loop companion protocol, through which the HTTP server runs the libcurl adapter's
        // drivers on its loops without either adapter importing the other.
        .target(name: "LarderSync", swiftSettings: strict),

        // Pure decisions: keys, freshness, policies, access rules. No I/O, no C.
        .target(
            name: "LarderCore",
            dependencies: [
                "LarderSync",
                .product(name: "Crypto", package: "swift-crypto"),
                // RFC 9651 parsing for CDN-Cache-Control (RFC 9213), a Structured Field.
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
                // W3C Trace Context: traceparent and tracestate, parsed and written.
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context")
            ],
            swiftSettings: strict
        ),
        // Orchestration: lookup → decide → fetch → store, behind storage/upstream protocols.
        .target(
            name: "LarderEngine",
            dependencies: ["LarderCore", "LarderSync", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        // Adapters: each is the only importer of its C module.
        .target(
            name: "LarderSQLite",
            dependencies: [
                "CSQLite", "CXXHash", "LarderEngine", "LarderCore", "LarderSync", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto")
            ], swiftSettings: strict),
        .target(
            name: "LarderCurl",
            dependencies: ["CCurl", "LarderEngine", "LarderCore", "LarderSync", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        .target(name: "LarderHTTP", dependencies: ["CMicroHTTPD", "LarderCore", "LarderSync"], swiftSettings: strict),
        // The chain conditions' `matches` patterns, in RE2: linear time whatever the pattern.
        .target(name: "LarderRE2", dependencies: ["CRE2", "LarderCore"], swiftSettings: strict),
        // The shared store (many instances on one Redis): XXH3 for its index keys' names, HMAC
        // (Crypto) to authenticate its entries.
        .target(
            name: "LarderRedis",
            dependencies: [
                "CHiredis", "CXXHash", "LarderEngine", "LarderCore", "LarderSync", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto")
            ],
            swiftSettings: strict),
        // Stored bodies compressed at rest (zstd), behind the engine's BodyCodec.
        .target(name: "LarderZstd", dependencies: ["CZstd", "LarderEngine", "LarderSync"], swiftSettings: strict),
        // Wiring: configuration, routes, lifecycle. Used by the executable and the integration tests.
        .target(
            name: "LarderService",
            dependencies: [
                "LarderCore", "LarderEngine", "LarderSQLite", "LarderCurl", "LarderHTTP", "LarderRedis", "LarderRE2", "LarderSync",
                "LarderZstd", "CMalloc", .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["OTLP"])),
                .product(name: "Tracing", package: "swift-distributed-tracing", condition: .when(traits: ["OTLP"])),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["OTLP"]))
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "larder",
            dependencies: [
                "LarderService", "LarderCore", "LarderCurl", "CMalloc",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log")
            ],
            swiftSettings: strict
        ),
        // Fuzz targets for the parsers of untrusted input: linked into libFuzzer by scripts/fuzz,
        // replayed over their corpora by LarderFuzzTests.
        .target(
            name: "LarderFuzzing", dependencies: ["LarderCore", "LarderEngine", "LarderRedis", "LarderRE2", "LarderService"],
            swiftSettings: strict),

        // Test support (regular targets, since test targets cannot be depended on). LarderTesting:
        // the clock tests move by hand and the entry factory, for any test of the engine or a store.
        // LarderServiceTesting: a real Larder on a loopback port (the harness), the origins it
        // fetches from, the client that talks to it and a redis-server of the test's own; apart,
        // so that unit tests do not depend on the whole service.
        .target(
            name: "LarderTesting",
            dependencies: ["LarderEngine", "LarderCore", "LarderSync", .product(name: "Logging", package: "swift-log")],
            path: "Tests/LarderTesting"),
        .target(
            name: "LarderServiceTesting",
            dependencies: [
                "LarderTesting", "LarderService", "LarderHTTP", "LarderEngine", "LarderCore", "LarderSync", "CMalloc",
                .product(name: "Logging", package: "swift-log")
            ],
            path: "Tests/LarderServiceTesting"),

        .testTarget(
            name: "LarderCoreTests", dependencies: ["LarderCore", "LarderRE2", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "LarderFuzzTests", dependencies: ["LarderFuzzing"]),
        // The HTTP server's pure parts (request phases, hand-over, admission, header deadlines)
        // and responders made without a socket.
        .testTarget(name: "LarderHTTPTests", dependencies: ["LarderHTTP", "LarderCore"]),
        .testTarget(name: "LarderRedisTests", dependencies: ["LarderRedis", "LarderEngine", "LarderCore", "LarderTesting", "CXXHash"]),
        .testTarget(
            name: "LarderEngineTests",
            dependencies: ["LarderEngine", "LarderCore", "LarderSync", "LarderTesting", .product(name: "Logging", package: "swift-log")]
        ),
        // The cache's semantics (freshness, revalidation, stale answers, Vary, coalescing,
        // policies, validation, the shared cache's rules) through the engine harness
        // (LarderTesting's EngineTestCase): no sockets, a clock moved by hand, every test on the
        // memory store and on SQLite.
        .testTarget(
            name: "LarderSemanticsTests",
            dependencies: ["LarderEngine", "LarderCore", "LarderSQLite", "LarderSync", "LarderTesting", "LarderZstd"]
        ),
        .testTarget(
            name: "LarderSQLiteTests",
            dependencies: [
                "LarderSQLite", "LarderEngine", "LarderCore", "LarderSync", "LarderTesting",
                .product(name: "Crypto", package: "swift-crypto")
            ]),
        // The service's parts made without a socket: the route table and router (requests built in
        // memory), the configuration and its file, log lines, request memos, process metrics.
        .testTarget(
            name: "LarderServiceTests",
            dependencies: [
                "LarderService", "LarderServiceTesting", "LarderSQLite", "LarderHTTP", "LarderEngine", "LarderCore", "LarderSync",
                .product(name: "Logging", package: "swift-log")
            ]),
        // The executable's command line: `larder serve`'s options against the settings table and
        // the docs, parsed in process; the shell completion the built executable writes.
        .testTarget(
            name: "LarderCommandTests",
            dependencies: [
                "larder", "LarderService", "LarderServiceTesting", .product(name: "ArgumentParser", package: "swift-argument-parser")
            ]
        ),
        .testTarget(
            name: "LarderIntegrationTests",
            dependencies: [
                "LarderServiceTesting", "LarderTesting", "LarderService", "LarderHTTP", "LarderCore", "LarderSync", "CMalloc",
                "LarderRedis", "LarderEngine", "CXXHash", "LarderSQLite"
            ]
        )
    ]
)
