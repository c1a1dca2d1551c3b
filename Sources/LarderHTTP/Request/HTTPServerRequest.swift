public import LarderCore

/// A request as the handler sees it.
///
/// A class, not a struct: a request is handed through several layers on every hit, and a
/// reference costs one retain where its five fields cost five each time.
public final class HTTPServerRequest: Sendable {
    public let method: String
    /// The path as libmicrohttpd decoded it (no query).
    public let path: String
    /// The request target exactly as received (path and query, still percent-encoded).
    public let rawTarget: String
    public let headers: [(name: String, value: String)]
    public let body: [UInt8]
    /// The body was larger than the server's limit and was not kept.
    public let bodyTooLarge: Bool
    /// The peer's address (for the access log); nil when libmicrohttpd does not say.
    public let clientAddress: IPAddress?

    public init(
        method: String, path: String, rawTarget: String, headers: [(name: String, value: String)],
        body: [UInt8], bodyTooLarge: Bool, clientAddress: IPAddress? = nil
    ) {
        self.method = method
        self.path = path
        self.rawTarget = rawTarget
        self.headers = headers
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.clientAddress = clientAddress
    }
}
