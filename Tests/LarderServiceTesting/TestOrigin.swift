// A scriptable origin on a loopback port that counts what it receives.
//
// Behaviour is chosen per request by query parameters:
//   status=NNN         response status (default 200)
//   unsafe=NNN         response status for methods other than GET and HEAD
//   delay=MS           answer after MS milliseconds (the connection waits, nothing blocks)
//   hold=N|gate        answer once N requests of the path wait, or the test releases it (HoldingOrigin.swift)
//   size=N             body of N bytes of "a" (text/plain) instead of the default JSON
//   cc=VALUE           Cache-Control
//   ct=VALUE           Content-Type
//   h=Name:Value       an extra response header (repeatable)
//   location=URL       Location header (use with status=302 etc.)
//   clself=1           Content-Location naming the request's own target
//   cookie=1           Set-Cookie: TestOrigin.cookie (a value that appears nowhere in the URL)
//   etag=VALUE         ETag header; a request whose If-None-Match matches gets 304
//   lm=HTTP-DATE       Last-Modified header; a request whose If-Modified-Since equals it gets 304
//   loop=1             Location header pointing back at this very request
//   binary=1           a small binary body
//   jsonsize=N         a JSON array of about N bytes (application/json)
//   fill=N             N bytes of text made from the path (TestOrigin.fill), so any body can be recomputed
// The default body is JSON: {"path": …, "n": <how many requests this path has seen>,
// "method": …, "query": …, "body": <request body as text>, "headers": {…}}.

import Dispatch
import Foundation
import LarderCore
import LarderHTTP
import LarderSync
import LarderTesting
import Logging

public struct RecordedRequest: Sendable {
    public let method: String
    public let target: String
    public let headers: [String: String]
    public let body: [UInt8]
}

public final class TestOrigin: HTTPRequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `server` is set once in `start`; the rest is lock-protected.
    private let log = Locked<[String: [RecordedRequest]]>([:])
    /// Delayed responses not yet sent, and the most there ever were at once.
    private let concurrency = Locked<(current: Int, peak: Int)>((0, 0))
    private let changed = Condition()
    private var server: HTTPServer!
    /// Requests held by `hold=`.
    public let holds = HeldRequests()

    public static let cookie = "sid=origin-cookie-secret-4242"

    public var port: Int { server.port }
    public var base: String { "http://127.0.0.1:\(port)" }

    /// The clock Larder runs on in the test: the origin's Date headers follow it, as a real
    /// origin's follow a synchronised real clock (apparent ages stay truthful).
    private let clock: ManualClock?

    private init(clock: ManualClock?) { self.clock = clock }

    public static func start(clock: ManualClock? = nil) throws -> TestOrigin {
        let origin = TestOrigin(clock: clock)
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        configuration.threads = 2
        configuration.maxRequestBodyBytes = 4 << 20
        origin.server = HTTPServer(configuration: configuration, handler: origin)
        try origin.server.start()
        return origin
    }

    public func stop() {
        server.stopAccepting()
        server.waitForPending(timeout: 10)
        server.stop()
    }

    /// How many requests reached `path`.
    public func count(_ path: String) -> Int {
        log.withLock { $0[path]?.count ?? 0 }
    }

    public func requests(_ path: String) -> [RecordedRequest] {
        log.withLock { $0[path] ?? [] }
    }

    /// Requests received on any path.
    public var totalCount: Int { log.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    /// The most delayed (`delay=`) requests that were waiting for their answer at once.
    public var peakConcurrency: Int { concurrency.withLock { $0.peak } }

    /// Delayed requests received and not yet answered.
    public var pendingDelayed: Int { concurrency.withLock { $0.current } }

    /// Waits until `path` has seen at least `count` requests (woken on each arrival).
    public func waitForCount(_ path: String, atLeast count: Int, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { self.count(path) >= count }
    }

    public func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse? {
        let (path, query) = Self.split(request.rawTarget)
        var headers: [String: String] = [:]
        for header in request.headers { headers[header.name.lowercased()] = header.value }
        let recorded = RecordedRequest(method: request.method, target: request.rawTarget, headers: headers, body: request.body)
        let n = log.withLock { log -> Int in
            log[path, default: []].append(recorded)
            return log[path]!.count
        }
        changed.broadcast()

        var status = Int(query.first { $0.0 == "status" }?.1 ?? "") ?? 200
        if request.method != "GET", request.method != "HEAD", let unsafe = query.first(where: { $0.0 == "unsafe" }).flatMap({ Int($0.1) }) {
            status = unsafe
        }
        let etag = query.first { $0.0 == "etag" }?.1
        let lastModified = query.first { $0.0 == "lm" }?.1
        let notModified =
            (etag != nil && headers["if-none-match"] == etag)
            || (lastModified != nil && headers["if-modified-since"] == lastModified)
        if notModified { status = 304 }
        var responseHeaders: [(name: String, value: String)] = []
        var body: [UInt8]
        if let size = query.first(where: { $0.0 == "size" }).flatMap({ Int($0.1) }) {
            body = [UInt8](repeating: UInt8(ascii: "a"), count: size)
            responseHeaders.append(("Content-Type", "text/plain"))
        } else if let size = query.first(where: { $0.0 == "fill" }).flatMap({ Int($0.1) }) {
            body = TestOrigin.fill(path: path, size: size)
            responseHeaders.append(("Content-Type", "text/plain"))
        } else if let size = query.first(where: { $0.0 == "jsonsize" }).flatMap({ Int($0.1) }) {
            body = Array("[".utf8) + Array(repeating: Array("123,".utf8), count: max(0, size / 4)).flatMap { $0 } + Array("0]".utf8)
            responseHeaders.append(("Content-Type", "application/json"))
        } else if query.contains(where: { $0.0 == "binary" }) {
            body = [0xFF, 0x00, 0xFE, 0x01, 0x80]
            responseHeaders.append(("Content-Type", "application/octet-stream"))
        } else {
            let document: [String: Any] = [
                "path": path, "n": n, "method": request.method,
                "query": Dictionary(query.map { ($0.0, $0.1) }, uniquingKeysWith: { $1 }),
                "body": String(decoding: request.body, as: UTF8.self), "headers": headers
            ]
            body = Array(try! JSONSerialization.data(withJSONObject: document, options: [.sortedKeys]))
            if !query.contains(where: { $0.0 == "ct" }) { responseHeaders.append(("Content-Type", "application/json")) }
        }
        for (name, value) in query {
            switch name {
            case "cc": responseHeaders.append(("Cache-Control", value))
            case "ct": responseHeaders.append(("Content-Type", value))
            case "location": responseHeaders.append(("Location", value))
            case "loop": responseHeaders.append(("Location", request.rawTarget))
            case "clself": responseHeaders.append(("Content-Location", request.rawTarget))
            case "cookie": responseHeaders.append(("Set-Cookie", TestOrigin.cookie))
            case "etag": responseHeaders.append(("ETag", value))
            case "lm": responseHeaders.append(("Last-Modified", value))
            case "h":
                if let colon = value.firstIndex(of: ":") {
                    responseHeaders.append((String(value[..<colon]), String(value[value.index(after: colon)...])))
                }
            default: break
            }
        }
        if notModified { responseHeaders.removeAll { $0.name == "Content-Type" } }
        if let clock { responseHeaders.append(("Date", HTTPDate.format(clock.now))) }
        // A HEAD gets the body too: the server sends only its length (RFC 9110 §8.6).
        let response = HTTPServerResponse(status: status, headers: responseHeaders, body: notModified ? [] : body)
        if let hold = query.first(where: { $0.0 == "hold" })?.1 {
            holds.hold(path: path, hold, answer: { responder.respond(response) }, tooLong: { responder.respond(.heldTooLong) })
            return nil
        }
        if let delay = query.first(where: { $0.0 == "delay" }).flatMap({ Int($0.1) }) {
            concurrency.withLock {
                $0.current += 1
                $0.peak = max($0.peak, $0.current)
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(delay)) { [self] in
                concurrency.withLock { $0.current -= 1 }
                responder.respond(response)
            }
            return nil
        }
        return response
    }

    public static func split(_ target: String) -> (String, [(String, String)]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, []) }
        let path = String(target[..<mark])
        let query = target[target.index(after: mark)...].split(separator: "&").map { pair -> (String, String) in
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            let name = parts[0].removingPercentEncoding ?? parts[0]
            let value = parts.count > 1 ? (parts[1].replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? parts[1]) : ""
            return (name, value)
        }
        return (path, query)
    }
}

/// A condition variable with a predicate wait, for awaiting events across threads.
public final class Condition: @unchecked Sendable {
    // @unchecked Sendable: NSCondition is thread-safe.
    private let condition = NSCondition()

    public init() {}

    public func broadcast() {
        condition.lock()
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until `predicate` holds (checked on every broadcast) or `timeout` passes.
    public func wait(timeout: Double, until predicate: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !predicate() {
            if !condition.wait(until: deadline) { return predicate() }
        }
        return true
    }
}

extension TestOrigin {
    /// `size` bytes: "<path>|<offset>\n" lines, over and over, cut at `size`.
    public static func fill(path: String, size: Int) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(size)
        while body.count < size { body.append(contentsOf: "\(path)|\(body.count)\n".utf8) }
        return Array(body.prefix(size))
    }
}
