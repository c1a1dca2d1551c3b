// An HTTP/1.1 server over libmicrohttpd, independent of what Larder serves.
//
// Threading: a few event loops (`threads`, EventLoop below), each a thread running its own
// libmicrohttpd daemon in external epoll mode. They share one listening socket: each polls it
// with its daemon's epoll descriptor and accepts in turn, under one lock that also keeps the
// connection limits for all of them. The work per round is proportional to the connections that
// have something to do, not to those open: with libmicrohttpd's own poll-mode threads (used
// before), every round polled every connection, so 900 idle keep-alive connections made misses
// at one connection 2.3× slower (1.1–1.3k/s against 2.4–2.6k) and hits 1.4× slower. The handler
// runs on a loop's thread. It either returns a response at once (cache hits: no suspension, no
// hop) or returns nil and answers later through its `HTTPResponder` from any thread; the
// connection is then suspended (MHD_ALLOW_SUSPEND_RESUME) and resumed when the answer arrives,
// which also wakes its loop.
//
// libmicrohttpd calls the access handler several times per request: once with the headers,
// once per chunk of body, and a last time with no data. Responses are queued only on a later
// call, never the first, or libmicrohttpd closes the connection after the response and
// keep-alive is lost (about 5× slower).
//
// Shutdown: drain (new requests are turned away with a 503 and their connections closed), let
// the application finish or fail what is in flight, wait until every suspended connection was
// resumed and completed, then stop the daemon (stopping with a suspended connection aborts the
// process).

import CMicroHTTPD
import Dispatch
import Foundation
public import LarderCore
public import LarderSync
#if canImport(Glibc)
import Glibc
#endif

/// A class, not a struct: a request is handed through several layers on every hit, and a
/// reference costs one retain where its five fields cost five each time (about 1k instructions
/// a hit).
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

    public init(method: String, path: String, rawTarget: String, headers: [(name: String, value: String)],
                body: [UInt8], bodyTooLarge: Bool) {
        self.method = method
        self.path = path
        self.rawTarget = rawTarget
        self.headers = headers
        self.body = body
        self.bodyTooLarge = bodyTooLarge
    }
}

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
    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                stream: HTTPResponseStream? = nil, file: HTTPFileBody? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.stream = stream
        self.file = file
    }
}

/// A part of an open file as a response body (libmicrohttpd sends it with sendfile, as nginx
/// does, and closes the descriptor when done).
public struct HTTPFileBody: Sendable {
    public let descriptor: OwnedDescriptor
    public let offset: Int
    public let length: Int
    public init(_ descriptor: OwnedDescriptor, offset: Int, length: Int) {
        self.descriptor = descriptor
        self.offset = offset
        self.length = length
    }
}

/// A response body written piece by piece, from any thread, and sent as it comes (chunked
/// transfer coding). When nothing is buffered the connection is suspended in libmicrohttpd's
/// content reader (it would otherwise poll the reader in a busy loop) and resumed by the next
/// `write` or by `finish`.
///
/// The pieces are kept as written and handed out from the front, so sending costs the bytes
/// sent, not the bytes still waiting (a buffer that dropped its front on every read was
/// quadratic: 20 lines of 20 MB took a minute). A writer that must not run ahead of the client
/// asks to be told when the socket has taken what it wrote (`write(_:taken:)`).
public final class HTTPResponseStream: Sendable {
    private struct State {
        /// Written and not yet handed to libmicrohttpd: `pieces[head...]`, the first of them
        /// from `offset` on.
        var pieces: [[UInt8]] = []
        var head = 0
        var offset = 0
        var finished = false
        /// The connection is over (the client went away, or the body was sent): writes are
        /// dropped and nothing is kept.
        var closed = false
        var suspended = false
        var connection: RequestContext.ConnectionHandle?
        /// Called once everything written before them has been taken (or the connection ended).
        var whenTaken: [@Sendable () -> Void] = []

        var isEmpty: Bool { head == pieces.count }

        mutating func dropTaken() {
            if head == pieces.count {
                pieces.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 32, head * 2 >= pieces.count {
                // Amortised: each piece is moved at most once more.
                pieces.removeFirst(head)
                head = 0
            }
        }
    }
    private let state = Locked(State())

    public init() {}

    public func write(_ bytes: [UInt8]) {
        write(bytes, taken: nil)
    }

    /// Writes `bytes`; `taken` is called once, from another thread or at once, when libmicrohttpd
    /// has taken them and everything before them (or the connection has ended and they never
    /// will be): what a writer waits for to hold no more than one piece beyond the socket.
    public func write(_ bytes: [UInt8], taken: (@Sendable () -> Void)?) {
        let now = state.withLock { state -> Bool in
            precondition(!state.finished, "write after finish")
            guard !state.closed else { return true }
            if !bytes.isEmpty {
                state.pieces.append(bytes)
                resumeIfSuspended(&state)
            }
            guard let taken else { return false }
            if state.isEmpty { return true }
            state.whenTaken.append(taken)
            return false
        }
        if now { taken?() }
    }

    /// The connection is over: nothing written from now on will be sent.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Ends the body; call once, after the last `write`.
    public func finish() {
        state.withLock { state in
            state.finished = true
            resumeIfSuspended(&state)
        }
    }

    private func resumeIfSuspended(_ state: inout State) {
        if state.suspended, let connection = state.connection {
            state.suspended = false
            connection.resume()
        }
    }

    fileprivate func attach(_ connection: RequestContext.ConnectionHandle) {
        state.withLock { $0.connection = connection }
    }

    /// libmicrohttpd let go of the response: the connection is over, sent or not. What is
    /// still buffered will never be sent, so it is let go of, and writers waiting for the
    /// socket are released.
    fileprivate func close() {
        let waiting = state.withLock { state -> [@Sendable () -> Void] in
            state.closed = true
            state.connection = nil
            state.pieces = []
            state.head = 0
            state.offset = 0
            defer { state.whenTaken = [] }
            return state.whenTaken
        }
        for taken in waiting { taken() }
    }

    /// libmicrohttpd asks for up to `max` bytes: some, the end, or (suspending) none yet.
    fileprivate func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        var waiting: [@Sendable () -> Void] = []
        let result = state.withLock { state -> Int in
            var count = 0
            while count < max, !state.isEmpty {
                let piece = state.pieces[state.head]
                let part = min(max - count, piece.count - state.offset)
                piece.withUnsafeBytes { bytes in
                    (UnsafeMutableRawPointer(buffer) + count).copyMemory(from: bytes.baseAddress! + state.offset, byteCount: part)
                }
                count += part
                state.offset += part
                if state.offset == piece.count {
                    state.pieces[state.head] = []
                    state.head += 1
                    state.offset = 0
                }
            }
            if count > 0 {
                if state.isEmpty {
                    waiting = state.whenTaken
                    state.whenTaken = []
                }
                state.dropTaken()
                return count
            }
            if state.finished { return larder_mhd_end_of_stream() }
            guard let connection = state.connection else { return 0 }
            state.suspended = true
            MHD_suspend_connection(connection.pointer)
            return 0
        }
        for taken in waiting { taken() }
        return result
    }
}

/// Answers one request later, from any thread. Call `respond` exactly once.
public final class HTTPResponder: Sendable {
    private let context: RequestContext
    private let server: HTTPServer

    fileprivate init(context: RequestContext, server: HTTPServer) {
        self.context = context
        self.server = server
    }

    public func respond(_ response: HTTPServerResponse) {
        context.complete(response, server: server)
    }

    /// Calls `handler` once if the client goes away before the request completes (it closed
    /// the connection, or libmicrohttpd ended the request with an error). For long work the
    /// client may abandon: a suspended connection is not watched by libmicrohttpd itself, so
    /// its socket is watched for the peer's close until the request completes.
    public func onClientGone(_ handler: @escaping @Sendable () -> Void) {
        context.onClientGone(handler, server: server)
    }
}

public protocol HTTPRequestHandler: Sendable {
    /// Returns the response now, or nil and answers later through `responder`.
    func handle(_ request: HTTPServerRequest, responder: HTTPResponder) -> HTTPServerResponse?
}

public struct HTTPServerConfiguration: Sendable {
    /// Address to bind: an IPv4 or IPv6 literal, or a name resolved at start.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port (see `HTTPServer.port`).
    public var port: Int = 8080
    /// Event loops, each a thread (at least 1; see above).
    public var threads: Int = 2
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
    /// (about 14 KiB of them with 16 KiB; more is answered 431). libmicrohttpd clears the pool
    /// after every request, and with its own default of 32 KiB that clearing cost ~7 % of
    /// proxy-hit throughput (scripts/bench); nginx's default line limit is 8 KiB.
    public var connectionMemoryBytes: Int = 16 << 10
    /// Request bodies larger than this are not kept (`bodyTooLarge`).
    public var maxRequestBodyBytes: Int = 1 << 20
    /// The answer to requests that arrive while draining (see `stopAccepting`).
    public var drainResponse = HTTPServerResponse(status: 503, headers: [("Content-Type", "text/plain")],
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
    public var onListening: (@Sendable (_ address: IPAddress, _ port: Int) -> Void)?
    public init() {}
}

public struct HTTPServerError: Error, CustomStringConvertible {
    public let description: String
}

public final class HTTPServer: @unchecked Sendable {
    // @unchecked Sendable: `loops` and `listenSocket` are written in start and stop only (before
    // the loop threads start and after they ended); the counters and the draining flag are
    // atomics; `admission` is lock-protected.

    public let configuration: HTTPServerConfiguration
    let handler: any HTTPRequestHandler
    private var loops: [EventLoop] = []
    /// The listening socket, shared by the loops (each polls it and accepts in turn).
    fileprivate private(set) var listenSocket: Int32 = -1
    /// Connections open, in all and per client address, against the configured limits.
    private let admission = Locked(Admission())
    /// Set when a loop found every place taken; cleared when a connection closes.
    private let atConnectionLimit = Atomic<Bool>(false)
    private var selfReference: Unmanaged<HTTPServer>?
    /// Watches the sockets of requests whose callers asked to learn that the client went away.
    let watcher = DisconnectWatcher()
    /// Set by `stopAccepting`: new requests get the drain response.
    let draining = Atomic<Bool>(false)
    /// Requests handed to the handler whose response has not been sent yet.
    let inFlight = Atomic<Int>(0)
    private let drained = NSCondition()
    public private(set) var port: Int = 0

    public init(configuration: HTTPServerConfiguration, handler: any HTTPRequestHandler) {
        self.configuration = configuration
        self.handler = handler
    }

    public func start() throws {
        var storage = sockaddr_storage()
        _ = try Self.resolve(configuration.host, port: configuration.port, into: &storage)
        let listener: Int32
        do {
            listener = try Self.listen(on: &storage)
        } catch {
            throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port) (\(error.description))")
        }
        var boundPort = 0
        var boundAddress: IPAddress?
        let family = Int32(storage.ss_family)
        withUnsafeBytes(of: &storage) { raw in
            boundPort = Int(UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self)))
            // sockaddr_in: the address at offset 4; sockaddr_in6: at offset 8 (after the flow label).
            boundAddress = family == AF_INET6
                ? IPAddress(bytes: Array(raw[8..<24])) : IPAddress(bytes: Array(raw[4..<8]))
        }
        if let boundAddress { configuration.onListening?(boundAddress, boundPort) }
        let flags = UInt32(MHD_USE_EPOLL.rawValue | MHD_USE_NO_LISTEN_SOCKET.rawValue
                           | MHD_ALLOW_SUSPEND_RESUME.rawValue | MHD_USE_ERROR_LOG.rawValue)
        let reference = Unmanaged.passRetained(self)
        let opaque = reference.toOpaque()
        let connectionLimit = Self.affordableConnections(configuration.connectionLimit, reserved: configuration.reservedDescriptors)
        admission.withLock { $0.limit = connectionLimit }
        var started: [EventLoop] = []
        for index in 0..<max(1, configuration.threads) {
            // The daemon-wide timeout is the idle timeout; each loop keeps the header deadlines
            // (HeaderDeadlines). Limits are kept here, across the loops (Admission).
            let daemon = withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                    larder_mhd_start_external(flags, address, UInt32(max(1, configuration.connectionTimeoutSeconds)),
                                              UInt32(connectionLimit), configuration.connectionMemoryBytes,
                                              acceptAll, nil, accessHandler, opaque, requestCompleted, opaque, uriLogger, opaque,
                                              connectionNotified, opaque)
                }
            }
            let deadlines = HeaderDeadlines(headerTimeoutSeconds: configuration.headerTimeoutSeconds,
                                            idleTimeoutSeconds: configuration.connectionTimeoutSeconds)
            guard let daemon, let loop = EventLoop(daemon: daemon, index: index, headerDeadlines: deadlines,
                                                   companion: configuration.loopCompanion?()) else {
                if let daemon { MHD_stop_daemon(daemon) }
                for loop in started { loop.stop() }
                close(listener)
                reference.release()
                throw HTTPServerError(description: "cannot start the HTTP server's event loop \(index)")
            }
            started.append(loop)
        }
        listenSocket = listener
        loops = started
        selfReference = reference
        port = boundPort
        for loop in started { loop.start(server: self) }
    }

    /// Starts draining: requests that arrive from now on are answered with
    /// `configuration.drainResponse` and their connections closed; requests in flight carry on.
    ///
    /// Not MHD_quiesce_daemon: in libmicrohttpd 0.9.75 with a thread pool (in epoll mode, which
    /// this server used first) it aborted the process when a worker had not yet registered the
    /// listening socket (a signal right after start), and the socket it hands back must outlive
    /// the workers. Draining has no such race, and callers learn why they were turned away.
    public func stopAccepting() {
        draining.store(true, ordering: .releasing)
    }

    /// Waits until every request handed to the handler has been answered and completed, up
    /// to `timeout` seconds. Returns whether none is left. Woken by the last completion.
    @discardableResult
    public func waitForPending(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        drained.lock()
        defer { drained.unlock() }
        while inFlight.load(ordering: .acquiring) > 0 {
            if !drained.wait(until: deadline) { return inFlight.load(ordering: .acquiring) == 0 }
        }
        return true
    }

    /// Called when a request completes; wakes `waitForPending` when none is left.
    fileprivate func completed() {
        if inFlight.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            drained.lock()
            drained.broadcast()
            drained.unlock()
        }
    }

    public var pendingCount: Int { inFlight.load(ordering: .relaxed) }
    /// Responses queued again to another connection instead of built anew; for tests.
    public var reusedResponseCount: Int { loops.reduce(0) { $0 + $1.recentResponses.reuses.load(ordering: .relaxed) } }

    /// Connections open now, and how many may be (`connectionLimit`, lowered at start to what
    /// the open-file limit allows); for metrics.
    public var connections: (open: Int, limit: Int) { admission.withLock { ($0.open, $0.limit) } }

    /// Stops the daemon. Call after `waitForPending` returned true.
    public func stop() {
        guard !loops.isEmpty else { return }
        for loop in loops { loop.stop() }
        loops = []
        close(listenSocket)
        listenSocket = -1
        selfReference?.release()
        selfReference = nil
    }

    /// Accepts up to a few waiting connections onto `loop`'s daemon (on that loop's thread, the
    /// only one that may add connections to it). Accepting and counting happen under one lock, so
    /// connections are admitted in the order they arrived, whichever loop takes them.
    fileprivate func acceptConnections(onto loop: EventLoop) {
        for _ in 0..<4 {
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let accepted = admission.withLock { admission -> (fd: Int32, admitted: Bool)? in
                // At the limit, connections wait in the listen backlog (as with nginx's
                // worker_connections) until one closes: the loops stop polling the socket.
                guard admission.open < admission.limit else {
                    atConnectionLimit.store(true, ordering: .releasing)
                    return nil
                }
                let fd = withUnsafeMutablePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        larder_accept(listenSocket, $0, &length)
                    }
                }
                guard fd >= 0 else { return nil }
                return (fd, admission.admit(ClientAddress(address), perAddress: configuration.connectionsPerAddress))
            }
            guard let accepted else { return }
            guard accepted.admitted else {
                close(accepted.fd)
                continue
            }
            let added = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { MHD_add_connection(loop.daemon, accepted.fd, $0, length) }
            }
            // libmicrohttpd closed the socket; it will never report it closed.
            if added != MHD_Result.YES { release(ClientAddress(address)) }
        }
    }

    /// The loop whose daemon runs `connection`.
    fileprivate func loop(of connection: OpaquePointer) -> EventLoop? {
        let daemon = larder_mhd_connection_daemon(connection)
        return loops.first { $0.daemon == daemon }
    }

    /// A connection libmicrohttpd took is gone: it no longer counts against the limits.
    fileprivate func connectionClosed(_ connection: OpaquePointer) {
        guard let address = larder_mhd_client_address(connection) else { return }
        release(ClientAddress(address))
    }

    private func release(_ client: ClientAddress) {
        admission.withLock { $0.release(client) }
        // A place is free: loops that stopped polling the listening socket take it up again.
        if atConnectionLimit.exchange(false, ordering: .acquiringAndReleasing) {
            for loop in loops { loop.wake() }
        }
    }

    /// The listening socket while connections are accepted, -1 (ignored by poll) at the limit.
    fileprivate var socketToAcceptOn: Int32 {
        atConnectionLimit.load(ordering: .acquiring) ? -1 : listenSocket
    }

    /// Opens the listening socket (non-blocking; SO_REUSEADDR, so a restart can bind while old
    /// connections linger in TIME_WAIT) and writes the bound address back into `storage`.
    private static func listen(on storage: inout sockaddr_storage) throws(HTTPServerError) -> Int32 {
        let family = Int32(storage.ss_family)
        let length = socklen_t(family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let fd = socket(family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServerError(description: "cannot create a socket: \(String(cString: strerror(errno)))") }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        if family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &on, socklen_t(MemoryLayout<Int32>.size)) }
        let bound = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address -> Bool in
                var size = length
                return bind(fd, address, length) == 0 && Glibc.listen(fd, 4096) == 0 && getsockname(fd, address, &size) == 0
            }
        }
        guard bound else {
            close(fd)
            throw HTTPServerError(description: "in use, or not an address of this machine")
        }
        return fd
    }

    /// Raises the soft open-file limit to the hard one and returns how many connections fit
    /// in it, leaving room for the database, upstream connections and the rest.
    private static func affordableConnections(_ wanted: Int, reserved: Int) -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return wanted }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &raised) == 0 { limit = raised }
        }
        let available = limit.rlim_cur == rlim_t.max ? UInt64(Int32.max) : UInt64(limit.rlim_cur)
        return max(16, min(wanted, Int(min(available, UInt64(Int32.max))) - max(0, reserved)))
    }

    /// Fills `storage` with the bind address; returns true for IPv6.
    private static func resolve(_ host: String, port: Int, into storage: inout sockaddr_storage) throws -> Bool {
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let first = result else {
            throw HTTPServerError(description: "cannot resolve listen address '\(host)'")
        }
        defer { freeaddrinfo(result) }
        withUnsafeMutableBytes(of: &storage) { destination in
            destination.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return first.pointee.ai_family == AF_INET6
    }
}

// MARK: - Per-request state

final class RequestContext: @unchecked Sendable {
    // @unchecked Sendable: `rawTarget`, `phase`, `body` and `headerDeadline` are used only by
    // the loop thread that runs the handler for this connection (libmicrohttpd serialises calls
    // per connection); the hand-over between the handler and `respond` goes through `state`.

    enum Phase { case headers, body, dispatched, rejected }

    struct HandOver {
        var response: HTTPServerResponse?
        var responded = false
        var suspended = false
        var connection: ConnectionHandle?
        var goneHandlers: [@Sendable () -> Void] = []
        var watched: (fd: Int32, id: UInt64)?
        var ended = false
    }

    /// @unchecked Sendable: libmicrohttpd allows MHD_resume_connection from any thread, and
    /// the connection stays valid while it is suspended.
    struct ConnectionHandle: @unchecked Sendable {
        let pointer: OpaquePointer
        /// The loop running the connection's daemon.
        let loop: EventLoop?

        /// Resumes the suspended connection and wakes its loop: libmicrohttpd's own wake-up
        /// can be consumed by a round already past its check for resumed connections, and the
        /// loop would then sleep with the connection's answer waiting.
        func resume() {
            MHD_resume_connection(pointer)
            loop?.wake()
        }
    }

    let rawTarget: String
    /// The connection's header deadline (cleared when the header section is complete, set again
    /// when the request completes); nil only if the connection was never announced.
    let headerDeadline: ConnectionDeadline?
    /// The connection, set when the request is dispatched (valid until it completes).
    var dispatchedOn: ConnectionHandle?
    var phase: Phase = .headers
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    var tooLarge = false
    /// Dispatched to the handler and not yet completed (counted in `HTTPServer.inFlight`).
    var inFlight = false
    let state = Locked(HandOver())

    init(rawTarget: String, headerDeadline: ConnectionDeadline?) {
        self.rawTarget = rawTarget
        self.headerDeadline = headerDeadline
    }

    func onClientGone(_ handler: @escaping @Sendable () -> Void, server: HTTPServer) {
        let register = state.withLock { handOver -> Bool in
            guard !handOver.ended else { return false }
            handOver.goneHandlers.append(handler)
            return handOver.watched == nil
        }
        guard register, let connection = dispatchedOn else { return }
        let fd = larder_mhd_connection_fd(connection.pointer)
        guard fd >= 0 else { return }
        let id = server.watcher.watch(fd) { [self] in clientGone() }
        let ended = state.withLock { handOver -> Bool in
            handOver.watched = (fd, id)
            return handOver.ended
        }
        // The request completed meanwhile (its completion saw nothing to unwatch).
        if ended { server.watcher.unwatch(fd, id: id) }
    }

    /// The client went away: run the handlers once.
    func clientGone() {
        let handlers = state.withLock { handOver -> [@Sendable () -> Void] in
            defer { handOver.goneHandlers.removeAll() }
            return handOver.goneHandlers
        }
        for handler in handlers { handler() }
    }

    /// The request is over: stop watching its socket (libmicrohttpd may reuse the descriptor),
    /// and drop the handlers — they usually hold the work that holds this request's responder,
    /// a cycle that would otherwise keep both alive — and the response (libmicrohttpd copied
    /// it), so a responder still held somewhere keeps a few bytes, not a whole answer.
    func ended(server: HTTPServer) -> (fd: Int32, id: UInt64)? {
        state.withLock { handOver in
            handOver.ended = true
            handOver.goneHandlers.removeAll()
            handOver.response = nil
            return handOver.watched
        }
    }

    /// Stores the response and resumes the connection when it was suspended. A response to a
    /// request that is already over (its client went away) is dropped.
    func complete(_ response: HTTPServerResponse, server: HTTPServer) {
        state.withLock { handOver in
            precondition(!handOver.responded, "respond called twice")
            handOver.responded = true
            guard !handOver.ended else { return }
            handOver.response = response
            if handOver.suspended, let connection = handOver.connection {
                handOver.suspended = false
                connection.resume()
            }
        }
    }
}

// MARK: - C callbacks (capture nothing; context arrives through the void* slot)

private let uriLogger: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>, OpaquePointer) -> UnsafeMutableRawPointer? = { _, uri, connection in
    let deadline = larder_mhd_socket_context(connection).map { Unmanaged<ConnectionDeadline>.fromOpaque($0).takeUnretainedValue() }
    // The value returned becomes the request's *con_cls; `requestCompleted` releases it.
    return Unmanaged.passRetained(RequestContext(rawTarget: String(cString: uri), headerDeadline: deadline)).toOpaque()
}

/// A connection was accepted (on its loop's thread, inside MHD_add_connection): its first
/// header section gets its deadline, kept in the connection's socket context until it closes.
private let connectionNotified: MHD_NotifyConnectionCallback = { serverPointer, connection, socketContext, event in
    guard let serverPointer, let connection else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    switch event {
    case .CONNECTION_NOTIFY_STARTED:
        guard let socketContext, let loop = server.loop(of: connection) else { return }
        let deadline = loop.headerDeadlines.add(fd: larder_mhd_connection_fd(connection))
        socketContext.pointee = Unmanaged.passRetained(deadline).toOpaque()
    case .CONNECTION_NOTIFY_CLOSED:
        if let socketContext, let raw = socketContext.pointee {
            socketContext.pointee = nil
            Unmanaged<ConnectionDeadline>.fromOpaque(raw).takeRetainedValue().closed()
        }
        server.connectionClosed(connection)
    default:
        break
    }
}

private let requestCompleted: MHD_RequestCompletedCallback = { serverPointer, _, contextSlot, termination in
    guard let contextSlot, let raw = contextSlot.pointee else { return }
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeRetainedValue()
    contextSlot.pointee = nil
    guard let serverPointer else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    if termination != .REQUEST_TERMINATED_COMPLETED_OK { context.clientGone() }
    context.headerDeadline?.awaitNextRequest()
    if let watched = context.ended(server: server) { server.watcher.unwatch(watched.fd, id: watched.id) }
    if context.inFlight {
        server.completed()
    }
}

private let accessHandler: MHD_AccessHandlerCallback = { serverPointer, connection, url, method, _, uploadData, uploadSize, contextSlot in
    guard let serverPointer, let connection, let contextSlot, let uploadSize, let raw = contextSlot.pointee else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()

    switch context.phase {
    case .headers:
        // First call: headers only. Never queue here (keep-alive would be lost) — except to
        // refuse a request, whose connection is closed anyway.
        context.headerDeadline?.headerSectionComplete()
        let headers = collectHeaders(connection)
        if let rejection = RequestFraming.check(headers) {
            context.phase = .rejected
            let methodName = method.map { String(cString: $0) } ?? "-"
            server.configuration.onReject?(methodName, url.map { String(cString: $0) } ?? "/", rejection.status, rejection.message)
            var response = server.configuration.rejectResponse(rejection.status, rejection.message)
            response.headers.append(("Connection", "close"))
            return queue(response, on: connection, server: server)
        }
        context.headers = headers
        context.phase = .body
        return MHD_Result.YES
    case .rejected:
        // Whatever else arrives is dropped; the connection closes after the refusal.
        uploadSize.pointee = 0
        return MHD_Result.YES
    case .body:
        if uploadSize.pointee > 0 {
            let count = uploadSize.pointee
            if context.body.count + count > server.configuration.maxRequestBodyBytes {
                context.tooLarge = true
                context.body = []
            } else if !context.tooLarge, let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) {
                    context.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count))
                }
            }
            uploadSize.pointee = 0
            return MHD_Result.YES
        }
        context.phase = .dispatched
        if server.draining.load(ordering: .acquiring) {
            var response = server.configuration.drainResponse
            response.headers.append(("Connection", "close"))
            return queue(response, on: connection, server: server)
        }
        // Counted before the handler runs: the handler may start work elsewhere (an upstream
        // request) that shutdown must wait for, even before this thread gets to suspend.
        context.inFlight = true
        let handle = RequestContext.ConnectionHandle(pointer: connection, loop: server.loop(of: connection))
        context.dispatchedOn = handle
        server.inFlight.add(1, ordering: .relaxed)
        let request = HTTPServerRequest(
            method: method.map { String(cString: $0) } ?? "GET",
            path: url.map { String(cString: $0) } ?? "/",
            rawTarget: context.rawTarget,
            headers: context.headers,
            body: context.body,
            bodyTooLarge: context.tooLarge)
        context.body = []
        context.headers = []
        if let response = server.handler.handle(request, responder: HTTPResponder(context: context, server: server)) {
            return queue(response, on: connection, server: server)
        }
        // The answer may already be there (it raced us); otherwise suspend until `complete`.
        let ready: HTTPServerResponse? = context.state.withLock { handOver in
            if let response = handOver.response { return response }
            handOver.suspended = true
            handOver.connection = handle
            MHD_suspend_connection(connection)
            return nil
        }
        if let ready { return queue(ready, on: connection, server: server) }
        return MHD_Result.YES
    case .dispatched:
        // Called again after MHD_resume_connection: the answer is in.
        guard let response = context.state.withLock({ $0.response }) else { return MHD_Result.YES }
        return queue(response, on: connection, server: server)
    }
}

private func queue(_ response: HTTPServerResponse, on connection: OpaquePointer, server: HTTPServer) -> MHD_Result {
    let recent = RecentResponses.mayKeep(response) ? server.loop(of: connection)?.recentResponses : nil
    let now = recent == nil ? 0 : DispatchTime.now().uptimeNanoseconds
    if let recent, let same = recent.find(response, now: now) {
        return MHD_queue_response(connection, UInt32(response.status), same)
    }
    let mhdResponse: OpaquePointer?
    if let stream = response.stream {
        stream.attach(RequestContext.ConnectionHandle(pointer: connection, loop: server.loop(of: connection)))
        mhdResponse = MHD_create_response_from_callback(larder_mhd_size_unknown(), 16 << 10, streamReader,
                                                        Unmanaged.passRetained(stream).toOpaque(), streamReleased)
    } else if let file = response.file, let descriptor = file.descriptor.take() {
        // libmicrohttpd owns the descriptor from here and closes it with the response.
        mhdResponse = MHD_create_response_from_fd_at_offset64(UInt64(file.length), descriptor, UInt64(file.offset))
        if mhdResponse == nil { close(descriptor) }
    } else if let length = response.headContentLength, length >= 0, response.body.isEmpty {
        // A body of that length that is never read: libmicrohttpd announces its size and, for
        // a HEAD, sends nothing of it (its own Content-Length cannot be replaced otherwise).
        mhdResponse = MHD_create_response_from_callback(UInt64(length), 4096, { _, _, _, _ in larder_mhd_end_with_error() },
                                                        nil, nil)
    } else if response.body.count >= ResponseBody.lentFrom {
        // Lent, not copied: libmicrohttpd sends from the body's own storage and lets go of it
        // with the response. A 64 KiB hit from the memory tier spent a fifth of its
        // instructions copying the body into libmicrohttpd's buffer.
        let body = Unmanaged.passRetained(ResponseBody(response.body))
        mhdResponse = body.takeUnretainedValue().bytes.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer_with_free_callback_cls(
                bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), responseBodyReleased, body.toOpaque())
        }
        if mhdResponse == nil { body.release() }
    } else {
        mhdResponse = response.body.withUnsafeBytes { bytes in
            MHD_create_response_from_buffer(bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                                             .RESPMEM_MUST_COPY)
        }
    }
    guard let mhdResponse else { return MHD_Result.NO }
    for header in response.headers {
        if FieldBytes.hasRawBytes(header.value) {
            // Bytes that are not UTF-8 (obs-text) go out as they came in.
            let raw = FieldBytes.bytes(header.value) + [0]
            raw.withUnsafeBufferPointer { value in
                value.withMemoryRebound(to: CChar.self) { _ = MHD_add_response_header(mhdResponse, header.name, $0.baseAddress) }
            }
        } else {
            // withCString, not the implicit conversion: that copies a short string (a name, most
            // values) to a heap array each time; withCString copies it to the stack.
            header.name.withCString { name in
                header.value.withCString { value in _ = MHD_add_response_header(mhdResponse, name, value) }
            }
        }
    }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    if let recent, result == MHD_Result.YES {
        recent.keep(response, mhdResponse, now: now)
    } else {
        MHD_destroy_response(mhdResponse)
    }
    return result
}

/// The last few responses one event loop handed to libmicrohttpd, queued again to a later
/// connection whose answer is the same: the same status, the same fields in the same order, and
/// the same body storage (kept here, so the same address is the same bytes). libmicrohttpd
/// lets one response go to many connections (it counts its uses and adds the per-connection
/// fields itself), and a hot URL's answer is the same for every hit within a second (its Age
/// changes each second): building it again, the response and a copy of each field, was about
/// a tenth of such a hit's instructions. Byte bodies only, up to `maxBodyBytes`, a few
/// responses, each kept at most `keptNanoseconds`: it never holds much. Used on its loop's
/// thread only.
final class RecentResponses {
    private struct Kept {
        /// What it was built from; its body is kept too, so that the storage responses are
        /// compared by cannot be reused meanwhile.
        let answer: HTTPServerResponse
        let response: OpaquePointer
        let keptAt: UInt64
    }

    static let capacity = 4
    static let maxBodyBytes = 64 << 10
    static let keptNanoseconds: UInt64 = 2_000_000_000
    private var kept: [Kept] = []
    /// Responses queued again; this loop's own count (a count shared by the loops would move
    /// between their cores on every hot hit), read by others for tests.
    let reuses = Atomic<Int>(0)

    /// Whether a response could be kept: a body of bytes (not a file, a stream or a HEAD's
    /// announced length), small enough.
    static func mayKeep(_ response: HTTPServerResponse) -> Bool {
        response.stream == nil && response.file == nil && response.headContentLength == nil
            && response.body.count <= maxBodyBytes
    }

    /// A kept response that is `response`, if any (kept no longer than `keptNanoseconds`).
    func find(_ response: HTTPServerResponse, now: UInt64) -> OpaquePointer? {
        for candidate in kept.reversed() where candidate.answer.status == response.status
            && candidate.answer.headers.count == response.headers.count
            && now &- candidate.keptAt < Self.keptNanoseconds
            && Self.sameStorage(candidate.answer.body, response.body) {
            let sameFields = zip(candidate.answer.headers, response.headers).allSatisfy { $0.name == $1.name && $0.value == $1.value }
            if sameFields {
                reuses.add(1, ordering: .relaxed)
                return candidate.response
            }
        }
        return nil
    }

    /// Keeps `mhdResponse` (this reference to it) for `response`, letting go of the oldest and
    /// of those kept too long.
    func keep(_ response: HTTPServerResponse, _ mhdResponse: OpaquePointer, now: UInt64) {
        kept.removeAll { old in
            guard now &- old.keptAt >= Self.keptNanoseconds else { return false }
            MHD_destroy_response(old.response)
            return true
        }
        if kept.count >= Self.capacity { MHD_destroy_response(kept.removeFirst().response) }
        kept.append(Kept(answer: response, response: mhdResponse, keptAt: now))
    }

    private static func sameStorage(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        a.withUnsafeBufferPointer { a in b.withUnsafeBufferPointer { b in a.baseAddress == b.baseAddress && a.count == b.count } }
    }

    deinit {
        for old in kept { MHD_destroy_response(old.response) }
    }
}

private let streamReader: MHD_ContentReaderCallback = { context, _, buffer, max in
    guard let context, let buffer else { return larder_mhd_end_of_stream() }
    let stream = Unmanaged<HTTPResponseStream>.fromOpaque(context).takeUnretainedValue()
    return stream.read(into: buffer, max: max)
}

/// A response body libmicrohttpd sends without copying. The array is a constant of this
/// object, so its (native, contiguous) storage neither moves nor goes away until libmicrohttpd
/// is done with the response and releases the object.
private final class ResponseBody {
    /// Smaller bodies are copied: libmicrohttpd's copy costs less than this object.
    static let lentFrom = 4096
    let bytes: [UInt8]
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

private let responseBodyReleased: MHD_ContentReaderFreeCallback = { context in
    guard let context else { return }
    Unmanaged<ResponseBody>.fromOpaque(context).release()
}

private let streamReleased: MHD_ContentReaderFreeCallback = { context in
    guard let context else { return }
    let stream = Unmanaged<HTTPResponseStream>.fromOpaque(context)
    stream.takeUnretainedValue().close()
    stream.release()
}

/// The request's header fields with their sizes as parsed, so a NUL inside a name or value is
/// seen (and refused) rather than silently cutting it short.
private func collectHeaders(_ connection: OpaquePointer) -> [(name: String, value: String)] {
    var headers: [(name: String, value: String)] = []
    withUnsafeMutablePointer(to: &headers) { pointer in
        _ = MHD_get_connection_values_n(connection, .HEADER_KIND, { slot, _, key, keySize, value, valueSize in
            guard let slot, let key else { return MHD_Result.YES }
            let list = slot.assumingMemoryBound(to: [(name: String, value: String)].self)
            func text(_ pointer: UnsafePointer<CChar>?, _ count: Int) -> String {
                guard let pointer, count > 0 else { return "" }
                return pointer.withMemoryRebound(to: UInt8.self, capacity: count) {
                    FieldBytes.string(UnsafeBufferPointer(start: $0, count: count))
                }
            }
            list.pointee.append((text(key, keySize), text(value, valueSize)))
            return MHD_Result.YES
        }, pointer)
    }
    return headers
}

// MARK: - Event loops

/// Admits every connection: the limits are kept by `Admission`, across all loops.
private let acceptAll: MHD_AcceptPolicyCallback = { _, _, _ in MHD_Result.YES }

/// A client's IP address (without the port), as the per-address limit counts it.
struct ClientAddress: Hashable {
    let bytes: [UInt8]

    init(_ storage: sockaddr_storage) {
        var copy = storage
        bytes = withUnsafePointer(to: &copy) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { ClientAddress.bytes(of: $0) }
        }
    }

    init(_ address: UnsafePointer<sockaddr>) { bytes = Self.bytes(of: address) }

    private static func bytes(of address: UnsafePointer<sockaddr>) -> [UInt8] {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) } }
        case AF_INET6:
            address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) } }
        default:
            []
        }
    }
}

/// Connections open against the server's limits: in all, and per client address (0 = no
/// limit). One count for all loops, as one daemon kept it before there were several.
struct Admission {
    var limit = 0
    var open = 0
    var perAddress: [ClientAddress: Int] = [:]

    mutating func admit(_ client: ClientAddress, perAddress limitPerAddress: Int) -> Bool {
        guard open < limit else { return false }
        let current = perAddress[client, default: 0]
        if limitPerAddress > 0, current >= limitPerAddress { return false }
        open += 1
        perAddress[client] = current + 1
        return true
    }

    mutating func release(_ client: ClientAddress) {
        guard let current = perAddress[client] else { return }
        open -= 1
        if current <= 1 { perAddress.removeValue(forKey: client) } else { perAddress[client] = current - 1 }
    }
}

/// One thread running one libmicrohttpd daemon in external epoll mode: it waits on the
/// daemon's epoll descriptor, the shared listening socket and its own wake-up descriptor, accepts
/// connections onto its daemon and calls MHD_run, which processes without blocking.
///
/// Why not libmicrohttpd's own threads: in poll mode (level-triggered, used until 2026-11-24)
/// every round polls every connection of the thread, and a response waits for a round that
/// reports the socket writable; in 0.9.75's own epoll thread, a round that gets exactly 128
/// events (MAX_EVENTS) calls epoll_wait again with the full timeout before processing them, so
/// those connections stall until another event or a timeout (seen: stalls from 128 connections
/// per thread). MHD_run never blocks (timeout 0), so that second call returns at once.
///
/// With a companion (the upstream transfers of this loop's requests), the companion waits on
/// its own sockets and the loop's descriptors in one poll, and takes a turn after MHD_run: a
/// request that needs the origin is sent, read and answered on this thread. A wake-up from the
/// loop's own thread (an answer completed in the turn resumes its connection) writes no
/// descriptor: the loop runs MHD_run again at once and does not wait in its next round.
final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: the daemon and `roundWanted` are used by this loop's thread only (and
    // by `stop` after the thread ended); `stopping` and `thread` are atomic; the descriptors are
    // fixed; the companion is called on this loop's thread only.
    let daemon: OpaquePointer
    let index: Int
    private let epollDescriptor: Int32
    private let wakeDescriptor: Int32
    private let companion: (any EventLoopCompanion)?
    private let stopping = Atomic<Bool>(false)
    private let ended = DispatchSemaphore(value: 0)
    private var running = false
    /// The loop's thread (pthread_self), 0 before it starts.
    private let thread = Atomic<UInt>(0)
    /// Woken from this loop's own thread (a connection resumed by an answer completed here, or
    /// companion work left for the next turn): run MHD_run now and do not wait in the next round.
    private var roundWanted = false
    /// Responses this loop may queue again (see RecentResponses); its thread only.
    let recentResponses = RecentResponses()
    /// Its connections' header deadlines; its thread only.
    let headerDeadlines: HeaderDeadlines

    init?(daemon: OpaquePointer, index: Int, headerDeadlines: HeaderDeadlines, companion: (any EventLoopCompanion)? = nil) {
        let epoll = larder_mhd_epoll_fd(daemon)
        let wake = larder_wake_descriptor()
        guard epoll >= 0, wake >= 0 else {
            if wake >= 0 { close(wake) }
            return nil
        }
        self.daemon = daemon
        self.index = index
        self.headerDeadlines = headerDeadlines
        self.epollDescriptor = epoll
        self.wakeDescriptor = wake
        self.companion = companion
        // `run` polls the descriptors as they are.
        precondition(MemoryLayout<LoopDescriptor>.size == MemoryLayout<pollfd>.size
                     && MemoryLayout<LoopDescriptor>.offset(of: \.revents) == MemoryLayout<pollfd>.offset(of: \.revents))
    }

    func start(server: HTTPServer) {
        running = true
        let thread = Thread { [self] in
            nameCurrentThread("larder-http-\(index)")
            run(server)
        }
        thread.start()
    }

    /// Makes the loop run a round now (from any thread; on its own, the round follows at once).
    func wake() {
        if UInt(pthread_self()) == thread.load(ordering: .relaxed) {
            roundWanted = true
            return
        }
        var one: UInt64 = 1
        _ = write(wakeDescriptor, &one, 8)
    }

    /// Ends the thread, then the daemon (closing its connections).
    func stop() {
        if running {
            stopping.store(true, ordering: .releasing)
            wake()
            ended.wait()
            running = false
        }
        MHD_stop_daemon(daemon)
    }

    // The wake-up descriptor lives as long as the loop: a responder that answers after the
    // server stopped (its request long over) still holds the loop through its connection handle,
    // and must not write into a descriptor number the process has reused.
    deinit { close(wakeDescriptor) }

    private func run(_ server: HTTPServer) {
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        // sendfile can raise SIGPIPE (MSG_NOSIGNAL is for send only): blocked on this thread, as
        // libmicrohttpd's own threads do, whatever the process does with it.
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &signals, nil)
        companion?.attach { [weak self] in self?.wake() }
        var descriptors = [LoopDescriptor(fd: epollDescriptor, events: Int16(POLLIN)),
                           LoopDescriptor(fd: wakeDescriptor, events: Int16(POLLIN)),
                           LoopDescriptor(fd: -1, events: Int16(POLLIN))]
        while !stopping.load(ordering: .acquiring) {
            var timeout: UInt64 = 0
            // No timeout to keep: wait for an event; libmicrohttpd says 0 when work is pending.
            var wait = MHD_get_timeout(daemon, &timeout) == MHD_Result.YES ? Int32(min(timeout, 60_000)) : -1
            if let check = headerDeadlines.millisecondsToNextCheck() { wait = wait < 0 ? check : min(wait, check) }
            if roundWanted { wait = 0 }
            for index in descriptors.indices { descriptors[index].revents = 0 }
            descriptors[2].fd = server.socketToAcceptOn
            let companionReady = descriptors.withUnsafeMutableBufferPointer { buffer -> Bool in
                if let companion { return companion.wait(buffer, timeoutMs: wait) }
                buffer.withMemoryRebound(to: pollfd.self) { _ = poll($0.baseAddress, nfds_t($0.count), wait) }
                return false
            }
            if descriptors[1].revents != 0 {
                var count: UInt64 = 0
                _ = read(wakeDescriptor, &count, 8)
            }
            if descriptors[2].revents != 0 { server.acceptConnections(onto: self) }
            // Late header sections: their sockets are shut down, and MHD_run closes them.
            if headerDeadlines.check() { roundWanted = true }
            // Only the companion's sockets had events (an origin answered): libmicrohttpd has
            // nothing to do unless its timeout came, and then the next round's is 0.
            let serverIdle = companionReady && wait != 0 && !roundWanted && descriptors.allSatisfy { $0.revents == 0 }
            roundWanted = false
            if !serverIdle { MHD_run(daemon) }
            if let companion {
                companion.turn()
                // Answers completed in that turn: queue them now rather than after another poll.
                // The flag stays set, so the next round does not wait either: the turn may have
                // left work for the next one (an exchange sent from a completion).
                if roundWanted { MHD_run(daemon) }
            }
        }
        companion?.detach()
        ended.signal()
    }
}

/// Watches sockets of suspended requests for the peer's close (POLLRDHUP), on one thread.
/// libmicrohttpd does not watch a suspended connection, so without this a client that gives up
/// on a long request is only noticed when the answer is written.
/// Linux's POLLRDHUP (peer closed its end); Glibc's module does not export the macro.
private let pollRDHUP: Int32 = 0x2000

final class DisconnectWatcher: @unchecked Sendable {
    // @unchecked Sendable: `registrations` is guarded by `condition`; the thread is started once.
    private var registrations: [Int32: (id: UInt64, handler: @Sendable () -> Void)] = [:]
    private var nextID: UInt64 = 0
    private var started = false
    private let condition = NSCondition()

    /// Watches `fd`; `handler` runs once (on the watcher's thread) when the peer closes it.
    func watch(_ fd: Int32, _ handler: @escaping @Sendable () -> Void) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        nextID += 1
        registrations[fd] = (nextID, handler)
        if !started {
            started = true
            let thread = Thread { [self] in
                nameCurrentThread("larder-disconnects")
                run()
            }
            thread.start()
        }
        condition.signal()
        return nextID
    }

    func unwatch(_ fd: Int32, id: UInt64) {
        condition.lock()
        if registrations[fd]?.id == id { registrations.removeValue(forKey: fd) }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while registrations.isEmpty { condition.wait() }
            let snapshot = registrations.map { (fd: $0.key, id: $0.value.id) }
            condition.unlock()
            var descriptors = snapshot.map { pollfd(fd: $0.fd, events: Int16(pollRDHUP), revents: 0) }
            // A short timeout: registrations made meanwhile are picked up on the next round.
            _ = poll(&descriptors, nfds_t(descriptors.count), 100)
            var gone: [@Sendable () -> Void] = []
            condition.lock()
            for (index, descriptor) in descriptors.enumerated()
            where Int32(descriptor.revents) & (Int32(pollRDHUP) | Int32(POLLHUP) | Int32(POLLERR)) != 0 {
                let fd = snapshot[index].fd
                // Only the registration polled: the descriptor may have been reused since.
                if let registration = registrations[fd], registration.id == snapshot[index].id {
                    registrations.removeValue(forKey: fd)
                    gone.append(registration.handler)
                }
            }
            condition.unlock()
            for handler in gone { handler() }
        }
    }
}
