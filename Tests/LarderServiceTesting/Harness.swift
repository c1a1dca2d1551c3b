// Starts real Larder services (in-process, port 0, real SQLite files in a temporary
// directory) against a real origin, and cleans everything up after each test.

import Foundation
import LarderCore
import LarderEngine
import LarderHTTP
import LarderService
import LarderSync
@_exported import LarderTesting
import Logging
import XCTest

public final class RunningLarder {
    public let service: LarderService
    public let configuration: LarderConfiguration

    /// `logFormat`: the lines go to `logLines` as Larder's own handler writes them in that format
    /// (without it, as `CapturingLogHandler` writes them).
    public init(
        configuration: LarderConfiguration, clock: Clock, logLines: LogLines? = nil, logFormat: LogFormat? = nil,
        spans: (any SpanRecorder)? = nil
    ) throws {
        self.configuration = configuration
        var logger: Logger
        if let logLines, let logFormat {
            let control = LogControl(level: .info, format: logFormat)
            logger = Logger(label: "larder-test") { _ in LarderLogHandler(control: control) { line in logLines.append(line) } }
        } else if let logLines {
            logger = Logger(label: "larder-test") { _ in CapturingLogHandler(lines: logLines) }
            logger.logLevel = .info
        } else {
            logger = Logger(label: "larder-test") { StreamLogHandler.standardError(label: $0) }
            logger.logLevel = .warning
        }
        // Access lines go to `logLines` too, as Larder writes them (in text unless `logFormat` says).
        let accessLogOutput = logLines.map { lines in
            AccessLogOutput(control: LogControl(level: .info, format: logFormat ?? .text)) { bytes in
                for line in bytes.split(separator: UInt8(ascii: "\n")) { lines.append(String(decoding: line, as: UTF8.self)) }
            }
        }
        service = LarderService(
            configuration: configuration, logger: logger, clock: clock, spans: spans, accessLogOutput: accessLogOutput)
        try service.start()
    }

    public var port: Int { service.port }
    public var adminPort: Int? { service.adminPort }

    public func connection() throws -> TestConnection { try TestConnection(port: port) }

    public func stop() { service.shutdown() }
}

open class IntegrationTestCase: XCTestCase {
    public var origin: TestOrigin!
    public var directory: URL!
    public let clock = ManualClock()
    private var running: [RunningLarder] = []
    /// Databases given to a Larder started while another ran, so far (startLarder).
    private var besideDatabases = 0

    open override func setUpWithError() throws {
        origin = try TestOrigin.start(clock: clock)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    open override func tearDown() {
        for larder in running { larder.stop() }
        running.removeAll()
        origin?.stop()
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    public var databasePath: String { directory.appendingPathComponent("larder.sqlite").path }

    /// Starts Larder on port 0 with the test's database (while another runs, a database of its
    /// own); `configure` adjusts the defaults. With `logLines`, its log lines are kept there
    /// (written by Larder's own handler in `logFormat` when one is given).
    @discardableResult
    public func startLarder(
        logLines: LogLines? = nil, logFormat: LogFormat? = nil, spans: (any SpanRecorder)? = nil,
        _ configure: (inout LarderConfiguration) -> Void = { _ in }
    ) throws -> RunningLarder {
        var configuration = LarderConfiguration()
        configuration.port = 0
        // One Larder per database file (DatabaseLock): one started beside another has its own.
        if running.isEmpty {
            configuration.databasePath = databasePath
        } else {
            besideDatabases += 1
            configuration.databasePath = directory.appendingPathComponent("larder-beside-\(besideDatabases).sqlite").path
        }
        configuration.accessLog = false
        configuration.shutdownGraceSeconds = 5
        configure(&configuration)
        let larder = try RunningLarder(
            configuration: configuration, clock: clock.clock, logLines: logLines, logFormat: logFormat, spans: spans)
        running.append(larder)
        return larder
    }

    public func stopLarder(_ larder: RunningLarder) {
        larder.stop()
        running.removeAll { $0 === larder }
    }

    /// A loopback port free right now (bound to port 0, then released).
    public static func freeLoopbackPort() -> Int { bindLoopback(port: 0) ?? 0 }

    /// Whether a loopback port can be bound right now.
    public static func isFreeLoopbackPort(_ port: Int) -> Bool { bindLoopback(port: port) != nil }

    /// Binds a TCP socket to 127.0.0.1:`port` (0: any) and releases it; the port bound, or nil.
    private static func bindLoopback(port: Int) -> Int? {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) } }
        guard bound == 0 else { return nil }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A path no other test uses.
    public func uniquePath(_ name: String = #function) -> String {
        let cleaned = name.filter { $0.isLetter || $0.isNumber }
        return "/\(cleaned)-\(UUID().uuidString.prefix(8))"
    }

    /// Runs `body(index)` on `count` threads released together, and waits for all of them.
    /// Returns false if they did not all finish within `timeout` seconds.
    @discardableResult
    public func concurrently(_ count: Int, timeout: Double = 60, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
        let group = DispatchGroup()
        let gate = Condition()
        let open = Atomic<Bool>(false)
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                _ = gate.wait(timeout: timeout) { open.load(ordering: .acquiring) }
                body(index)
            }
            thread.stackSize = 256 << 10
            thread.start()
        }
        open.store(true, ordering: .releasing)
        gate.broadcast()
        return group.wait(timeout: .now() + timeout) == .success
    }

    // MARK: The real executable, for start-up, signal and crash tests

    public var binary: URL { larderExecutable }

    public func launch(_ arguments: [String]) throws -> (Process, Pipe) {
        let path = binary.path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw skipOrFail("the larder executable is not built next to the tests (run scripts/test, or set LARDER_BINARY)")
        }
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return (process, errors)
    }

    /// Reads the process's stderr until the "listening on HOST:PORT" line; returns the port.
    public func waitForPort(_ errors: Pipe) throws -> Int {
        var seen = ""
        let handle = errors.fileHandleForReading
        while true {
            let chunk = handle.availableData
            guard !chunk.isEmpty else { throw TestClientError(description: "larder exited before listening: \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
            if let range = seen.range(of: #"listening on (https://)?[0-9.]+:([0-9]+)"#, options: .regularExpression) {
                let match = seen[range]
                return Int(match.split(separator: ":").last!)!
            }
        }
    }

    /// Reads the process's stderr until a line contains `text`; returns what it read.
    @discardableResult
    public func waitForLine(_ errors: Pipe, containing text: String) throws -> String {
        var seen = ""
        while !seen.contains(text) {
            let chunk = errors.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw TestClientError(description: "larder closed stderr before '\(text)': \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
        return seen
    }

    /// Reads the process's stderr until a whole line contains one of `texts`; returns that line.
    /// For an outcome that shows as one line or another (a reload applied, or refused).
    public func waitForLine(_ errors: Pipe, containingAnyOf texts: [String]) throws -> String {
        var seen = ""
        while true {
            let lines = seen.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            if let line = lines.first(where: { line in texts.contains { line.contains($0) } }) { return String(line) }
            let chunk = errors.fileHandleForReading.availableData
            guard !chunk.isEmpty else { throw TestClientError(description: "larder closed stderr before any of \(texts): \(seen)") }
            seen += String(decoding: chunk, as: UTF8.self)
        }
    }

    public func waitForExit(_ process: Process, timeout: Double = 20) -> Bool {
        let exited = DispatchSemaphore(value: 0)
        Thread {
            process.waitUntilExit()
            exited.signal()
        }.start()
        return exited.wait(timeout: .now() + timeout) == .success
    }

    public func url(_ path: String, _ query: String = "") -> String {
        origin.base + path + (query.isEmpty ? "" : "?" + query)
    }
}

/// Log messages captured from a Larder under test, one entry per message.
public final class LogLines: Sendable {
    private let lines = Locked<[String]>([])
    private let changed = Condition()
    public init() {}
    public func append(_ line: String) {
        lines.withLock { $0.append(line) }
        changed.broadcast()
    }
    public var all: [String] { lines.withLock { $0 } }

    /// Waits until a message containing `text` is logged (woken on each message).
    public func waitFor(_ text: String, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { all.contains { $0.contains(text) } }
    }
}

public struct CapturingLogHandler: LogHandler {
    public let lines: LogLines
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The message, then its fields as text lines show them (` key=value…`).
    public func log(event: LogEvent) {
        var fields = metadata
        if let more = event.metadata { fields.merge(more) { _, new in new } }
        lines.append(RequestFraming.printable(event.message.description) + LarderLogHandler.fieldsText(fields))
    }
}

extension XCTestCase {
    /// Starts the HTTP server alone on port 0 with `handler`, stopped (drained first) after the
    /// test; `configure` adjusts the defaults.
    public func startHTTPServer(
        handler: any HTTPRequestHandler,
        _ configure: (inout HTTPServerConfiguration) -> Void = { _ in }
    ) throws -> HTTPServer {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configure(&configuration)
        let server = HTTPServer(configuration: configuration, handler: handler)
        try server.start()
        addTeardownBlock {
            server.stopAccepting()
            server.waitForPending(timeout: 5)
            server.stop()
        }
        return server
    }
}
