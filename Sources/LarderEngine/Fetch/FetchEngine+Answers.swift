// Answers from what is stored: the chosen variant (RFC 9111 §4.1), its body at hand, rendered
// as an answer; answers the cache alone can give (batches' hits, a HEAD from a stored GET).

public import LarderCore

extension FetchEngine {
    func serve(
        _ entry: StoredEntry, outcome: CacheOutcome, options: CacheOptions, now: Double,
        upstreamError: String? = nil, coalesced: Bool = false, stored: Bool = true
    ) -> CacheAnswer {
        let report = CacheReport(
            outcome: outcome, key: entry.primaryKey, age: entry.freshness.age(now: now, ttl: options.ttl),
            ttl: stored ? entry.freshness.remaining(now: now, ttl: options.ttl) : nil,
            version: entry.freshness.version, stored: stored, coalesced: coalesced,
            upstreamError: upstreamError)
        return .served(
            ServedResponse(
                status: entry.status, headersJSON: entry.headersJSON, headers: entry.keptHeaderFields ?? [], body: entry.body,
                bodyKind: entry.bodyKind, report: report, upstreamMs: nil, etag: entry.etag,
                lastModified: entry.lastModified, openedBody: entry.openedBody))
    }

    /// The answer the cache alone can give `prepared` right now (a usable stored entry, or a
    /// HEAD from a stored GET), without ever going upstream; nil otherwise. For callers that
    /// answer hits before queueing the rest (batches).
    public func cachedAnswer(for prepared: PreparedFetch) -> CacheAnswer? {
        let request = prepared.request
        guard request.cache.policy != .noStore, request.cache.policy != .reload,
            CacheRules.isCacheable(method: request.method, ttl: request.cache.ttl)
        else { return nil }
        if request.method == .head { return storedGet(for: request) }
        var probe = request
        if request.cache.policy == .useProtocol {
            probe.directives.onlyIfCached = true
        } else {
            probe.cache.policy = .cacheOnly
        }
        let answer = fetch(
            PreparedFetch(request: probe, derived: prepared.derived, identity: prepared.identity), mayCoalesce: false, cancellation: nil
        ) { _ in }
        guard let answer, case .served = answer else { return nil }
        traffic.count(answer, namespace: request.cache.namespace, loop: prepared.identity?.loop ?? 0)
        return answer
    }

    /// Whether a stored entry passes the request's validators (always, without any).
    static func satisfies(_ entry: StoredEntry, _ request: FetchRequest) -> Bool {
        guard let validation = request.validation else { return true }
        return validation.failure(status: entry.status, body: entry.body) == nil
    }

    /// RFC 9111 §4.3.5: a HEAD answered from a stored GET of the same resource and key, its
    /// body dropped unless `keepingBody` (the proxy's server sends only the header section of
    /// a HEAD response, with the body's length as Content-Length: RFC 9110 §8.6). Only looks:
    /// never sends a GET upstream for a HEAD. Nil when nothing usable is stored (or the policy
    /// does not read the cache).
    public func storedGet(for head: FetchRequest, keepingBody: Bool = false) -> CacheAnswer? {
        guard head.cache.policy != .noStore, head.cache.policy != .reload else { return nil }
        var get = head
        get.method = .get
        if head.cache.policy == .useProtocol {
            get.directives.onlyIfCached = true
        } else {
            get.cache.policy = .cacheOnly
        }
        guard case .served(var served)? = fetch(prepare(get), reply: { _ in }) else { return nil }
        if keepingBody { return .served(served) }
        served.body = []
        served.openedBody = nil
        served.bodyKind = .text
        return .served(served)
    }

    /// The stored response that may answer `prepared`: of the variants under its key, the one
    /// whose nominated request fields match (RFC 9111 §4.1).
    func variant(for prepared: PreparedFetch) -> StoredEntry? {
        var rows = StoredRows()
        return variant(for: prepared, rows: &rows)
    }

    /// What a lookup found besides the variant it chose.
    struct StoredRows {
        /// A part (a stored 206) is among the rows.
        var hasPart = false
        /// Whole responses are stored under the key (set only when none was chosen: then they
        /// all vary on something the request does not match).
        var hasWhole = false
    }

    /// As `variant(for:)`, and says what else the rows hold.
    func variant(for prepared: PreparedFetch, rows: inout StoredRows) -> StoredEntry? {
        let variants = store.lookup(prepared.derived.key)
        rows.hasPart = variants.count > 1 || variants.first?.status == 206 ? variants.contains { $0.status == 206 } : false
        let chosen: StoredEntry?
        if variants.count == 1, variants[0].varyNames.isEmpty, variants[0].status != 206 {
            chosen = variants[0]
        } else {
            // A stored part (206, RFC 9111 §3.4) is never a whole response: RangeFetcher serves it.
            chosen = variants.first { $0.status != 206 && $0.matches(prepared.request.headers, keys: keys) }
            if chosen == nil { rows.hasWhole = variants.contains { $0.status != 206 } }
        }
        return chosen.flatMap { withBody($0, forSending: prepared.request.shared) }
    }

    /// `entry` with its body at hand: a body the store keeps in a file is opened for the proxy
    /// (which sends it as is) and read for everything else. Nil when the file is gone or
    /// damaged: as if nothing were stored.
    func withBody(_ entry: StoredEntry, forSending: Bool) -> StoredEntry? {
        if entry.bodyCoding != .identity { return decompressed(entry) }
        guard entry.bodyFile != nil else { return entry }
        var resolved = entry
        if forSending {
            guard let opened = store.openBody(of: entry) else { return nil }
            resolved.openedBody = opened
        } else {
            guard let body = store.readBody(of: entry) else { return nil }
            resolved.body = body
            resolved.bodyFile = nil
        }
        return resolved
    }

    /// `entry` with its body whole again (read from its file first, if it has one); nil when
    /// the body is gone or damaged, or no codec reads it: as if nothing were stored.
    func decompressed(_ entry: StoredEntry) -> StoredEntry? {
        let maxBytes = max(limits.maxUpstreamBodyBytes, limits.maxStoredBodyBytes)
        guard let codec = bodyCodec, codec.coding == entry.bodyCoding,
            let stored = entry.bodyFile == nil ? entry.body : store.readBody(of: entry),
            // A frame naming a dictionary this instance has not seen is tried again once it is
            // loaded from the store (BodyDictionaries).
            let body = codec.decompress(stored, maxBytes: maxBytes)
                ?? (dictionaries?.resolve(stored, now: clock.now()) == true ? codec.decompress(stored, maxBytes: maxBytes) : nil)
        else {
            logger.warning("a stored body could not be decompressed; answered as a miss", metadata: ["key": "\(entry.key)"])
            return nil
        }
        var whole = entry
        whole.body = body
        whole.bodyCoding = .identity
        whole.bodyFile = nil
        whole.openedBody = nil
        return whole
    }

    /// The body of a stored entry as it was sent (read from its file, decompressed); nil when
    /// it is gone or damaged. For the admin API's view of an entry.
    public func storedBody(of entry: StoredEntry) -> [UInt8]? {
        withBody(entry, forSending: false)?.body
    }

    /// `entry` as the store keeps it: its body compressed when the rules take its type and size
    /// and the compressed form saves enough (CompressionRules). What answers the request, and
    /// the requests waiting on it, stays `entry` itself. `counting` false: a body stored again
    /// (a 304's refresh), not a new one for the figures.
    func forStoring(_ entry: StoredEntry, counting: Bool = true) -> StoredEntry {
        let limits = limits
        guard let codec = bodyCodec, entry.bodyCoding == .identity, entry.bodyFile == nil,
            limits.compression.compresses(status: entry.status, headers: entry.headerFields, bodyCount: entry.body.count)
        else { return entry }
        let dictionary = dictionaries?.dictionaryToCompress(
            entry.namespace, offering: entry.body, sampling: counting, rules: limits.dictionaries, now: clock.now())
        guard let compressed = codec.compress(entry.body, dictionary: dictionary),
            CompressionRules.pays(original: entry.body.count, compressed: compressed.count)
        else { return entry }
        if counting {
            compressionCounts.withLock {
                $0.stored += 1
                $0.savedBytes += entry.body.count - compressed.count
            }
        }
        var stored = entry
        stored.body = compressed
        stored.bodyCoding = codec.coding
        return stored
    }

    /// Asks for a new compression dictionary for `namespace` (BodyDictionaries.request); nil
    /// when this engine keeps none.
    public func requestDictionary(for namespace: String) -> BodyDictionaries.Request? {
        dictionaries?.request(namespace, rules: limits.dictionaries, now: clock.now())
    }

    /// Stores `entry` as the store keeps it (`forStoring`).
    func save(_ entry: StoredEntry, counting: Bool = true, completion: @escaping @Sendable (Bool) -> Void) {
        store.save(forStoring(entry, counting: counting), completion: completion)
    }

    /// Bodies stored compressed since start, the bytes that saved, and the compression
    /// dictionaries trained.
    public var compressionFigures: (stored: Int, savedBytes: Int, dictionaries: Int) {
        let counts = compressionCounts.withLock { $0 }
        return (counts.stored, counts.savedBytes, dictionaries?.trained ?? 0)
    }
}
