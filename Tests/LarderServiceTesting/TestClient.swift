// A minimal blocking HTTP/1.1 client over a POSIX socket, with keep-alive, so tests control
// exactly which connection each request uses.

import Foundation
import LarderCore

#if canImport(Glibc)
    import Glibc
#endif

/// A time from an admin answer, as seconds since 1970: only in the admin API's one format, an RFC
/// 3339 string in UTC with milliseconds (`2026-11-26T09:15:58.123Z`); nil for anything else.
public func adminTime(_ value: Any?) -> Double? {
    guard let text = value as? String,
        text.range(of: #"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"#, options: .regularExpression) != nil
    else { return nil }
    return RFC3339Time.parse(text)
}

public struct TestClientError: Error, CustomStringConvertible {
    public let description: String
    public init(description: String) { self.description = description }
}

/// Connects `descriptor` to 127.0.0.1:`port`; closes it and throws when that fails.
public func connectLoopback(_ descriptor: Int32, port: Int) throws {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        close(descriptor)
        throw TestClientError(description: "connect to port \(port) failed: errno \(errno)")
    }
}

public final class TestConnection {
    private let descriptor: Int32
    private var buffer: [UInt8] = []

    /// `from`: the loopback address to connect from (e.g. "127.0.0.2", another client address).
    /// `receiveBufferBytes`: a fixed socket receive buffer (the kernel's autotuning lets a
    /// client that reads nothing take in tens of megabytes on loopback).
    public init(port: Int, timeoutSeconds: Int = 30, from source: String? = nil, receiveBufferBytes: Int? = nil) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestClientError(description: "socket failed") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBufferBytes.map(Int32.init) {
            setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                close(descriptor)
                throw TestClientError(description: "bind to \(source) failed: errno \(errno)")
            }
        }
        try connectLoopback(descriptor, port: port)
    }

    private var closed = false

    deinit { if !closed { close(descriptor) } }

    /// Closes the connection now, as a client that gives up.
    public func closeSocket() {
        guard !closed else { return }
        closed = true
        close(descriptor)
    }

    /// `rawHeaderLines`: header lines sent byte for byte (each ending in CRLF). `host`: the
    /// `Host` field's value.
    public func request(
        _ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8] = [],
        rawHeaderLines: [UInt8] = [], host: String = "127.0.0.1"
    ) throws -> TestResponse {
        try sendRequest(method, target, headers: headers, body: body, rawHeaderLines: rawHeaderLines, host: host)
        return try readResponse(method: method)
    }

    /// Sends a request as `request` does, without reading its answer (`readResponse` reads it).
    public func sendRequest(
        _ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8] = [],
        rawHeaderLines: [UInt8] = [], host: String = "127.0.0.1"
    ) throws {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: \(host)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        try sendAll(Array(head.utf8) + rawHeaderLines + Array("\r\n".utf8) + body)
    }

    /// POST /fetch with a JSON object.
    public func fetch(_ object: [String: Any]) throws -> TestResponse {
        try sendFetch(object)
        return try readResponse(method: "POST")
    }

    /// Sends POST /fetch with a JSON object without reading its answer: for a request the test
    /// keeps waiting while it does something else (`readResponse(method: "POST")` reads it).
    public func sendFetch(_ object: [String: Any]) throws {
        try sendRequest(
            "POST", "/fetch", headers: ["Content-Type": "application/json"],
            body: Array(try JSONSerialization.data(withJSONObject: object)))
    }

    /// POST /fetch with raw bytes.
    public func fetchRaw(_ body: String) throws -> TestResponse {
        try request("POST", "/fetch", headers: ["Content-Type": "application/json"], body: Array(body.utf8))
    }

    /// Waits (up to the receive timeout) until the server closes the connection; true if it
    /// did. Bytes that arrive first are discarded.
    public func awaitClose() -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let received = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if received == 0 { return true }
            if received < 0 { return errno == ECONNRESET }
        }
    }

    /// Sends raw bytes and reads one response.
    public func raw(_ bytes: [UInt8], method: String = "GET") throws -> TestResponse {
        try sendAll(bytes)
        return try readResponse(method: method)
    }

    /// Sends a request and reads a chunked response line by line, calling `onLine` with each
    /// line as it arrives (before the rest of the body). Returns the status.
    public func streamLines(
        _ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8],
        onLine: (String) -> Void
    ) throws -> Int {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        try sendAll(Array((head + "\r\n").utf8) + body)
        return try readStreamedLines(onLine: onLine)
    }

    /// Reads a chunked response (a request already sent) line by line, as `streamLines`.
    public func readStreamedLines(onLine: (String) -> Void) throws -> Int {
        while !buffer.containsSequence([13, 10, 13, 10]) { try fill() }
        let end = buffer.indexOfSequence([13, 10, 13, 10])!
        let headText = String(decoding: buffer[0..<end], as: UTF8.self)
        buffer.removeFirst(end + 4)
        let status = Int(headText.split(separator: " ")[1]) ?? 0
        guard headText.lowercased().contains("transfer-encoding: chunked") else {
            throw TestClientError(description: "not chunked: \(headText)")
        }
        var pending: [UInt8] = []
        while true {
            while !buffer.containsSequence([13, 10]) { try fill() }
            let lineEnd = buffer.indexOfSequence([13, 10])!
            let size = Int(String(decoding: buffer[0..<lineEnd], as: UTF8.self), radix: 16) ?? 0
            buffer.removeFirst(lineEnd + 2)
            while buffer.count < size + 2 { try fill() }
            // Only the new bytes are searched for line ends: a line of many megabytes arrives
            // in many chunks.
            var searchFrom = pending.count
            pending.append(contentsOf: buffer[0..<size])
            buffer.removeFirst(size + 2)
            while let newline = Self.firstNewline(in: pending, from: searchFrom) {
                onLine(String(decoding: pending[0..<newline], as: UTF8.self))
                pending.removeFirst(newline + 1)
                searchFrom = 0
            }
            if size == 0 { return status }
        }
    }

    /// memchr: a test build is not optimised, and a byte-by-byte search of a long line is slow.
    private static func firstNewline(in bytes: [UInt8], from start: Int) -> Int? {
        guard start < bytes.count else { return nil }
        return bytes.withUnsafeBytes { raw -> Int? in
            guard let found = memchr(raw.baseAddress! + start, 10, raw.count - start) else { return nil }
            return raw.baseAddress!.distance(to: UnsafeRawPointer(found))
        }
    }

    public func sendAll(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw TestClientError(description: "send failed: errno \(errno)") }
            offset += sent
        }
    }

    /// One CRLF-terminated line (without the CRLF): for line protocols (the Redis test helper).
    public func readLine() throws -> String {
        while true {
            if let end = buffer.indices.dropLast().first(where: { buffer[$0] == 13 && buffer[$0 + 1] == 10 }) {
                defer { buffer.removeFirst(end + 2) }
                return String(decoding: buffer[..<end], as: UTF8.self)
            }
            try fill()
        }
    }

    /// Exactly `count` bytes (binary line protocols: the Redis test helper).
    public func readExactly(_ count: Int) throws -> [UInt8] {
        while buffer.count < count { try fill() }
        defer { buffer.removeFirst(count) }
        return Array(buffer[..<count])
    }

    private func fill() throws {
        var chunk = [UInt8](repeating: 0, count: 65536)
        let received = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
        guard received > 0 else { throw TestClientError(description: received == 0 ? "connection closed" : "recv failed: errno \(errno)") }
        buffer.append(contentsOf: chunk[0..<received])
    }

    public func readResponse(method: String) throws -> TestResponse {
        var headEnd: Int?
        var searchFrom = 0
        while headEnd == nil {
            if buffer.count >= 4 {
                for index in searchFrom...(buffer.count - 4)
                where buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
                    headEnd = index
                    break
                }
                searchFrom = max(0, buffer.count - 3)
            }
            if headEnd == nil { try fill() }
        }
        let rawHead = Array(buffer[0..<headEnd!])
        let head = String(decoding: rawHead, as: UTF8.self)
        buffer.removeFirst(headEnd! + 4)
        let lines = head.components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else {
            throw TestClientError(description: "bad status line: \(lines[0])")
        }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let length = method == "HEAD" ? 0 : Int(headers["content-length"] ?? "0") ?? 0
        while buffer.count < length { try fill() }
        let body = Array(buffer[0..<length])
        buffer.removeFirst(length)
        return TestResponse(status: status, headers: headers, body: body, rawHead: rawHead)
    }
}

extension Array where Element == UInt8 {
    public func indexOfSequence(_ pattern: [UInt8]) -> Int? {
        guard count >= pattern.count else { return nil }
        for start in 0...(count - pattern.count) where self[start..<(start + pattern.count)].elementsEqual(pattern) { return start }
        return nil
    }

    public func containsSequence(_ pattern: [UInt8]) -> Bool { indexOfSequence(pattern) != nil }
}
