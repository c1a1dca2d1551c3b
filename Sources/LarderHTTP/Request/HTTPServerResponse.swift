/// An answer: status, header fields and one kind of body (bytes, a stream, a part of a file).
public struct HTTPServerResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// When set, the body is streamed from it (chunked) instead of `body`.
    public var stream: HTTPResponseStream?
    /// When set, the body is this part of a file, sent with sendfile instead of `body`.
    public var file: HTTPFileBody?
    /// For a HEAD answered without a body (the upstream's own HEAD response): the length a GET
    /// would have, sent as Content-Length instead of 0 (RFC 9110 §8.6).
    public var headContentLength: Int?
    /// No later answer can be the same (it carries a span id of its own): the server does not
    /// look for it among the responses it may send again, nor keep it (RecentResponses).
    public var isUnique = false
    public init(
        status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        stream: HTTPResponseStream? = nil, file: HTTPFileBody? = nil
    ) {
        self.status = status
        self.headers = headers
        self.body = body
        self.stream = stream
        self.file = file
    }
}
