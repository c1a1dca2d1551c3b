// The engine's origin in tests: an Upstream that answers as OriginScript says, in process, on
// the test's clock, and records what it was asked. Requests asked to wait (`hold=`) are kept
// in `holds` until the test releases them, as TestOrigin keeps them, so overlap is certain
// rather than hoped for.

import Foundation
public import LarderCore
public import LarderEngine
import LarderSync

public final class ScriptedOrigin: Upstream {
    /// The origin's scheme and authority in the URLs tests build.
    public static let base = "http://origin.test"

    private let clock: ManualClock
    private let log = Locked<[String: [RecordedRequest]]>([:])
    /// Requests held by `hold=`, as TestOrigin holds them.
    public let holds = HeldRequests()
    private let failures = Locked<[String: LarderError]>([:])
    private let down = Atomic<Bool>(false)
    private let changed = Condition()

    public init(clock: ManualClock) { self.clock = clock }

    /// How many requests reached `path`.
    public func count(_ path: String) -> Int { log.withLock { $0[path]?.count ?? 0 } }

    /// The requests `path` received, in order.
    public func requests(_ path: String) -> [RecordedRequest] { log.withLock { $0[path] ?? [] } }

    /// Requests received on any path.
    public var totalCount: Int { log.withLock { $0.values.reduce(0) { $0 + $1.count } } }

    /// Waits until `path` has seen at least `count` requests (work the engine does in the
    /// background: a refresh after a stale answer).
    public func waitForCount(_ path: String, atLeast count: Int, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { self.count(path) >= count }
    }

    /// From now on requests of `path` fail with `error`.
    public func fail(_ path: String, with error: LarderError) {
        failures.withLock { $0[path] = error }
    }

    /// The origin goes down: every request fails as libcurl's do when nothing listens.
    public func stop() { down.store(true, ordering: .relaxed) }

    public func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void) {
        let target = Self.target(of: request.url)
        let (path, _) = OriginScript.split(target)
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.lowercased()] = field.value }
        let recorded = RecordedRequest(method: request.method.rawValue, target: target, headers: headers, body: request.body ?? [])
        let n = log.withLock { log -> Int in
            log[path, default: []].append(recorded)
            return log[path]!.count
        }
        defer { changed.broadcast() }
        let now = clock.now
        let answer = OriginScript.answer(to: recorded, n: n, date: now)
        let result: Result<UpstreamResponse, LarderError>
        if down.load(ordering: .relaxed) {
            result = .failure(LarderError(.upstreamUnreachable, "origin.test: connection refused"))
        } else if let error = failures.withLock({ $0[path] }) {
            result = .failure(error)
        } else {
            result = .success(
                UpstreamResponse(
                    status: answer.status, headers: answer.headers.map { HeaderField($0.name, $0.value) },
                    body: request.method == .head ? [] : answer.body, requestTime: now, responseTime: now))
        }
        guard let hold = answer.hold else { return completion(result) }
        holds.hold(
            path: path, hold, answer: { completion(result) },
            tooLong: { completion(.failure(LarderError(.upstreamTimeout, "held too long"))) })
    }

    /// The path and query of `url`, as a request line carries them.
    static func target(of url: UpstreamURL) -> String {
        let absolute = url.absoluteString
        guard let schemeEnd = absolute.range(of: "://"),
            let slash = absolute[schemeEnd.upperBound...].firstIndex(where: { $0 == "/" || $0 == "?" })
        else { return "/" }
        return String(absolute[slash...])
    }
}
