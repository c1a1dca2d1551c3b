public import LarderCore

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
    /// The client span this request is (its id is in the request's `traceparent`); ended with
    /// the exchange.
    public var span: TraceSpan?

    public init(method: HTTPMethod, url: UpstreamURL, headers: [HeaderField], body: [UInt8]?, timeoutMs: Int, maxBodyBytes: Int) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeoutMs = timeoutMs
        self.maxBodyBytes = maxBodyBytes
    }
}
