public import LarderCore

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
        /// Kept for the proxy's entries (see `headerFields`); nil for the others.
        var headerFields: [HeaderField]?
        var body: [UInt8]
        var bodyKind: BodyKind
        var bodyCoding: BodyCoding
        var freshness: EntryFreshness
        var sensitiveFingerprint: String?
        var etag: String?
        var lastModified: String?
        var bodyFile: BodyFile?
        var openedBody: OwnedDescriptor?
        var tags: [String]
        var keepRequested: Bool
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
        set {
            change {
                $0.status = newValue
                $0.freshness.judgedByCallerTTL = EntryFreshness.callerTTLJudges(status: newValue)
            }
        }
    }
    /// The response headers as a JSON object, pre-rendered (names lower-cased, no Set-Cookie).
    /// Setting it parses the kept fields again.
    public var headersJSON: [UInt8] {
        get { storage.fields.headersJSON }
        set {
            let fields = Self.keepsFields(namespace) ? ResponseHeaders.parseJSON(newValue) : nil
            change {
                $0.headersJSON = newValue
                $0.headerFields = fields
            }
        }
    }
    /// The same headers as fields. An entry of the proxy's keeps them, parsed once: the proxy
    /// sends them on every hit. Any other entry is answered with `headersJSON` as stored (the
    /// /fetch envelope embeds it), so its fields are parsed only when asked for (a 304 that
    /// updates them), and a row read from a store costs no parse.
    public var headerFields: [HeaderField] { storage.fields.headerFields ?? ResponseHeaders.parseJSON(storage.fields.headersJSON) }

    /// The fields when the entry keeps them parsed (the proxy's entries); nil otherwise.
    public var keptHeaderFields: [HeaderField]? { storage.fields.headerFields }

    /// Whether entries of `namespace` keep their fields parsed: the proxy's namespaces.
    static func keepsFields(_ namespace: String) -> Bool {
        namespace.hasPrefix(FetchRequest.reservedNamespacePrefix)
    }
    public var body: [UInt8] {
        get { storage.fields.body }
        set { change { $0.body = newValue } }
    }
    public var bodyKind: BodyKind {
        get { storage.fields.bodyKind }
        set { change { $0.bodyKind = newValue } }
    }
    /// How the body is kept: as it came, or compressed at rest (the engine makes it whole again
    /// before anything reads it: FetchEngine.withBody).
    public var bodyCoding: BodyCoding {
        get { storage.fields.bodyCoding }
        set { change { $0.bodyCoding = newValue } }
    }
    /// Whether a caller's ttl judges it follows the status (EntryFreshness.judgedByCallerTTL).
    public var freshness: EntryFreshness {
        get { storage.fields.freshness }
        set {
            change {
                $0.freshness = newValue
                $0.freshness.judgedByCallerTTL = EntryFreshness.callerTTLJudges(status: $0.status)
            }
        }
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
    /// Someone asked for this entry to be kept (a PUT, a warm job, a caller's ttl or version):
    /// a store with an admission policy writes it at once, without probation. Not stored.
    public var keepRequested: Bool {
        get { storage.fields.keepRequested }
        set { change { $0.keepRequested = newValue } }
    }

    public static func == (lhs: StoredEntry, rhs: StoredEntry) -> Bool {
        if lhs.storage === rhs.storage { return true }
        return lhs.key == rhs.key && lhs.primaryKey == rhs.primaryKey && lhs.varyNames == rhs.varyNames
            && lhs.variantFingerprint == rhs.variantFingerprint && lhs.namespace == rhs.namespace && lhs.method == rhs.method
            && lhs.url == rhs.url && lhs.urlKey == rhs.urlKey && lhs.status == rhs.status && lhs.headersJSON == rhs.headersJSON
            && lhs.body == rhs.body && lhs.bodyKind == rhs.bodyKind && lhs.bodyCoding == rhs.bodyCoding
            && lhs.freshness == rhs.freshness
            && lhs.sensitiveFingerprint == rhs.sensitiveFingerprint && lhs.etag == rhs.etag && lhs.lastModified == rhs.lastModified
            && lhs.bodyFile == rhs.bodyFile && lhs.openedBody === rhs.openedBody && lhs.tags == rhs.tags
    }

    public init(
        key: CacheKey, primaryKey: CacheKey? = nil, varyNames: [String] = [], variantFingerprint: String? = nil,
        namespace: String, method: HTTPMethod, url: String, urlKey: String? = nil, status: Int,
        headersJSON: [UInt8], body: [UInt8], bodyKind: BodyKind, freshness: EntryFreshness, sensitiveFingerprint: String?,
        etag: String?, lastModified: String?, headerFields: [HeaderField]? = nil
    ) {
        storage = Storage(
            Fields(
                key: key, primaryKey: primaryKey ?? key, varyNames: varyNames, variantFingerprint: variantFingerprint,
                namespace: namespace, method: method, url: url, urlKey: urlKey ?? url, status: status, headersJSON: headersJSON,
                // Kept for the proxy's entries only: given when the caller has them (a new
                // entry: ResponseHeaders.rendered), else parsed.
                headerFields: Self.keepsFields(namespace) ? headerFields ?? ResponseHeaders.parseJSON(headersJSON) : nil,
                body: body, bodyKind: bodyKind, bodyCoding: .identity, freshness: freshness, sensitiveFingerprint: sensitiveFingerprint,
                etag: etag, lastModified: lastModified, bodyFile: nil, openedBody: nil, tags: [], keepRequested: false))
        storage.fields.freshness.judgedByCallerTTL = EntryFreshness.callerTTLJudges(status: status)
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
        if let headerFields = storage.fields.headerFields {
            total += buffer(headerFields.capacity * 32)
            for field in headerFields { total += string(field.name) + string(field.value) }
        }
        return total
    }

    /// The struct in its one-element array, its storage object (fields and object header), and
    /// a memory-tier slot (dictionary room, the CLOCK ring); set so the estimate is a few per cent
    /// above the heap's figure (the test's shapes).
    static let fixedResidentBytes = MemoryLayout<StoredEntry>.stride + MemoryLayout<Fields>.stride + 16 + 240

    /// Whether this entry may answer a request with these fields (RFC 9111 §4.1).
    public func matches(_ request: [HeaderField], keys: CacheKeyBuilder) -> Bool {
        guard !varyNames.isEmpty else { return true }
        return variantFingerprint == keys.variantFingerprint(names: varyNames, request: request)
    }
}
