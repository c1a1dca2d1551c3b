// The engine's view of the outside world. Adapters implement these; tests use the
// in-memory store.

public import LarderCore
import Dispatch
import Foundation
import LarderSync

/// One cached response as stored.
///
/// A value with copy-on-write storage: its fields live in one object that copies share until
/// one of them is changed. A hit copies its entry several times (out of the memory tier, the
/// chosen variant, the answer), and copying two dozen reference-counted fields retained and
/// released each of them every time, from both event loops on the same entries.
public struct StoredEntry: Sendable, Equatable {
    /// The fields themselves.
    struct Fields: Sendable {
        var key: CacheKey
        var primaryKey: CacheKey
        var varyNames: [String]
        var variantFingerprint: String?
        var namespace: String
        var method: HTTPMethod
        var url: String
        var urlKey: String
        var status: Int
        var headersJSON: [UInt8]
        var headerFields: [HeaderField]
        var body: [UInt8]
        var bodyKind: BodyKind
        var freshness: EntryFreshness
        var sensitiveFingerprint: String?
        var etag: String?
        var lastModified: String?
        var bodyFile: BodyFile?
        var openedBody: OwnedDescriptor?
        var tags: [String]
    }

    /// @unchecked Sendable: `fields` is changed only through `change`, on a box no other
    /// entry shares.
    final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Fields) -> Void) {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
        body(&storage.fields)
    }

    /// The row's own key: the primary key, or the primary key and a variant (Vary).
    public var key: CacheKey {
        get { storage.fields.key }
        set { change { $0.key = newValue } }
    }
    /// The request's cache key; all variants of a response share it.
    public var primaryKey: CacheKey {
        get { storage.fields.primaryKey }
        set { change { $0.primaryKey = newValue } }
    }
    /// The request fields the response varies on (lower-cased, sorted); empty when it does not.
    public var varyNames: [String] {
        get { storage.fields.varyNames }
        set { change { $0.varyNames = newValue } }
    }
    /// HMAC of the nominated fields' values when it varies (CacheKeyBuilder.variantFingerprint).
    public var variantFingerprint: String? {
        get { storage.fields.variantFingerprint }
        set { change { $0.variantFingerprint = newValue } }
    }
    public var namespace: String {
        get { storage.fields.namespace }
        set { change { $0.namespace = newValue } }
    }
    public var method: HTTPMethod {
        get { storage.fields.method }
        set { change { $0.method = newValue } }
    }
    public var url: String {
        get { storage.fields.url }
        set { change { $0.url = newValue } }
    }
    /// The normalised URL (UpstreamURL.keyString()), for invalidation by URI (RFC 9111 §4.4).
    public var urlKey: String {
        get { storage.fields.urlKey }
        set { change { $0.urlKey = newValue } }
    }
    public var status: Int {
        get { storage.fields.status }
        set { change { $0.status = newValue } }
    }
    /// The response headers as a JSON object, pre-rendered (names lower-cased, no Set-Cookie).
    /// Setting it parses the fields again.
    public var headersJSON: [UInt8] {
        get { storage.fields.headersJSON }
        set {
            let fields = ResponseHeaders.parseJSON(newValue)
            change {
                $0.headersJSON = newValue
                $0.headerFields = fields
            }
        }
    }
    /// The same headers as fields, parsed once (the proxy sends them on every hit).
    public var headerFields: [HeaderField] { storage.fields.headerFields }
    public var body: [UInt8] {
        get { storage.fields.body }
        set { change { $0.body = newValue } }
    }
    public var bodyKind: BodyKind {
        get { storage.fields.bodyKind }
        set { change { $0.bodyKind = newValue } }
    }
    public var freshness: EntryFreshness {
        get { storage.fields.freshness }
        set { change { $0.freshness = newValue } }
    }
    public var sensitiveFingerprint: String? {
        get { storage.fields.sensitiveFingerprint }
        set { change { $0.sensitiveFingerprint = newValue } }
    }
    public var etag: String? {
        get { storage.fields.etag }
        set { change { $0.etag = newValue } }
    }
    public var lastModified: String? {
        get { storage.fields.lastModified }
        set { change { $0.lastModified = newValue } }
    }
    /// Set when the store keeps the body in a file (large bodies; `body` is then empty): the
    /// engine reads it (`CacheStore.readBody`) or, for the proxy, opens it to send as is.
    public var bodyFile: BodyFile? {
        get { storage.fields.bodyFile }
        set { change { $0.bodyFile = newValue } }
    }
    /// The body file opened for sending (set by the engine for the proxy, never stored).
    public var openedBody: OwnedDescriptor? {
        get { storage.fields.openedBody }
        set { change { $0.openedBody = newValue } }
    }
    /// Surrogate keys, for purging by tag (CacheTags).
    public var tags: [String] {
        get { storage.fields.tags }
        set { change { $0.tags = newValue } }
    }

    public static func == (lhs: StoredEntry, rhs: StoredEntry) -> Bool {
        if lhs.storage === rhs.storage { return true }
        return lhs.key == rhs.key && lhs.primaryKey == rhs.primaryKey && lhs.varyNames == rhs.varyNames
            && lhs.variantFingerprint == rhs.variantFingerprint && lhs.namespace == rhs.namespace && lhs.method == rhs.method
            && lhs.url == rhs.url && lhs.urlKey == rhs.urlKey && lhs.status == rhs.status && lhs.headersJSON == rhs.headersJSON
            && lhs.body == rhs.body && lhs.bodyKind == rhs.bodyKind && lhs.freshness == rhs.freshness
            && lhs.sensitiveFingerprint == rhs.sensitiveFingerprint && lhs.etag == rhs.etag && lhs.lastModified == rhs.lastModified
            && lhs.bodyFile == rhs.bodyFile && lhs.openedBody === rhs.openedBody && lhs.tags == rhs.tags
    }

    public init(key: CacheKey, primaryKey: CacheKey? = nil, varyNames: [String] = [], variantFingerprint: String? = nil,
                namespace: String, method: HTTPMethod, url: String, urlKey: String? = nil, status: Int,
                headersJSON: [UInt8], body: [UInt8], bodyKind: BodyKind, freshness: EntryFreshness, sensitiveFingerprint: String?,
                etag: String?, lastModified: String?, headerFields: [HeaderField]? = nil) {
        storage = Storage(Fields(
            key: key, primaryKey: primaryKey ?? key, varyNames: varyNames, variantFingerprint: variantFingerprint,
            namespace: namespace, method: method, url: url, urlKey: urlKey ?? url, status: status, headersJSON: headersJSON,
            // Given when the caller has them (a new entry: ResponseHeaders.rendered), else parsed.
            headerFields: headerFields ?? ResponseHeaders.parseJSON(headersJSON),
            body: body, bodyKind: bodyKind, freshness: freshness, sensitiveFingerprint: sensitiveFingerprint,
            etag: etag, lastModified: lastModified, bodyFile: nil, openedBody: nil, tags: []))
    }
}

/// A stored body kept in a file beside the database.
public struct BodyFile: Sendable, Equatable {
    public var path: String
    public var size: Int
    public var checksum: [UInt8]
    public init(path: String, size: Int, checksum: [UInt8]) {
        self.path = path
        self.size = size
        self.checksum = checksum
    }
}

extension StoredEntry {
    /// Memory an entry holds, roughly: body, headers, URL and a fixed allowance for the rest
    /// (the store's byte counts use the same rule, in SQL, for what it keeps).
    public var approximateBytes: Int { body.count + headersJSON.count + url.utf8.count + 256 }

    /// What the entry holds on the heap, estimated from above, for the memory tier's bound
    /// (`--memory-mb`): its buffers at their capacity, every string
    /// too long to be kept inline, the header fields, and a fixed part for the struct and the
    /// tier's slot. MemoryTierFootprintTests checks it against what the heap really holds.
    public var residentBytes: Int {
        // A native string or array buffer: a 32-byte header, the bytes, malloc's rounding.
        func string(_ value: String) -> Int {
            let count = value.utf8.count
            return count > 15 ? count + 48 : 0
        }
        func strings(_ values: [String]) -> Int {
            values.reduce(buffer(values.capacity * 16)) { $0 + string($1) }
        }
        func buffer(_ capacity: Int) -> Int { capacity > 0 ? capacity + 48 : 0 }
        var total = Self.fixedResidentBytes + buffer(body.capacity) + buffer(headersJSON.capacity)
        total += string(key.hex) + string(url) + string(urlKey) + string(namespace)
        if primaryKey.hex.utf8.count > 15, primaryKey != key { total += string(primaryKey.hex) }
        total += strings(varyNames) + strings(tags)
        total += variantFingerprint.map(string) ?? 0
        total += sensitiveFingerprint.map(string) ?? 0
        total += (etag.map(string) ?? 0) + (lastModified.map(string) ?? 0)
        if let bodyFile { total += string(bodyFile.path) + buffer(bodyFile.checksum.capacity) }
        total += buffer(headerFields.capacity * 32)
        for field in headerFields { total += string(field.name) + string(field.value) }
        return total
    }

    /// The struct in its one-element array, its storage object (fields and object header), and
    /// a memory-tier slot (dictionary room, the CLOCK ring); set so the estimate is a few per cent
    /// above the heap's figure (the test's shapes).
    static let fixedResidentBytes = MemoryLayout<StoredEntry>.stride + MemoryLayout<Fields>.stride + 16 + 192

    /// Whether this entry may answer a request with these fields (RFC 9111 §4.1).
    public func matches(_ request: [HeaderField], keys: CacheKeyBuilder) -> Bool {
        guard !varyNames.isEmpty else { return true }
        return variantFingerprint == keys.variantFingerprint(names: varyNames, request: request)
    }
}

/// Persistent storage of entries.
public protocol CacheStore: Sendable {
    /// The entries stored under a primary key: one, or one per variant when the response
    /// varies (at most the store's variant limit). Synchronous and safe from any thread:
    /// called on the server's worker thread so a hit is answered without a hop. Damaged rows
    /// are left out (and removed).
    func lookup(_ primaryKey: CacheKey) -> [StoredEntry]
    /// Writes atomically, replacing the row with the same key, and the primary key's rows
    /// that vary on other fields; keeps at most the variant limit. Calls back with whether it
    /// was written, once later lookups find it: possibly on the caller's thread, before it is
    /// durable (a write-behind store commits afterwards).
    func save(_ entry: StoredEntry, completion: @escaping @Sendable (Bool) -> Void)
    /// Counts a hit; may be batched.
    func recordHit(_ key: CacheKey, at time: Double)
    /// The body of an entry the store keeps in a file, read and checked; nil when the file is
    /// gone or damaged (the entry is then dropped).
    func readBody(of entry: StoredEntry) -> [UInt8]?
    /// The same file opened for sending; nil when it is gone or not the stored size.
    func openBody(of entry: StoredEntry) -> OwnedDescriptor?
    /// Removes every entry whose normalised URL is one of `urlKeys`, in every namespace and
    /// partition; calls back with the primary keys of what was removed.
    func invalidate(urlKeys: [String], completion: @escaping @Sendable ([CacheKey]) -> Void)
    /// Namespace versions set through the admin API (NamespaceVersions), read at start.
    func namespaceVersions() -> [String: Int64]
}

extension CacheStore {
    // Stores that keep every body inline have no files.
    public func readBody(of entry: StoredEntry) -> [UInt8]? { entry.bodyFile == nil ? entry.body : nil }
    public func openBody(of entry: StoredEntry) -> OwnedDescriptor? { nil }
    public func namespaceVersions() -> [String: Int64] { [:] }
}

public struct UpstreamRequest: Sendable {
    public var method: HTTPMethod
    public var url: UpstreamURL
    public var headers: [HeaderField]
    public var body: [UInt8]?
    public var timeoutMs: Int
    public var maxBodyBytes: Int
    /// /fetch follows redirects for its caller; the proxy passes them on to the client, as a
    /// reverse proxy does.
    public var followRedirects = true
    /// Fields (lower-case names) dropped, with Authorization and Cookie, when a redirect leaves
    /// the origin: those a named upstream's configuration added (an API key, say).
    public var originBoundHeaders: Set<String> = []
    /// Aborts the transfer (closing its connection) and fails it with `cancelled`.
    public var cancellation: Cancellation?
    /// Counts body bytes as they arrive.
    public var progress: TransferProgress?
    /// Resume a GET cut short mid-body with Range and If-Range (strong ETag or Last-Modified).
    public var resumable = false

    public init(method: HTTPMethod, url: UpstreamURL, headers: [HeaderField], body: [UInt8]?, timeoutMs: Int, maxBodyBytes: Int) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMs = timeoutMs
        self.maxBodyBytes = maxBodyBytes
    }
}

public struct UpstreamResponse: Sendable {
    public var status: Int
    public var headers: [HeaderField]
    public var body: [UInt8]
    /// Seconds since 1970 when the request was sent and the response was complete
    /// (RFC 9111 §4.2.3 request_time / response_time).
    public var requestTime: Double
    public var responseTime: Double

    public init(status: Int, headers: [HeaderField], body: [UInt8], requestTime: Double, responseTime: Double) {
        self.status = status
        self.headers = headers
        self.body = body
        self.requestTime = requestTime
        self.responseTime = responseTime
    }
}

/// Sends requests upstream. Completions arrive on a thread of the upstream's (a driver's), not
/// necessarily the caller's.
public protocol Upstream: Sendable {
    func send(_ request: UpstreamRequest, completion: @escaping @Sendable (Result<UpstreamResponse, LarderError>) -> Void)
}

/// The clock, injected so policy code never reads the system clock itself.
public struct Clock: Sendable {
    public var now: @Sendable () -> Double
    public init(now: @escaping @Sendable () -> Double) { self.now = now }

    /// Wall-clock seconds since 1970.
    public static let system = Clock { Date().timeIntervalSince1970 }
}

/// Lets a caller abandon work it started. Handlers run once: on `cancel`, or at once when
/// registered after it.
public final class Cancellation: Sendable {
    private let state = Locked<(cancelled: Bool, handlers: [@Sendable () -> Void])>((false, []))

    public init() {}

    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    public func cancel() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.cancelled else { return [] }
            state.cancelled = true
            defer { state.handlers.removeAll() }
            return state.handlers
        }
        for handler in handlers { handler() }
    }

    /// The work is over, so there is nothing left to cancel: the handlers are dropped unrun.
    /// They usually hold the work, and the work holds this cancellation — a cycle that would
    /// keep both (and the response body the work holds) alive otherwise.
    public func release() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            defer { state.handlers.removeAll() }
            return state.handlers
        }
        _ = handlers  // released here, outside the lock
    }

    public func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.cancelled { return true }
            state.handlers.append(handler)
            return false
        }
        if now { handler() }
    }
}

/// A cache-warming job as persisted (POST /cache/warm).
public struct WarmJobRecord: Sendable, Equatable {
    public enum State: String, Sendable {
        case queued, running, done, cancelled
    }

    public struct ItemError: Sendable, Equatable {
        public var index: Int
        public var url: String
        public var code: String
        public init(index: Int, url: String, code: String) { self.index = index; self.url = url; self.code = code }
    }

    public var id: String
    public var state: State
    public var total: Int
    public var done = 0
    public var failed = 0
    public var stored = 0
    public var bytes = 0
    public var bytesExpected = 0
    public var concurrency: Int
    public var createdAt: Double
    public var startedAt: Double?
    public var finishedAt: Double?
    /// The first 100 failures.
    public var errors: [ItemError] = []

    public init(id: String, state: State, total: Int, concurrency: Int, createdAt: Double) {
        self.id = id
        self.state = state
        self.total = total
        self.concurrency = concurrency
        self.createdAt = createdAt
    }

    /// `[{"index","url","code"}, …]`, as the API shows it and the store keeps it.
    public var errorsJSON: [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        for (position, error) in errors.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"index":"#.utf8)
            out.append(contentsOf: String(error.index).utf8)
            out.append(contentsOf: #","url":"#.utf8)
            JSONWriter.appendString(error.url, to: &out)
            out.append(contentsOf: #","code":"#.utf8)
            JSONWriter.appendString(error.code, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Reads what `errorsJSON` wrote.
    public static func errors(fromJSON bytes: [UInt8]) -> [ItemError] {
        guard case .array(let items)? = try? JSONParser.parse(bytes) else { return [] }
        return items.compactMap { item in
            guard case .object(let members) = item, case .number(let number)? = members["index"], let index = number.int64, case .string(let url)? = members["url"],
                  case .string(let code)? = members["code"] else { return nil }
            return ItemError(index: Int(index), url: url, code: code)
        }
    }
}

/// Where warm jobs live, so they survive a restart. Specs are stored sealed (they may carry
/// credentials); the store sees only bytes.
public protocol WarmJobStore: Sendable {
    /// Persists a new job and its sealed specs (index order), then calls back.
    func createJob(_ record: WarmJobRecord, sealedSpecs: [[UInt8]], completion: @escaping @Sendable (Bool) -> Void)
    /// Marks one item finished (`done` or `failed`) and saves the job's counters, in one
    /// transaction, in the order of calls; then calls back.
    func finishItem(_ index: Int, state: String, job: WarmJobRecord, completion: @escaping @Sendable () -> Void)
    /// Saves the job's state and counters, in the order of calls; then calls back with whether
    /// the store took the write (a cancellation that was not saved must not be reported done).
    func updateJob(_ record: WarmJobRecord, completion: @escaping @Sendable (_ saved: Bool) -> Void)
    /// Every job, with the sealed specs of its items not finished yet (index, spec).
    func loadJobs() -> [(record: WarmJobRecord, pending: [(index: Int, sealedSpec: [UInt8])])]
}

/// A one-shot timer that can be called off: a batch's or a chain's time limit. Called off when
/// the work ends, so that a busy server does not keep a queued timer per finished request for
/// the length of the limit (minutes).
public final class Deadline: @unchecked Sendable {
    // @unchecked Sendable: a dispatch source is thread-safe; `source` is set once in init.
    private let source: DispatchSourceTimer

    public init(afterMilliseconds milliseconds: Int, _ handler: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeTimerSource(queue: .global())
        source.schedule(deadline: .now() + .milliseconds(milliseconds))
        source.setEventHandler(handler: handler)
        source.resume()
    }

    public func cancel() { source.cancel() }
}
