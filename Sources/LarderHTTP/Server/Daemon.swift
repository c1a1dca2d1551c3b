// One libmicrohttpd daemon of an event loop, its only owner: started here, stopped by `stop`.
// A loop runs one daemon for new connections and, after a certificate rotation, the daemons of
// earlier certificates until their last connection closes (EventLoop).

import CMicroHTTPD
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

final class Daemon: @unchecked Sendable {
    // @unchecked Sendable: made on one thread and handed once, through a lock, to the loop that
    // runs it (EventLoop.adopt); used from then on by that loop's thread only (and by `stop`
    // after that thread ended). Its fields are constants.
    let pointer: OpaquePointer
    /// Its epoll descriptor (external epoll mode), which the loop polls.
    let epollDescriptor: Int32
    /// Where libmicrohttpd writes what it logs: captured while starting, stderr after.
    private let log: UnsafeMutablePointer<larder_mhd_log>

    private init(pointer: OpaquePointer, epollDescriptor: Int32, log: UnsafeMutablePointer<larder_mhd_log>) {
        self.pointer = pointer
        self.epollDescriptor = epollDescriptor
        self.log = log
    }

    /// Starts a daemon without threads or a listening socket of its own (see
    /// `larder_mhd_start_external`), speaking TLS with `tls`. Throws with libmicrohttpd's reason
    /// (GnuTLS's, for a certificate and key it cannot use together).
    static func start(
        address: UnsafePointer<sockaddr>, configuration: HTTPServerConfiguration, connectionLimit: Int, tls: TLSIdentity?,
        server: UnsafeMutableRawPointer
    ) throws(HTTPServerError) -> Daemon {
        var flags =
            MHD_USE_EPOLL.rawValue | MHD_USE_NO_LISTEN_SOCKET.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
            | MHD_USE_ERROR_LOG.rawValue
        if tls != nil { flags |= MHD_USE_TLS.rawValue }
        let log = UnsafeMutablePointer<larder_mhd_log>.allocate(capacity: 1)
        log.initialize(to: larder_mhd_log())
        log.pointee.capturing = 1
        // The daemon-wide timeout is the idle timeout; each loop keeps the header deadlines
        // (HeaderDeadlines). Limits are kept by the server, across the loops (Admission).
        let daemon = withOptionalCString(tls?.key) { key in
            withOptionalCString(tls?.certificate) { certificate in
                larder_mhd_start_external(
                    UInt32(flags), address, UInt32(max(1, configuration.connectionTimeoutSeconds)),
                    UInt32(connectionLimit), configuration.connectionMemoryBytes,
                    acceptAll, nil, accessHandler, server, requestCompleted, server, uriLogger, server,
                    connectionNotified, server, key, certificate, log)
            }
        }
        let reason = String(cString: larder_mhd_log_text(log)).split(separator: "\n").joined(separator: "; ")
        log.pointee.capturing = 0
        if configuration.onLibraryMessage != nil {
            log.pointee.sink = libraryMessage
            log.pointee.sinkContext = server
        }
        guard let daemon else {
            log.deallocate()
            throw HTTPServerError(description: reason.isEmpty ? "libmicrohttpd could not start a daemon" : reason)
        }
        let epoll = larder_mhd_epoll_fd(daemon)
        guard epoll >= 0 else {
            MHD_stop_daemon(daemon)
            log.deallocate()
            throw HTTPServerError(description: "libmicrohttpd's daemon has no epoll descriptor")
        }
        return Daemon(pointer: daemon, epollDescriptor: epoll, log: log)
    }

    /// Connections it holds, suspended ones included. On the thread that runs it.
    var connectionCount: Int { Int(larder_mhd_connection_count(pointer)) }

    /// Stops it, closing its connections (none may be suspended). Once.
    func stop() {
        MHD_stop_daemon(pointer)
        log.deallocate()
    }

    /// Whether libmicrohttpd was built with TLS (Debian's is, with GnuTLS).
    static var supportsTLS: Bool { MHD_is_feature_supported(.FEATURE_TLS) == MHD_Result.YES }
}

private func withOptionalCString<Result>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}

/// Hands what libmicrohttpd logs while serving (a malformed request, a pool out of memory, a TLS
/// handshake that failed) to the server's `onLibraryMessage`, one line each.
private let libraryMessage: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>) -> Void = { context, message in
    guard let context else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(context).takeUnretainedValue()
    let text = String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    if !text.isEmpty { server.configuration.onLibraryMessage?(text) }
}
