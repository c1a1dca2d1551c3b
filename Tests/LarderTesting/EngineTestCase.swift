// The engine harness: the cache's decisions tested without sockets. Each test gets a
// FetchEngine over a store of its own, a ScriptedOrigin as its upstream and a ManualClock, and
// talks to it as a client talks to /fetch (a request spec in, the JSON envelope out) or to the
// reverse proxy (a shared cache's request in, the response and its cache report out).
//
// A test body in `onEachStore { … }` runs once on each store `stores` names (the memory store
// by default; a subclass adds SQLite on a temporary file), as Hummingbird runs one body against
// its router and a live server: a failure names the store it happened on.

import Foundation
public import LarderCore
public import LarderEngine
import LarderSync
import Logging
public import XCTest

/// A store the engine's tests run on: how to make one in a directory of the test's own, and
/// how to let go of it.
public struct StoreUnderTest: Sendable {
    public typealias Made = (store: any CacheStore, close: @Sendable () -> Void)
    public let name: String
    /// Whether what it holds outlives it (`reopenStore`).
    public let persistent: Bool
    /// Makes the store in `directory` (made again there by `reopenStore`).
    public let make: @Sendable (_ directory: URL, _ settings: StoreSettings) throws -> Made

    public init(name: String, persistent: Bool, make: @escaping @Sendable (URL, StoreSettings) throws -> Made) {
        self.name = name
        self.persistent = persistent
        self.make = make
    }

    public static let memory = StoreUnderTest(name: "memory", persistent: false) { _, settings in
        (MemoryCacheStore(maxVariants: settings.maxVariants), {})
    }
}

/// What a test may set about its store, as a deployment sets it.
public struct StoreSettings: Sendable {
    /// Variants kept per key (`maxVariants`).
    public var maxVariants = 16
    public init() {}
}

/// What the engine answered a proxied request: the response as the route gets it.
public struct ProxyAnswer: Sendable {
    public let answer: CacheAnswer
    public var served: ServedResponse? {
        if case .served(let served) = answer { return served }
        return nil
    }
    public var status: Int? { served?.status }
    public var outcome: CacheOutcome? { served?.report.outcome }
    public var stored: Bool? { served?.report.stored }
    public var text: String { served.map { String(decoding: $0.body, as: UTF8.self) } ?? "" }
    public var error: LarderError? {
        if case .failed(let error) = answer { return error }
        return nil
    }
    /// The first value of the response field `name`.
    public func header(_ name: String) -> String? { served?.headers.first(named: name.lowercased()) }
}

/// An answer that comes later (while the origin holds its request).
public final class Pending<Value: Sendable>: Sendable {
    private let answer = Locked<Value?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func deliver(_ value: Value) {
        answer.withLock { $0 = value }
        done.signal()
    }

    /// Whether the answer has come.
    public var isAnswered: Bool { answer.withLock { $0 != nil } }

    /// The answer, once it comes (nil after `timeout` seconds without one).
    public func wait(timeout: Double = 10) -> Value? {
        guard done.wait(timeout: .now() + timeout) == .success else { return nil }
        done.signal()
        return answer.withLock { $0 }
    }
}

open class EngineTestCase: XCTestCase {
    /// The stores every test of the class runs on, one after the other.
    open class var stores: [StoreUnderTest] { [.memory] }

    public private(set) var clock: ManualClock!
    public private(set) var origin: ScriptedOrigin!
    /// The engine the helpers (`fetch`, `proxy`) go through; a test may set another over the
    /// same store (a second instance).
    public var engine: FetchEngine!
    public private(set) var store: (any CacheStore)!
    /// The store the running body uses.
    public private(set) var storeName = ""
    /// The test's own directory (for a store's files), removed after the test.
    public private(set) var directory: URL!
    public let keys = CacheKeyBuilder(secret: Array(repeating: 7, count: 32))
    private var closeStore: @Sendable () -> Void = {}
    private var current = StoreUnderTest.memory
    /// The settings stores are made with; set before `onEachStore`.
    public var storeSettings = StoreSettings()
    /// The codec engines compress stored bodies with (none: stored as they came); set before
    /// `onEachStore`.
    public var bodyCodec: (any BodyCodec)?
    /// Where engines with a codec keep compression dictionaries: the store's own when it keeps
    /// them (SQLite), one in memory otherwise.
    public private(set) var dictionaryStore: (any DictionaryStore)?

    /// Runs `body` once on each store `stores` names, each time with an engine, an origin, a
    /// clock and a store of its own; a failure names the store it happened on.
    /// `persistent`: only on the stores whose entries outlive them (a test of `reopenStore`).
    public func onEachStore(persistent: Bool = false, _ body: () throws -> Void) throws {
        for store in Self.stores where store.persistent || !persistent {
            try setUp(store)
            defer { tearDownStore() }
            try body()
        }
    }

    private func setUp(_ under: StoreUnderTest) throws {
        // On a whole second: the origin's Date field (whole seconds) then reads the clock
        // exactly, so apparent ages are whole and ttl figures exact.
        clock = ManualClock(start: Date().timeIntervalSince1970.rounded(.down))
        origin = ScriptedOrigin(clock: clock)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("larder-engine-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        current = under
        let made = try under.make(directory, storeSettings)
        store = made.store
        closeStore = made.close
        storeName = under.name
        dictionaryStore = Self.dictionaries(of: made.store) ?? MemoryDictionaryStore()
        engine = makeEngine(limits: FetchEngine.Limits())
    }

    /// Closes the store and opens it again from its files, with a new engine over it: what a
    /// restart of the service keeps (`onEachStore(persistent: true)`).
    public func reopenStore(limits: FetchEngine.Limits = FetchEngine.Limits()) throws {
        engine = nil
        store = nil
        closeStore()
        let made = try current.make(directory, storeSettings)
        store = made.store
        closeStore = made.close
        dictionaryStore = Self.dictionaries(of: made.store) ?? MemoryDictionaryStore()
        engine = makeEngine(limits: limits)
    }

    /// The dictionaries `store` keeps, or the store behind its memory tier keeps.
    private static func dictionaries(of store: any CacheStore) -> (any DictionaryStore)? {
        (store as? any DictionaryStore) ?? ((store as? MemoryTier)?.backing as? any DictionaryStore)
    }

    private func tearDownStore() {
        engine = nil
        store = nil
        dictionaryStore = nil
        closeStore()
        closeStore = {}
        if let directory { try? FileManager.default.removeItem(at: directory) }
        storeName = ""
    }

    override open func recordFailure(withDescription description: String, inFile filePath: String, atLine lineNumber: Int, expected: Bool) {
        let store = storeName.isEmpty ? "" : "[\(storeName) store] "
        super.recordFailure(withDescription: store + description, inFile: filePath, atLine: lineNumber, expected: expected)
    }

    /// An engine over the test's store and origin, with `limits`.
    public func makeEngine(limits: FetchEngine.Limits) -> FetchEngine {
        FetchEngine(
            store: store, upstream: origin, keys: keys, clock: clock.clock, limits: limits, bodyCodec: bodyCodec,
            dictionaryStore: bodyCodec == nil ? nil : dictionaryStore, logger: Logger(label: "engine-test"))
    }

    /// Replaces the engine with one over the same store: what a restart keeps.
    public func restartEngine(limits: FetchEngine.Limits = FetchEngine.Limits()) {
        engine = makeEngine(limits: limits)
    }

    /// The origin's URL for `path` with `query`.
    public func url(_ path: String, _ query: String = "") -> String {
        ScriptedOrigin.base + path + (query.isEmpty ? "" : "?" + query)
    }

    /// A path no other test uses.
    public func uniquePath(_ name: String = #function) -> String {
        "/" + name.filter { $0.isLetter || $0.isNumber } + "-" + UUID().uuidString.prefix(8)
    }

    /// What POST /fetch answers `spec` with: the envelope, or the error (status and JSON body).
    public func fetch(_ spec: [String: Any], file: StaticString = #filePath, line: UInt = #line) -> TestResponse {
        guard let response = fetchLater(spec).wait() else {
            XCTFail("no answer within 10 s (is the origin holding it?)", file: file, line: line)
            return TestResponse(status: 0, headers: [:], body: [])
        }
        return response
    }

    /// Sends `spec` as POST /fetch does and returns at once; the answer comes when the origin
    /// answers (a held request, when the test releases it).
    public func fetchLater(_ spec: [String: Any]) -> Pending<TestResponse> {
        let pending = Pending<TestResponse>()
        let request: FetchRequest
        do {
            let body = try JSONSerialization.data(withJSONObject: spec, options: [.sortedKeys])
            request = try FetchRequest.parse(json: Array(body))
        } catch let error as LarderError {
            pending.deliver(Self.render(.failed(error)))
            return pending
        } catch {
            XCTFail("unencodable spec: \(error)")
            pending.deliver(TestResponse(status: 0, headers: [:], body: []))
            return pending
        }
        send(request, keepingBody: false, storingHead: true) { pending.deliver(Self.render($0)) }
        return pending
    }

    /// Hands `request` to the engine as the routes do: a HEAD is answered from a stored GET when
    /// there is one (its body kept when `keepingBody`), else sent on, and stored only when
    /// `storingHead` (the proxy stores no HEAD response).
    private func send(
        _ request: FetchRequest, keepingBody: Bool, storingHead: Bool, reply: @escaping @Sendable (CacheAnswer) -> Void
    ) {
        if request.method == .head, let fromGet = engine.storedGet(for: request, keepingBody: keepingBody) {
            return reply(fromGet)
        }
        var request = request
        if request.method == .head, !storingHead { request.cache.policy = .noStore }
        if let immediate = engine.fetch(engine.prepare(request), reply: reply) { reply(immediate) }
    }

    /// The answer as /fetch renders it: 200 with the envelope and X-Cache, or the error.
    public static func render(_ answer: CacheAnswer) -> TestResponse {
        switch answer {
        case .failed(let error):
            return TestResponse(status: error.status, headers: ["content-type": "application/json"], body: error.jsonBody)
        case .served(let served):
            let body = Envelope.render(
                status: served.status, headersJSON: served.headersJSON, body: served.body,
                kind: served.bodyKind, cache: served.report, totalMs: 0, upstreamMs: served.upstreamMs)
            return TestResponse(
                status: 200, headers: ["content-type": "application/json", "x-cache": served.report.outcome.headerValue], body: body)
        }
    }

    /// A request to the reverse proxy for `target` on the origin, as the proxy route hands it to
    /// the engine: a shared cache's request (RFC 9111 §3.5), credentials not in the key, in the
    /// namespace of the named upstream `upstream` (whose `staleOnError` is `staleOnError`).
    public func proxy(
        _ target: String, method: HTTPMethod = .get, headers: [(String, String)] = [], body: [UInt8]? = nil,
        upstream: String = "origin", staleOnError: Double? = nil, file: StaticString = #filePath, line: UInt = #line
    ) throws -> ProxyAnswer {
        var options = CacheOptions()
        options.namespace = FetchRequest.reservedNamespacePrefix + upstream
        options.staleOnError = staleOnError
        let request = FetchRequest(
            method: method, url: try UpstreamURL(parsing: ScriptedOrigin.base + target), headers: headers.map { HeaderField($0.0, $0.1) },
            body: body, cache: options, shared: true)
        let pending = Pending<CacheAnswer>()
        send(request, keepingBody: true, storingHead: false) { pending.deliver($0) }
        guard let answered = pending.wait() else {
            XCTFail("no answer within 10 s (is the origin holding it?)", file: file, line: line)
            return ProxyAnswer(answer: .failed(LarderError(.cancelled, "no answer")))
        }
        return ProxyAnswer(answer: answered)
    }
}
