// A scriptable origin on a loopback port that counts what it receives. What it answers is
// OriginScript's (LarderTesting): the query parameters listed there choose the status, headers,
// body, hold and delay of each answer.

import Dispatch
import Foundation
import LarderCore
import LarderHTTP
import LarderSync
import LarderTesting
import Logging

public final class TestOrigin: HTTPRequestHandler, @unchecked Sendable {
    // @unchecked Sendable: `server` is set once in `start`; the rest is lock-protected.
    private let log = Locked<[String: [RecordedRequest]]>([:])
    /// Delayed responses not yet sent, and the most there ever were at once.
    private let concurrency = Locked<(current: Int, peak: Int)>((0, 0))
    private let changed = Condition()
    private var server: HTTPServer!
    /// Requests held by `hold=`.
    public let holds = HeldRequests()

    public static let cookie = OriginScript.cookie

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
        let (path, _) = Self.split(request.rawTarget)
        var headers: [String: String] = [:]
        for header in request.headers { headers[header.name.lowercased()] = header.value }
        let recorded = RecordedRequest(method: request.method, target: request.rawTarget, headers: headers, body: request.body)
        let n = log.withLock { log -> Int in
            log[path, default: []].append(recorded)
            return log[path]!.count
        }
        changed.broadcast()

        let answer = OriginScript.answer(to: recorded, n: n, date: clock?.now)
        // A HEAD gets the body too: the server sends only its length (RFC 9110 §8.6).
        let response = HTTPServerResponse(status: answer.status, headers: answer.headers, body: answer.body)
        if let hold = answer.hold {
            holds.hold(path: path, hold, answer: { responder.respond(response) }, tooLong: { responder.respond(.heldTooLong) })
            return nil
        }
        if let delay = answer.delayMs {
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

    public static func split(_ target: String) -> (String, [(String, String)]) { OriginScript.split(target) }
}

extension TestOrigin {
    /// `size` bytes: "<path>|<offset>\n" lines, over and over, cut at `size`.
    public static func fill(path: String, size: Int) -> [UInt8] { OriginScript.fill(path: path, size: size) }
}
