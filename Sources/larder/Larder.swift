// The `larder` executable: parse the command line, build the configuration, run the service,
// stop cleanly on SIGTERM/SIGINT. Kept out of main.swift: in Swift 6, closures inside C
// callbacks written in main.swift are treated as main-actor code.

import ArgumentParser
import Foundation
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
        subcommands: [Serve.self]
    )
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve POST /fetch from a persistent SQLite cache.")

    @Option(help: "Address to listen on (env LARDER_HOST; default 127.0.0.1).")
    var host: String?

    @Option(help: "Port to listen on, 0 for any free port (env LARDER_PORT; default 8080).")
    var port: Int?

    @Option(help: "SQLite database file (env LARDER_DB; default data/larder.sqlite).")
    var db: String?

    @Option(help: "File holding the 32-byte key secret (default: <db>.secret, created when absent).")
    var secretFile: String?

    @Option(name: .customLong("upstream"), help: "A named upstream, NAME=URL (repeatable).")
    var upstreams: [String] = []

    @Option(name: .customLong("allow-host"), help: "Only fetch from hosts matching this pattern, e.g. api.example.com or *.example.com (repeatable; default any host).")
    var allowHosts: [String] = []

    @Flag(help: "Also refuse upstream addresses in loopback and private ranges.")
    var denyPrivate = false

    @Option(help: "libmicrohttpd worker threads (default 2).")
    var threads: Int = 2

    @Option(help: "Largest upstream response body in bytes (default 67108864).")
    var maxBodyBytes: Int = 64 << 20

    @Option(help: "Megabytes of hot entries kept in memory in front of SQLite; 0 disables (default 64).")
    var memoryMb: Int = 64

    @Option(help: "Seconds in-flight requests get to finish on SIGTERM (default 10).")
    var shutdownGrace: Double = 10

    @Flag(inversion: .prefixedNo, help: "One access-log line per request on stderr.")
    var accessLog = true

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
        let environment = ProcessInfo.processInfo.environment

        var configuration = LarderConfiguration()
        configuration.host = host ?? environment["LARDER_HOST"] ?? configuration.host
        if let port = port ?? environment["LARDER_PORT"].flatMap({ Int($0) }) {
            configuration.port = port
        } else if let raw = environment["LARDER_PORT"] {
            throw ValidationError("LARDER_PORT '\(raw)' is not a port number")
        }
        configuration.databasePath = db ?? environment["LARDER_DB"] ?? configuration.databasePath
        configuration.secretPath = secretFile
        for entry in upstreams {
            guard let equals = entry.firstIndex(of: "=") else {
                throw ValidationError("--upstream '\(entry)' is not NAME=URL")
            }
            configuration.upstreams[String(entry[..<equals])] = String(entry[entry.index(after: equals)...])
        }
        configuration.allowHosts = allowHosts
        configuration.denyPrivate = denyPrivate
        configuration.serverThreads = threads
        configuration.maxUpstreamBodyBytes = maxBodyBytes
        configuration.memoryCapacityBytes = memoryMb << 20
        configuration.shutdownGraceSeconds = shutdownGrace
        configuration.accessLog = accessLog
        do {
            try configuration.validate()
        } catch {
            throw ValidationError(error.description)
        }

        let service = LarderService(configuration: configuration, logger: logger)
        do {
            try service.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
        var received: Int32 = 0
        sigwait(&signals, &received)
        logger.info("received signal \(received); shutting down")
        service.shutdown()
    }
}
