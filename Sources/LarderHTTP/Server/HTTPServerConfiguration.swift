public import LarderCore
public import LarderSync

public struct HTTPServerConfiguration: Sendable {
    /// Address to bind: an IPv4 or IPv6 literal, or a name resolved at start.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port (see `HTTPServer.port`).
    public var port: Int = 8080
    /// Event loops, each a thread (at least 1; see HTTPServer).
    public var threads: Int = 2
    /// The index a request of this server's first loop carries (`HTTPServerRequest.loop`); the
    /// others follow. Servers of one process number their loops apart.
    public var firstLoopIndex = 0
    /// Idle keep-alive connections are closed after this many seconds.
    public var connectionTimeoutSeconds: Int = 60
    /// A new connection whose first header section is not complete this many seconds after it
    /// was accepted is closed, however fast it sends (slow-header attacks); a kept-alive one has
    /// the idle timeout plus this for its next header section (see HeaderDeadlines).
    public var headerTimeoutSeconds: Int = 10
    /// Connections open at once; lowered at start to what the open-file limit allows.
    public var connectionLimit: Int = 16_384
    /// Descriptors left out of the connection budget: the database, upstream connections and
    /// the store's kept body files.
    public var reservedDescriptors: Int = 1024
    /// Connections open at once from one client address (0 = no limit).
    public var connectionsPerAddress: Int = 1024
    /// libmicrohttpd's per-connection memory pool: the request line and header fields must fit
    /// (a little less than the pool; more is answered 431). libmicrohttpd clears the pool after
    /// every request, so a pool larger than requests need costs every request (nginx's default
    /// line limit is 8 KiB).
    public var connectionMemoryBytes: Int = 16 << 10
    /// Request bodies larger than this are not kept (`bodyTooLarge`).
    public var maxRequestBodyBytes: Int = 1 << 20
    /// The answer to requests that arrive while draining (see `stopAccepting`).
    public var drainResponse = HTTPServerResponse(
        status: 503, headers: [("Content-Type", "text/plain")],
        body: Array("shutting down\n".utf8))
    /// The answer to a request whose header section is refused (see RequestFraming), given
    /// the status and the reason; the connection is closed after it.
    public var rejectResponse: @Sendable (_ status: Int, _ reason: String) -> HTTPServerResponse = { status, reason in
        HTTPServerResponse(status: status, headers: [("Content-Type", "text/plain")], body: Array((reason + "\n").utf8))
    }
    /// Told of every refused request (for the access log): method, path, status, reason.
    public var onReject: (@Sendable (_ method: String, _ path: String, _ status: Int, _ reason: String) -> Void)?
    /// Makes the companion of each event loop (the upstream transfers its requests start, run
    /// on the loop's thread; see EventLoopCompanion), or nil for none.
    public var loopCompanion: (@Sendable () -> any EventLoopCompanion)?
    /// Told the address and port the listening socket is bound to, before any connection is
    /// accepted (the upstream rules refuse Larder's own listeners: OwnListeners).
    /// Told what libmicrohttpd logs while serving (one message each, without its newline);
    /// nil: written to stderr as libmicrohttpd writes it.
    public var onLibraryMessage: (@Sendable (String) -> Void)?
    public var onListening: (@Sendable (_ address: IPAddress, _ port: Int) -> Void)?
    /// Serve HTTPS with this certificate and key (nil: plain HTTP); replaced while running by
    /// `HTTPServer.reloadCertificates`.
    public var tls: TLSIdentity?
    public init() {}
}
