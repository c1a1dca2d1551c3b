// An HTTP/1.1 server over libmicrohttpd, independent of what Larder serves.
//
// Layers (folders of this module):
//   Server/     HTTPServer (start, drain, stop, accepting), its configuration, Admission (limits)
//   Request/    what a handler sees and answers with, and each request's state: RequestContext,
//               with its pure decisions in RequestPhase (loop thread) and ResponseHandOver (the
//               answer handed from any thread)
//   EventLoop/  the loop threads, libmicrohttpd's callbacks, queueing responses (and reusing
//               recent ones), header deadlines, the disconnect watcher
//   Stream/     the streamed (chunked) response body
//
// Threading: a few event loops (`threads`, EventLoop), each a thread running its own
// libmicrohttpd daemon in external epoll mode. They share one listening socket: each polls it
// with its daemon's epoll descriptor and accepts in turn, under one lock that also keeps the
// connection limits for all of them. The work per round is proportional to the connections that
// have something to do, not to those open (libmicrohttpd's own poll-mode threads poll every
// connection every round, so idle keep-alive connections slow every request). The handler
// runs on a loop's thread. It either returns a response at once (cache hits: no suspension, no
// hop) or returns nil and answers later through its `HTTPResponder` from any thread; the
// connection is then suspended (MHD_ALLOW_SUSPEND_RESUME) and resumed when the answer arrives,
// which also wakes its loop.
//
// libmicrohttpd calls the access handler several times per request: once with the headers,
// once per chunk of body, and a last time with no data (RequestPhase). Responses are queued
// only on a later call, never the first, or libmicrohttpd closes the connection after the
// response and keep-alive is lost.
//
// Shutdown: drain (new requests are turned away with a 503 and their connections closed), let
// the application finish or fail what is in flight, wait until every suspended connection was
// resumed and completed, then stop the daemon (stopping with a suspended connection aborts the
// process).
//
// TLS (`configuration.tls`): every daemon speaks HTTPS with libmicrohttpd's GnuTLS support. A
// new certificate (`reloadCertificates`) is installed by starting a new daemon per loop with it
// and handing it to the loop for the connections accepted from then on; the daemons of the old
// one serve their connections to their end (EventLoop). This server accepts connections itself
// and adds them to a daemon, so neither the listening socket nor a port changes hands, and
// libmicrohttpd's certificate callback (GnuTLS types in Swift, and certificates that must outlive
// every handshake that used them) is not needed.

import CMicroHTTPD
import Dispatch
import Foundation
public import LarderCore
public import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

public final class HTTPServer: @unchecked Sendable {
    // @unchecked Sendable: `loops` and `listenSocket` are written in start and stop only (before
    // the loop threads start and after they ended); the counters and the draining flag are
    // atomics; `admission` is lock-protected.

    public let configuration: HTTPServerConfiguration
    let handler: any HTTPRequestHandler
    private var loops: [EventLoop] = []
    /// The listening socket, shared by the loops (each polls it and accepts in turn).
    private var listenSocket: Int32 = -1
    /// Connections open, in all and per client address, against the configured limits.
    private let admission = Locked(Admission())
    /// Set when a loop found every place taken; cleared when a connection closes.
    private let atConnectionLimit = Atomic<Bool>(false)
    private var selfReference: Unmanaged<HTTPServer>?
    /// Watches the sockets of requests whose callers asked to learn that the client went away.
    let watcher = DisconnectWatcher()
    /// Connections waiting for an answer or a stream's bytes, ended before the daemons stop.
    let suspensions = SuspendedConnections()
    /// Set by `stopAccepting`: new requests get the drain response.
    let draining = Atomic<Bool>(false)
    /// Requests handed to the handler whose response has not been sent yet.
    let inFlight = Atomic<Int>(0)
    private let drained = NSCondition()
    public private(set) var port: Int = 0
    /// The bound address, which the daemons of a certificate rotation are started with.
    private var bindAddress = sockaddr_storage()
    private var connectionLimit = 0
    /// Rotations one at a time.
    private let rotation = NSLock()

    public init(configuration: HTTPServerConfiguration, handler: any HTTPRequestHandler) {
        self.configuration = configuration
        self.handler = handler
    }

    /// Whether libmicrohttpd was built with TLS (Debian's is, with GnuTLS); `start` with a
    /// certificate fails without it.
    public static var supportsTLS: Bool { Daemon.supportsTLS }

    /// Whether the listener speaks HTTPS.
    public var isTLS: Bool { configuration.tls != nil }

    /// Checks that libmicrohttpd can serve with `identity` (the certificate and key parse and
    /// belong together), by starting a daemon with it and stopping it; throws GnuTLS's reason.
    public static func check(_ identity: TLSIdentity) throws(HTTPServerError) {
        guard supportsTLS else { throw HTTPServerError(description: Self.noTLS) }
        var storage = sockaddr_storage()
        storage.ss_family = sa_family_t(AF_INET)
        // A daemon that never gets a connection: its callbacks never run, so the server pointer
        // they would be given is only a placeholder.
        let daemon = try withUnsafePointer(to: &storage) { pointer throws(HTTPServerError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(HTTPServerError) in
                try Daemon.start(
                    address: address, configuration: HTTPServerConfiguration(), connectionLimit: 1, tls: identity,
                    server: UnsafeMutableRawPointer(bitPattern: 1)!)
            }
        }
        daemon.stop()
    }

    static let noTLS = "this libmicrohttpd was built without TLS (MHD_FEATURE_TLS): install one built with GnuTLS, as Debian's is"

    /// Installs `identity` for the connections accepted from now on; connections open now keep
    /// the certificate they were accepted with until they close (see the file's head). Throws,
    /// changing nothing, when the listener is plain HTTP, not running, or libmicrohttpd cannot
    /// use the certificate and key (GnuTLS's reason). Not concurrently with `stop`.
    public func reloadCertificates(_ identity: TLSIdentity) throws(HTTPServerError) {
        rotation.lock()
        defer { rotation.unlock() }
        guard isTLS else { throw HTTPServerError(description: "this listener serves plain HTTP; it has no certificate to replace") }
        guard let reference = selfReference, !loops.isEmpty else { throw HTTPServerError(description: "the server is not running") }
        var made: [Daemon] = []
        for _ in loops {
            do {
                made.append(try startDaemon(tls: identity, server: reference.toOpaque()))
            } catch {
                for daemon in made { daemon.stop() }
                throw error
            }
        }
        // From here the loops take their new daemon one after the other; one that does not (it
        // stopped meanwhile) keeps the old certificate.
        var refused = 0
        for (loop, daemon) in zip(loops, made) where !loop.adopt(daemon) { refused += 1 }
        if refused > 0 { throw HTTPServerError(description: "\(refused) event loops did not take the new certificate (stopping?)") }
    }

    /// Whether connections accepted before the last rotation are still open on the daemons of
    /// the certificate before; for tests.
    public var hasRetiringDaemons: Bool { loops.contains { $0.isRetiring } }

    /// Starts a daemon for one event loop on the bound address.
    private func startDaemon(tls: TLSIdentity?, server: UnsafeMutableRawPointer) throws(HTTPServerError) -> Daemon {
        try withUnsafePointer(to: &bindAddress) { pointer throws(HTTPServerError) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(HTTPServerError) in
                try Daemon.start(address: address, configuration: configuration, connectionLimit: connectionLimit, tls: tls, server: server)
            }
        }
    }

    public func start() throws {
        if configuration.tls != nil, !Self.supportsTLS { throw HTTPServerError(description: Self.noTLS) }
        var storage = sockaddr_storage()
        _ = try Self.resolve(configuration.host, port: configuration.port, into: &storage)
        let listener: Int32
        do {
            listener = try Self.bound(to: &storage)
        } catch {
            throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port) (\(error.description))")
        }
        var boundPort = 0
        var boundAddress: IPAddress?
        let family = Int32(storage.ss_family)
        withUnsafeBytes(of: &storage) { raw in
            boundPort = Int(UInt16(bigEndian: raw.load(fromByteOffset: 2, as: UInt16.self)))
            // sockaddr_in: the address at offset 4; sockaddr_in6: at offset 8 (after the flow label).
            boundAddress =
                family == AF_INET6
                ? IPAddress(bytes: Array(raw[8..<24])) : IPAddress(bytes: Array(raw[4..<8]))
        }
        // Told before the socket listens: no connection can reach it before the rules know it.
        if let boundAddress { configuration.onListening?(boundAddress, boundPort) }
        guard Glibc.listen(listener, 4096) == 0 else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port) (\(reason))")
        }
        let reference = Unmanaged.passRetained(self)
        bindAddress = storage
        connectionLimit = Self.affordableConnections(configuration.connectionLimit, reserved: configuration.reservedDescriptors)
        admission.withLock { [connectionLimit] in $0.limit = connectionLimit }
        var started: [EventLoop] = []
        for index in 0..<max(1, configuration.threads) {
            let daemon: Daemon
            do {
                daemon = try startDaemon(tls: configuration.tls, server: reference.toOpaque())
            } catch {
                for loop in started { loop.stop() }
                close(listener)
                reference.release()
                throw HTTPServerError(description: "cannot start the HTTP server's event loop \(index): \(error.description)")
            }
            let deadlines = HeaderDeadlines(
                headerTimeoutSeconds: configuration.headerTimeoutSeconds,
                idleTimeoutSeconds: configuration.connectionTimeoutSeconds)
            guard let loop = EventLoop(daemon: daemon, index: index, headerDeadlines: deadlines, companion: configuration.loopCompanion?())
            else {
                daemon.stop()
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
    /// Not MHD_quiesce_daemon: in libmicrohttpd 0.9.75 with a thread pool in epoll mode it
    /// aborted the process when a worker had not yet registered the listening socket (a signal
    /// right after start), and the socket it hands back must outlive the workers. Draining has
    /// no such race, and callers learn why they were turned away.
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
    func completed() {
        if inFlight.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            drained.lock()
            drained.broadcast()
            drained.unlock()
        }
    }

    public var pendingCount: Int { inFlight.load(ordering: .relaxed) }
    /// Connections suspended now, waiting for an answer or a stream's next bytes.
    public var suspendedCount: Int { suspensions.count }
    /// Requests handed to the handler so far, by event loop; for tests.
    public var requestsPerLoop: [Int] { loops.map { $0.dispatched.load(ordering: .relaxed) } }
    /// Responses queued again to another connection instead of built anew; for tests.
    public var reusedResponseCount: Int { loops.reduce(0) { $0 + $1.recentResponses.reuses.load(ordering: .relaxed) } }

    /// Connections open now, and how many may be (`connectionLimit`, lowered at start to what
    /// the open-file limit allows); for metrics.
    public var connections: (open: Int, limit: Int) { admission.withLock { ($0.open, $0.limit) } }

    /// Stops the daemon, normally once `waitForPending` returned true. Requests still waiting
    /// (a handler that never answered, a stream never finished) are answered with the drain
    /// response or cut short first (SuspendedConnections), with up to `resumeTimeout` seconds
    /// for those answers to go out; one that suspends after that is closed unanswered.
    public func stop(resumeTimeout: Double = 2) {
        guard !loops.isEmpty else { return }
        if suspensions.endAll(answering: configuration.drainResponse) > 0 { waitForPending(timeout: resumeTimeout) }
        // Once a loop's thread has ended nothing new can suspend on it; what suspended since
        // is resumed here, and libmicrohttpd takes resumed connections off its suspended list
        // as it stops (they are closed unanswered: no loop is left to send).
        for loop in loops { loop.stop { suspensions.endAll(answering: configuration.drainResponse) } }
        loops = []
        close(listenSocket)
        listenSocket = -1
        selfReference?.release()
        selfReference = nil
    }

    /// Accepts up to a few waiting connections onto `loop`'s daemon (on that loop's thread, the
    /// only one that may add connections to it). Accepting and counting happen under one lock, so
    /// connections are admitted in the order they arrived, whichever loop takes them.
    func acceptConnections(onto loop: EventLoop) {
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
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    MHD_add_connection(loop.daemon.pointer, accepted.fd, $0, length)
                }
            }
            // libmicrohttpd closed the socket; it will never report it closed.
            if added != MHD_Result.YES { release(ClientAddress(address)) }
        }
    }

    /// The loop whose daemon runs `connection`.
    func loop(of connection: OpaquePointer) -> EventLoop? {
        let daemon = larder_mhd_connection_daemon(connection)
        return loops.first { $0.runs(daemon) }
    }

    /// A connection libmicrohttpd took is gone: it no longer counts against the limits.
    func connectionClosed(_ connection: OpaquePointer) {
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
    var socketToAcceptOn: Int32 {
        atConnectionLimit.load(ordering: .acquiring) ? -1 : listenSocket
    }

    /// Opens the socket to listen on and binds it (non-blocking; SO_REUSEADDR, so a restart can
    /// bind while old connections linger in TIME_WAIT); writes the bound address back into
    /// `storage`. `start` makes it listen once the address is known (`onListening`).
    private static func bound(to storage: inout sockaddr_storage) throws(HTTPServerError) -> Int32 {
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
                return bind(fd, address, length) == 0 && getsockname(fd, address, &size) == 0
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
