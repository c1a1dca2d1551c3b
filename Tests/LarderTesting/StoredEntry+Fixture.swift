// One factory for the cache entries the store, tier and codec tests save and read back.

public import LarderCore
public import LarderEngine

extension StoredEntry {
    /// An entry as a store holds one, every field defaulted: a JSON response of 200 to
    /// `GET http://a.test/<key>` in namespace `default`, fresh for 60 s from t = 1000, version 1,
    /// without headers, body, validators or tags. A test names only what it is about.
    public static func fixture(
        _ key: String, primaryKey: String? = nil, varyNames: [String] = [], variantFingerprint: String? = nil,
        namespace: String = "default", url: String? = nil, urlKey: String? = nil, status: Int = 200,
        headersJSON: [UInt8] = [], headerFields: [HeaderField]? = nil, body: [UInt8] = [], bodyKind: BodyKind = .json,
        freshness: EntryFreshness = EntryFreshness(storedAt: 1000, freshnessLifetime: 60, version: 1),
        sensitiveFingerprint: String? = nil, etag: String? = nil, lastModified: String? = nil, tags: [String] = []
    ) -> StoredEntry {
        var entry = StoredEntry(
            key: CacheKey(hex: key), primaryKey: primaryKey.map(CacheKey.init(hex:)), varyNames: varyNames,
            variantFingerprint: variantFingerprint, namespace: namespace, method: .get, url: url ?? "http://a.test/\(key)",
            urlKey: urlKey, status: status, headersJSON: headersJSON, body: body, bodyKind: bodyKind, freshness: freshness,
            sensitiveFingerprint: sensitiveFingerprint, etag: etag, lastModified: lastModified, headerFields: headerFields)
        if !tags.isEmpty { entry.tags = tags }
        return entry
    }
}
