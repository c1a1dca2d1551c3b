// A redis-server of the test's own on a free loopback port, in a temporary directory (Debian's
// redis-server; scripts/setup installs it with the test dependencies).

import Foundation
import XCTest

final class RedisServer {
    let port: Int
    private let process: Process
    private let directory: URL

    var url: String { "redis://127.0.0.1:\(port)" }

    static var executable: String? {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts one; `port` reuses a port (to bring a stopped server back at the same address).
    init(port: Int? = nil) throws {
        guard let executable = Self.executable else {
            throw XCTSkip("redis-server is not installed (scripts/setup installs it with LARDER_SETUP_TESTS=1)")
        }
        self.port = port ?? Self.freePort()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--port", String(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", directory.path, "--maxmemory-policy", "allkeys-lru"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Ready when it answers PING.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if (try? command(["PING"])) == "+PONG" { return }
            usleep(10_000)
        }
        stop()
        throw TestClientError(description: "redis-server did not start on port \(self.port)")
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }

    /// One command over a fresh connection; the first line of the reply.
    @discardableResult
    func command(_ arguments: [String]) throws -> String {
        let connection = try TestConnection(port: port)
        var request = "*\(arguments.count)\r\n"
        for argument in arguments { request += "$\(argument.utf8.count)\r\n\(argument)\r\n" }
        try connection.sendAll(Array(request.utf8))
        return try connection.readLine()
    }

    private static func freePort() -> Int {
        let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
