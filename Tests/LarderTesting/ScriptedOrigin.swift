// The engine's origin in tests: an Upstream that answers as OriginScript says, in process, on
// the test's clock, and records what it was asked. Requests asked to wait (`hold=`) are kept
// until the test releases them, so overlap is certain rather than hoped for.

import Foundation
public import LarderCore
public import LarderEngine
import LarderSync

public final class ScriptedOrigin: Upstream {
    /// The origin's scheme and authority in the URLs tests build.
    public static let base = "http://origin.test"

    private struct Held {
        var completions: [@Sendable () -> Void] = []
        var released = false
    }

    private let clock: ManualClock
    private let log = Locked<[String: [RecordedRequest]]>([:])
    private let held = Locked<[String: Held]>([:])
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

    /// Requests of `path` held now.
    public func waiting(_ path: String) -> Int { held.withLock { $0[path]?.completions.count ?? 0 } }

    /// Waits until `path` has seen at least `count` requests (work the engine does in the
    /// background: a refresh after a stale answer).
    public func waitForCount(_ path: String, atLeast count: Int, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { self.count(path) >= count }
    }

    /// Waits until `count` requests of `path` are held at once.
    public func waitForHeld(_ path: String, count: Int, timeout: Double = 10) -> Bool {
        changed.wait(timeout: timeout) { self.waiting(path) >= count }
    }

    /// Answers every request of `path` held now, and those that come later at once.
    public func release(_ path: String) {
        let completions = held.withLock { held -> [@Sendable () -> Void] in
            held[path, default: Held()].released = true
            defer { held[path]?.completions.removeAll() }
            return held[path]?.completions ?? []
        }
        for complete in completions { complete() }
    }

    /// Holds the requests of `path` that ask to be held (`hold=gate`) again, after a release.
    public func hold(_ path: String) {
        held.withLock { $0[path, default: Held()].released = false }
    }

    /// From now on requests of `path` fail with `error` (nil: they are answered again).
    public func fail(_ path: String, with error: LarderError?) {
        failures.withLock { $0[path] = error }
    }

    /// The origin goes down: every request fails as libcurl's do when nothing listens.
    public func stop() { down.store(true, ordering: .relaxed) }

    /// The origin answers again.
    public func restart() { down.store(false, ordering: .relaxed) }

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
        let complete: @Sendable () -> Void = { completion(result) }
        guard let hold = answer.hold else { return complete() }
        let threshold = Int(hold)
        let release = held.withLock { held -> [@Sendable () -> Void]? in
            var entry = held[path, default: Held()]
            defer { held[path] = entry }
            guard !entry.released else { return [complete] }
            entry.completions.append(complete)
            guard let threshold, entry.completions.count >= threshold else { return nil }
            entry.released = true
            defer { entry.completions.removeAll() }
            return entry.completions
        }
        for complete in release ?? [] { complete() }
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
