// A redis-server of the test's own on a free loopback port, in a temporary directory (Debian's
// redis-server; scripts/setup installs it with the test dependencies).

import Foundation
import LarderService
import XCTest

public final class RedisServer {
    public let port: Int
    private let process: Process
    private let directory: URL

    public var url: String { "redis://127.0.0.1:\(port)" }

    public static var executable: String? {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts one; `port` reuses a port (to bring a stopped server back at the same address);
    /// `cluster` starts it as a Redis Cluster node (RedisClusterNodes joins them).
    public init(port: Int? = nil, cluster: Bool = false) throws {
        guard let executable = Self.executable else {
            throw skipOrFail("redis-server is not installed (scripts/setup installs it with LARDER_SETUP_TESTS=1)")
        }
        self.port = port ?? IntegrationTestCase.freeLoopbackPort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments =
            [
                "--port", String(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", directory.path, "--maxmemory-policy", "allkeys-lfu"
            ]
            + (cluster ? ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"] : [])
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Ready when it answers PING.
        let ready = eventually(every: 0.01) { (try? command(["PING"])) == "+PONG" }
        if ready { return }
        stop()
        throw TestClientError(description: "redis-server did not start on port \(self.port)")
    }

    public func stop() {
        if process.isRunning {
            // A stopped process (pause) would hold SIGTERM until continued.
            resume()
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing is answered, as with a
    /// Redis that hangs. `resume` (or `stop`) undoes it.
    public func pause() { kill(process.processIdentifier, SIGSTOP) }

    /// SIGCONT; harmless when not paused.
    public func resume() { kill(process.processIdentifier, SIGCONT) }

    deinit { stop() }

    /// One command over a fresh connection; the first line of the reply.
    @discardableResult
    public func command(_ arguments: [String]) throws -> String {
        let connection = try TestConnection(port: port)
        var request = "*\(arguments.count)\r\n"
        for argument in arguments { request += "$\(argument.utf8.count)\r\n\(argument)\r\n" }
        try connection.sendAll(Array(request.utf8))
        return try connection.readLine()
    }

    public var isRunning: Bool { process.isRunning }

    /// One command with binary arguments over a fresh connection, and its whole reply (what a
    /// raw client, or an attacker with access to Redis, would send).
    public func send(_ arguments: [[UInt8]]) throws -> RESPValue {
        let connection = try TestConnection(port: port, timeoutSeconds: 10)
        var request = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments { request += Array("$\(argument.count)\r\n".utf8) + argument + Array("\r\n".utf8) }
        try connection.sendAll(request)
        return try RESPValue.read(from: connection)
    }

    public func send(_ arguments: [String]) throws -> RESPValue { try send(arguments.map { Array($0.utf8) }) }

    /// Every key, by SCAN.
    public func allKeys() throws -> [String] {
        var keys: [String] = []
        var cursor = "0"
        repeat {
            let reply = try send(["SCAN", cursor, "COUNT", "1000"]).array
            guard reply.count == 2, let next = reply[0].text else { throw TestClientError(description: "unexpected SCAN reply") }
            keys += reply[1].array.compactMap(\.text)
            cursor = next
        } while cursor != "0"
        return keys
    }
}

/// A Redis reply (RESP2).
public enum RESPValue: Equatable, Sendable {
    case status(String)
    case error(String)
    case integer(Int)
    case bytes([UInt8])
    case null
    case array([RESPValue])

    public var bytes: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    public var text: String? { bytes.map { String(decoding: $0, as: UTF8.self) } }
    public var array: [RESPValue] { if case .array(let values) = self { values } else { [] } }

    public static func read(from connection: TestConnection) throws -> RESPValue {
        let line = try connection.readLine()
        guard let kind = line.first else { throw TestClientError(description: "empty RESP line") }
        let rest = String(line.dropFirst())
        switch kind {
        case "+": return .status(rest)
        case "-": return .error(rest)
        case ":": return .integer(Int(rest) ?? 0)
        case "$":
            guard let count = Int(rest), count >= 0 else { return .null }
            let value = try connection.readExactly(count + 2)
            return .bytes(Array(value.dropLast(2)))
        case "*":
            guard let count = Int(rest), count >= 0 else { return .null }
            return .array(try (0..<count).map { _ in try read(from: connection) })
        default:
            throw TestClientError(description: "unexpected RESP line \(line)")
        }
    }
}

/// A Redis Cluster of the test's own: 3 masters and 3 replicas on loopback ports, joined with
/// `redis-cli --cluster create` (from redis-tools, which redis-server brings).
public final class RedisClusterNodes {
    public let nodes: [RedisServer]

    /// Every node as a seed, as a deployment would list them (any one may be down).
    public var url: String { "redis-cluster://" + nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") }

    public init() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/redis-cli") else {
            throw skipOrFail("redis-cli is not installed (it comes with redis-server)")
        }
        nodes = try Self.startNodes()
        let create = Process()
        create.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
        create.arguments = ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + ["--cluster-replicas", "1", "--cluster-yes"]
        create.standardOutput = FileHandle.nullDevice
        create.standardError = FileHandle.nullDevice
        try create.run()
        create.waitUntilExit()
        guard create.terminationStatus == 0, waitUntilHealthy() else {
            stop()
            throw TestClientError(description: "the Redis Cluster did not form")
        }
    }

    /// Six nodes on free ports whose cluster bus ports (port + 10000) are free too. Ports are
    /// picked, then bound by redis-server: another process may take one in between, so a set
    /// that does not start is stopped and picked again (twice at most).
    private static func startNodes() throws -> [RedisServer] {
        var attempt = 0
        while true {
            attempt += 1
            var ports: Set<Int> = []
            while ports.count < 6 {
                let port = IntegrationTestCase.freeLoopbackPort()
                if port < 55_535, IntegrationTestCase.isFreeLoopbackPort(port + 10_000) { ports.insert(port) }
            }
            var started: [RedisServer] = []
            do {
                for port in ports.sorted() { started.append(try RedisServer(port: port, cluster: true)) }
                return started
            } catch {
                started.forEach { $0.stop() }
                if attempt == 3 { throw error }
            }
        }
    }

    /// Waits until every running node reports cluster_state:ok and three running nodes are
    /// masters (after a master was stopped: until its replica has taken over).
    @discardableResult
    public func waitUntilHealthy(timeout: Double = 30) -> Bool {
        eventually(timeout: timeout, every: 0.1) {
            nodes.filter(\.isRunning).allSatisfy { node in
                (try? node.bulk(["CLUSTER", "INFO"]))?.contains("cluster_state:ok") == true
            } && masters().count == 3
        }
    }

    /// The nodes that are masters now.
    public func masters() -> [RedisServer] {
        nodes.filter { node in node.isRunning && (try? node.bulk(["ROLE"]))?.contains("master") == true }
    }

    public func stop() { nodes.forEach { $0.stop() } }
}

extension RedisServer {
    /// A command's whole reply as text (bulk strings and arrays of them), for inspection.
    public func bulk(_ arguments: [String]) throws -> String {
        let output = Pipe()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
        process.arguments = ["-p", String(port)] + arguments
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}

extension IntegrationTestCase {
    /// A secret file as an operator makes one for a shared store
    /// (`head -c 32 /dev/urandom | base64 > larder.secret`), in the test's directory.
    public func makeSecretFile(_ name: String = "larder.secret") throws -> String {
        var generator = SystemRandomNumberGenerator()
        let random = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let path = directory.appendingPathComponent(name).path
        try Data((Data(random).base64EncodedString() + "\n").utf8).write(to: URL(fileURLWithPath: path))
        return path
    }
}

/// A test case whose Larders share one redis-server of its own and one operator's secret file.
open class SharedStoreTestCase: IntegrationTestCase {
    public var redis: RedisServer!
    /// The secret every instance of a test shares (--secret-file).
    public var secretFile: String!

    open override func setUpWithError() throws {
        try super.setUpWithError()
        redis = try RedisServer()
        secretFile = try makeSecretFile()
    }

    open override func tearDown() {
        super.tearDown()
        redis?.stop()
    }

    /// A Larder on the test's Redis, with the shared secret and a database path of its own.
    public func startShared(logLines: LogLines? = nil, _ configure: (inout LarderConfiguration) -> Void = { _ in }) throws -> RunningLarder
    {
        try startLarder(logLines: logLines) { configuration in
            configuration.store = self.redis.url
            configuration.secretPath = self.secretFile
            configuration.databasePath = self.directory.appendingPathComponent("unused-\(UUID().uuidString).sqlite").path
            configure(&configuration)
        }
    }
}

/// `redis-cli monitor` on a server: every command it runs from now on, one line each.
public final class RedisMonitor {
    private let process = Process()
    private let output: URL
    private let startMarker = "monitor-start-\(UUID().uuidString)"

    public init(port: Int) throws {
        output = FileManager.default.temporaryDirectory.appendingPathComponent("larder-monitor-\(UUID().uuidString)")
        FileManager.default.createFile(atPath: output.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/redis-cli")
        process.arguments = ["-p", String(port), "monitor"]
        process.standardOutput = try FileHandle(forWritingTo: output)
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Watching once a command sent now shows; what comes after it is what the test sees.
        let watching = eventually(every: 0.02) {
            _ = try? RedisServer.echo(startMarker, port: port)
            return self.lines.contains { $0.contains(self.startMarker) }
        }
        guard watching else { throw TestClientError(description: "redis-cli monitor did not start") }
    }

    private var lines: [String] {
        String(decoding: (try? Data(contentsOf: output)) ?? Data(), as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// The lines since the monitor started, up to a marker sent now, which is then known to
    /// come after all of them.
    public func linesUntilMarker(using redis: RedisServer) throws -> [String] {
        let marker = "monitor-end-\(UUID().uuidString)"
        _ = try RedisServer.echo(marker, port: redis.port)
        var seen: [String] = []
        guard
            eventually(
                every: 0.02,
                {
                    seen = self.lines
                    return seen.contains { $0.contains(marker) }
                })
        else {
            throw TestClientError(description: "the monitor never showed its end marker")
        }
        let started = seen.lastIndex { $0.contains(startMarker) } ?? -1
        return Array(seen[(started + 1)...].prefix { !$0.contains(marker) })
    }

    public func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: output)
    }

    deinit { stop() }
}

extension RedisServer {
    static func echo(_ text: String, port: Int) throws -> String {
        let connection = try TestConnection(port: port)
        let request = "*2\r\n$4\r\nECHO\r\n$\(text.utf8.count)\r\n\(text)\r\n"
        try connection.sendAll(Array(request.utf8))
        return try connection.readLine()
    }
}
