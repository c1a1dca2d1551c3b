public import LarderCore

public struct ServedResponse: Sendable {
    public var status: Int
    /// Headers as a JSON object (names lower-cased, repeated fields joined, no hop-by-hop).
    /// Left empty for the proxy's fresh upstream responses (shared requests), which send `headers`.
    public var headersJSON: [UInt8]
    /// The header fields: the upstream's own when the response came from it just now (Set-Cookie
    /// included), the stored ones otherwise: for the proxy's entries, which keep them parsed;
    /// empty for /fetch's, answered with `headersJSON` (StoredEntry.headerFields).
    public var headers: [HeaderField]
    public var body: [UInt8]
    public var bodyKind: BodyKind
    public var report: CacheReport
    /// Duration of the upstream exchange; nil when answered from the cache.
    public var upstreamMs: Double?
    /// The stored entry's validators and dates, for answering conditional requests.
    public var etag: String?
    public var lastModified: String?
    /// For the proxy, a body the store keeps in a file, opened to be sent as is (sendfile);
    /// `body` is then empty and the body's length is the descriptor's size.
    public var openedBody: OwnedDescriptor? = nil

    /// The body's length, wherever it is.
    public var bodyLength: Int { openedBody?.size ?? body.count }
}
