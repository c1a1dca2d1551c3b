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
        subcommands: [Serve.self, Cache.self, CheckConfig.self, Healthcheck.self]
    )

    static func main() {
        // A SIGHUP (a reload) that arrives while `serve` starts, before it waits for signals, must
        // not end it; `serve` takes the signal back once it is blocked for sigwait.
        if CommandLine.arguments.dropFirst().first == "serve" { signal(SIGHUP, SIG_IGN) }
        main(nil)
    }
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve POST /fetch from a persistent SQLite cache.")

    @Option(help: "A YAML or JSON settings file (docs/larder.example.yaml has every key); command-line options override it.")
    var config: String?

    // One group per section of `Setting.all` (Setting.Group), one property per setting in it, named
    // as its key: the table gives its option's name and help, and `configuration()` applies each
    // through the table. Declared in the order of `--help`.
    @OptionGroup(title: Setting.Group.network.title) var network: NetworkSettings
    @OptionGroup(title: Setting.Group.storage.title) var storage: StorageSettings
    @OptionGroup(title: Setting.Group.upstream.title) var upstream: UpstreamSettings
    @OptionGroup(title: Setting.Group.safety.title) var safety: SafetySettings
    @OptionGroup(title: Setting.Group.observability.title) var observability: ObservabilitySettings

    /// Defaults, then the config file, then the environment, then the command line.
    func configuration(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> LarderConfiguration {
        var configuration = LarderConfiguration()
        var given = parsedProperties
        given["config"] = nil
        do throws(ConfigurationError) {
            if let config { try ConfigFile.apply(config, to: &configuration) }
            try Setting.apply(environment: environment, to: &configuration)
            for setting in Setting.all {
                guard let value = given.removeValue(forKey: setting.key) else {
                    preconditionFailure("serve has no property \(setting.key)")
                }
                try setting.apply(commandLine: value, to: &configuration)
            }
            precondition(given.isEmpty, "serve's properties \(given.keys.sorted()) are no setting's key")
            try CheckConfig.validate(configuration, file: config)
        } catch {
            throw ValidationError(error.description)
        }
        return configuration
    }

    func run() throws {
        // Block the signals before any thread starts, so only `sigwait` below receives them.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        sigaddset(&signals, SIGHUP)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        signal(SIGHUP, SIG_DFL)
        signal(SIGPIPE, SIG_IGN)

        let configuration: LarderConfiguration
        do {
            configuration = try self.configuration()
        } catch let error as ValidationError {
            // Said plainly, without swift-argument-parser's usage footer: a bad value in a file or
            // a variable is no misuse of the command line.
            FileHandle.standardError.write(Data("larder serve: \(error.message)\n".utf8))
            throw ExitCode.validationFailure
        }
        let logControl = LogControl(level: configuration.resolvedLogLevel, format: configuration.resolvedLogFormat)
        LoggingSystem.bootstrap { _ in LarderLogHandler(control: logControl) }
        let logger = Logger(label: "larder")

        let memory = MemoryDiscipline()
        let service = LarderService(configuration: configuration, logger: logger, accessLogOutput: .standardError(logControl))
        do {
            try service.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(1)
        }
        var received: Int32 = 0
        repeat {
            sigwait(&signals, &received)
            if received == SIGHUP { reload(service, logControl: logControl, logger: logger) }
        } while received == SIGHUP
        memory.stop()
        logger.info("received signal \(received); shutting down")
        service.shutdown()
    }
}

extension Serve {
    /// SIGHUP: reads the configuration again (file, environment, command line) and applies it.
    /// A configuration that does not validate changes nothing.
    func reload(_ service: LarderService, logControl: LogControl, logger: Logger) {
        let source = config.map { "from \($0)" } ?? "(no --config file: the environment and command line)"
        let report: LarderService.ReloadReport
        do {
            report = try service.reload(try configuration())
        } catch let error as ValidationError {
            logger.error("reload \(source) failed; the running configuration is kept: \(error.message)")
            return
        } catch {
            logger.error("reload \(source) failed; the running configuration is kept: \(error)")
            return
        }
        let running = service.configuration
        logControl.level = running.resolvedLogLevel
        logControl.format = running.resolvedLogFormat
        let applied = report.applied.isEmpty ? "nothing changed" : "applied " + report.applied.joined(separator: ", ")
        logger.info("reloaded the configuration \(source): \(applied)")
        if let config, let overridden = try? Self.overridden(in: config, running: running), !overridden.isEmpty {
            logger.warning(
                """
                in \(config), \(overridden.joined(separator: ", ")) \(overridden.count == 1 ? "is" : "are") overridden by the \
                environment or the command line, which a reload does not change
                """)
        }
        if !report.keptUntilRestart.isEmpty {
            logger.warning(
                "changed settings that take a restart, kept at their running values: \(report.keptUntilRestart.joined(separator: ", "))")
        }
    }
}

/// `larder check-config FILE`: validates a settings file as `serve --config FILE` would read it
/// (with the environment's LARDER_ variables), without serving; exit 0 when it is valid.
struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Check a settings file without serving: exit 0 when it is valid, 1 with the reason when not.")

    @Argument(help: "The YAML or JSON settings file.")
    var file: String

    @Option(
        help: """
            The settings file a running `serve --config` was started with: check FILE as a reload of that process \
            (with the running values of the settings that take a restart).
            """)
    var running: String?

    func run() throws {
        var configuration = LarderConfiguration()
        var kept: [String] = []
        do throws(ConfigurationError) {
            configuration = try Self.read(file)
            if let running {
                let started = try Self.read(running)
                do throws(ConfigurationError) {
                    (configuration, kept) = try Setting.reload(to: configuration, running: started)
                } catch {
                    throw ConfigurationError("\(file): \(error.description)")
                }
            }
        } catch {
            FileHandle.standardError.write(Data("larder check-config: \(error.description)\n".utf8))
            throw ExitCode(1)
        }
        // The files it names that serve reads at start: the TLS certificates and keys.
        do {
            for warning in try LarderService.checkFiles(configuration) {
                FileHandle.standardError.write(Data("larder check-config: warning: \(warning)\n".utf8))
            }
        } catch {
            FileHandle.standardError.write(Data("larder check-config: \(file): \(error)\n".utf8))
            throw ExitCode(1)
        }
        guard let running else { return print("\(file): valid") }
        let keptText = kept.isEmpty ? "" : "; kept at their running values until a restart: \(kept.joined(separator: ", "))"
        print("\(file): valid as a reload of a process started with \(running)\(keptText)")
    }

    /// The configuration `serve --config file` would start with (the file, then the environment), validated.
    static func read(_ file: String) throws(ConfigurationError) -> LarderConfiguration {
        var configuration = LarderConfiguration()
        try ConfigFile.apply(file, to: &configuration)
        try Setting.apply(environment: ProcessInfo.processInfo.environment, to: &configuration)
        try validate(configuration, file: file)
        return configuration
    }

    /// `configuration.validate()`, its error naming the file and the key to blame when there is one.
    static func validate(_ configuration: LarderConfiguration, file: String?) throws(ConfigurationError) {
        do throws(ConfigurationError) {
            try configuration.validate()
        } catch {
            if let file, let key = ConfigFile.key(blamedFor: error.description, in: file) {
                throw ConfigurationError("\(ConfigFile.place(of: key, in: file)): \(key): \(error.description)")
            }
            throw error
        }
    }
}

extension Serve {
    /// The live settings `file` sets (to other than their defaults) whose running values are not
    /// the file's: the environment or the command line gives them.
    static func overridden(in file: String, running: LarderConfiguration) throws -> [String] {
        var fromFile = LarderConfiguration()
        try ConfigFile.apply(file, to: &fromFile)
        let defaults = LarderConfiguration()
        return Setting.all.filter { setting in
            setting.isLive && setting.describe(fromFile) != setting.describe(defaults)
                && setting.describe(fromFile) != setting.describe(running)
        }.map(\.key)
    }
}

// The sections of `larder serve --help`: each holds the properties of one Setting.Group, in the
// order of its options.

struct NetworkSettings: ParsableArguments {
    static let group = Setting.Group.network
    @Option(setting: "host") var host: String?
    @Option(setting: "port") var port: Int?
    @Option(setting: "threads") var threads: Int?
    @Option(setting: "clientTimeout") var clientTimeout: Int?
    @Option(setting: "maxConnections") var maxConnections: Int?
    @Option(setting: "proxyRoot") var proxyRoot: String?
    @Option(setting: "proxyPort") var proxyPort: Int?
    @Option(setting: "adminPort") var adminPort: Int?
    @Option(setting: "tlsCert") var tlsCert: String?
    @Option(setting: "tlsKey") var tlsKey: String?
    @Option(setting: "adminTlsCert") var adminTlsCert: String?
    @Option(setting: "adminTlsKey") var adminTlsKey: String?
    @Option(setting: "shutdownGrace") var shutdownGrace: Double?
}

struct StorageSettings: ParsableArguments {
    static let group = Setting.Group.storage
    @Option(setting: "db") var db: String?
    @Option(setting: "store") var store: String?
    @Option(setting: "storePrefix") var storePrefix: String?
    @Option(setting: "storeTimeoutMs") var storeTimeoutMs: Int?
    @Option(setting: "storeFallback") var storeFallback: String?
    @Flag(setting: "readyWhileDegraded") var readyWhileDegraded = false
    @Option(setting: "onCorrupt") var onCorrupt: String?
    @Option(setting: "maxBytes") var maxBytes: String?
    @Option(setting: "maxObjectBytes") var maxObjectBytes: String?
    @Option(setting: "retention") var retention: String?
    @Option(setting: "warmJobRetention") var warmJobRetention: String?
    @Option(setting: "maxFinishedWarmJobs") var maxFinishedWarmJobs: Int?
    @Option(setting: "memoryMb") var memoryMb: Int?
    @Option(setting: "requestMemoMb") var requestMemoMb: Int?
    @Option(setting: "bodyFileThreshold") var bodyFileThreshold: Int?
    @Option(setting: "maxVariants") var maxVariants: Int?
    @Option(setting: "tagHeaders") var tagHeaders: [String] = []
    @Option(setting: "namespaces") var namespaces: [String] = []
    @Option(setting: "compressMinBytes") var compressMinBytes: Int?
    @Option(setting: "compressTypes") var compressTypes: [String] = []
    @Option(setting: "compressDictionarySamples") var compressDictionarySamples: Int?
}

struct UpstreamSettings: ParsableArguments {
    static let group = Setting.Group.upstream
    @Option(setting: "upstreams") var upstreams: [String] = []
    @Option(setting: "resolve") var resolve: [String] = []
    @Option(setting: "maxBodyBytes") var maxBodyBytes: Int?
    @Option(setting: "maxUpstreamTransfers") var maxUpstreamTransfers: Int?
    @Option(setting: "maxInflightMb") var maxInflightMb: Int?
    @Option(setting: "rangeFetchOver") var rangeFetchOver: Int?
    @Option(setting: "staleOnError") var staleOnError: Double?
    @Flag(setting: "stripTargetedCacheControl") var stripTargetedCacheControl = false
    @Option(setting: "targetedCacheControl") var targetedCacheControl: [String] = []
    @Flag(setting: "passOwnCacheControl") var passOwnCacheControl = false
    @Flag(setting: "cacheStatusKey") var cacheStatusKey = false
    @Option(setting: "negativeTtl") var negativeTtl: [String] = []
    @Option(setting: "uncacheableMemory") var uncacheableMemory: String?
}

struct SafetySettings: ParsableArguments {
    static let group = Setting.Group.safety
    @Option(setting: "secretFile") var secretFile: String?
    @Option(setting: "adminToken") var adminToken: String?
    @Option(setting: "metricsToken") var metricsToken: String?
    @Option(setting: "allowHosts") var allowHosts: [String] = []
    @Flag(setting: "denyPrivate") var denyPrivate = false
    @Option(setting: "serverNames") var serverNames: [String] = []
    @Option(setting: "redactQuery") var redactQuery: [String] = []
    @Option(setting: "headerTimeout") var headerTimeout: Int?
    @Option(setting: "connectionsPerAddress") var connectionsPerAddress: Int?
    @Option(setting: "maxBatch") var maxBatch: Int?
    @Option(setting: "maxChainSteps") var maxChainSteps: Int?
    @Option(setting: "maxBatchBytes") var maxBatchBytes: String?
}

struct ObservabilitySettings: ParsableArguments {
    static let group = Setting.Group.observability
    @Flag(setting: "accessLog", inversion: .prefixedNo) var accessLog: Bool?
    @Option(setting: "logFormat") var logFormat: String?
    @Option(setting: "logLevel") var logLevel: String?
    @Option(setting: "otlpEndpoint") var otlpEndpoint: String?
    @Option(setting: "metricsNamespaces") var metricsNamespaces: Int?
}
