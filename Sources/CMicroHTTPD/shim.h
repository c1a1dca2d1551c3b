#ifndef LARDER_CMICROHTTPD_SHIM_H
#define LARDER_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

// Not exported by Swift's Glibc module: accept4 needs _GNU_SOURCE, and eventfd is in its own
// header. For HTTPServer's event loops.
int accept4(int fd, struct sockaddr *_Nullable address, socklen_t *_Nullable length, int flags);
#include <sys/eventfd.h>

/// Accepts one connection, non-blocking and close-on-exec; -1 when none is waiting.
static inline int larder_accept(int fd, struct sockaddr *_Nonnull address, socklen_t *_Nonnull length) {
    return accept4(fd, address, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

/// A descriptor another thread makes readable to wake a loop (non-blocking, close-on-exec).
static inline int larder_wake_descriptor(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

// What a daemon logs (MHD_OPTION_EXTERNAL_LOGGER's callback takes a va_list, which Swift cannot
// format): formatted and handed to `sink` (the server's logger: so that a JSON log stays JSON), or
// written to stderr as libmicrohttpd would without one; while `capturing`, kept in `text`, so
// that a daemon that cannot start says why in the error (GnuTLS refusing a certificate or key).
struct larder_mhd_log {
    int capturing;
    char text[512];
    void (*_Nullable sink)(void *_Nullable context, const char *_Nonnull message);
    void *_Nullable sinkContext;
};

static inline void larder_mhd_log_message(void *_Nullable context, const char *_Nonnull format, va_list arguments) {
    struct larder_mhd_log *log = (struct larder_mhd_log *)context;
    if (log != 0 && !log->capturing && log->sink != 0) {
        char message[1024];
        vsnprintf(message, sizeof(message), format, arguments);
        log->sink(log->sinkContext, message);
        return;
    }
    if (log == 0 || !log->capturing) {
        vfprintf(stderr, format, arguments);
        return;
    }
    size_t used = strlen(log->text);
    if (used + 1 < sizeof(log->text)) vsnprintf(log->text + used, sizeof(log->text) - used, format, arguments);
}

/// What was captured (see larder_mhd_log).
static inline const char *_Nonnull larder_mhd_log_text(const struct larder_mhd_log *_Nonnull log) { return log->text; }

// GnuTLS's priority string for every TLS listener: its NORMAL set with TLS 1.3 and 1.2 only,
// ECDHE or DHE key exchange, and the AEAD ciphers AES-GCM and ChaCha20-Poly1305.
#define LARDER_TLS_PRIORITIES                                                                      \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:+DHE-RSA:"         \
    "-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:-MAC-ALL:+AEAD"

// MHD_start_daemon takes a variadic option list, which Swift cannot build. This wrapper
// passes the one option set Larder uses: a daemon without threads or a listening socket of its
// own, whose event loop the caller runs (HTTPServer's EventLoop: it waits on the daemon's epoll
// descriptor, adds the connections it accepts and calls MHD_run). SIGPIPE is blocked on the
// loop threads, so responses from files may go out with sendfile. With `tlsKey` and `tlsCert`
// (PEM, NUL-terminated; `flags` must then include MHD_USE_TLS) it speaks HTTPS only, TLS 1.2
// and 1.3; libmicrohttpd reads them while it starts (GnuTLS copies them).
static inline struct MHD_Daemon *_Nullable larder_mhd_start_external(
    unsigned int flags,
    const struct sockaddr *_Nonnull address,
    unsigned int connectionTimeoutSeconds,
    unsigned int connectionLimit,
    size_t connectionMemoryLimit,
    MHD_AcceptPolicyCallback _Nonnull acceptPolicy, void *_Nullable acceptPolicyContext,
    MHD_AccessHandlerCallback _Nonnull handler, void *_Nullable handlerContext,
    MHD_RequestCompletedCallback _Nonnull completed, void *_Nullable completedContext,
    void *_Nullable (*_Nonnull uriLogger)(void *_Nullable, const char *_Nonnull, struct MHD_Connection *_Nonnull),
    void *_Nullable uriLoggerContext,
    MHD_NotifyConnectionCallback _Nonnull notifyConnection, void *_Nullable notifyContext,
    const char *_Nullable tlsKey, const char *_Nullable tlsCert,
    struct larder_mhd_log *_Nonnull log) {
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)tlsKey},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)tlsCert},
        // TLS 1.3, and TLS 1.2 with forward secrecy and AEAD only (RFC 9325 §4.2): no TLS 1.0
        // or 1.1 (RFC 8996), no static-RSA key exchange, no CBC suites (and their SHA-1 MACs).
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)LARDER_TLS_PRIORITIES},
        {MHD_OPTION_END, 0, 0}};
    struct MHD_OptionItem plain[] = {{MHD_OPTION_END, 0, 0}};
    return MHD_start_daemon(flags, 0, acceptPolicy, acceptPolicyContext, handler, handlerContext,
                            MHD_OPTION_EXTERNAL_LOGGER, larder_mhd_log_message, (void *)log,
                            MHD_OPTION_ARRAY, (tlsKey != 0 && tlsCert != 0) ? tls : plain,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_CONNECTION_TIMEOUT, connectionTimeoutSeconds,
                            MHD_OPTION_CONNECTION_LIMIT, connectionLimit,
                            // Strict: HTTP/1.1 without Host and whitespace in the URL are 400.
                            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, connectionMemoryLimit,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1,
                            MHD_OPTION_SIGPIPE_HANDLED_BY_APP, (int)1,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completedContext,
                            MHD_OPTION_URI_LOG_CALLBACK, uriLogger, uriLoggerContext,
                            MHD_OPTION_NOTIFY_CONNECTION, notifyConnection, notifyContext,
                            MHD_OPTION_END);
}

// MHD_get_daemon_info is variadic. Connections the daemon holds, suspended ones included (on the
// thread that runs it: it also cleans up closed ones).
static inline unsigned int larder_mhd_connection_count(struct MHD_Daemon *_Nonnull daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info == 0 ? 0 : info->num_connections;
}

// MHD_get_daemon_info is variadic. The daemon's epoll descriptor (external epoll mode), or -1.
static inline int larder_mhd_epoll_fd(struct MHD_Daemon *_Nonnull daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info == 0 ? -1 : info->epoll_fd;
}

// MHD_get_connection_info is variadic. What the connection-notify callback stored for the
// connection (its header deadline), or NULL.
static inline void *_Nullable larder_mhd_socket_context(struct MHD_Connection *_Nonnull connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == 0 ? 0 : info->socket_context;
}

// MHD_get_connection_info is variadic. The connection's socket, or -1.
static inline int larder_mhd_connection_fd(struct MHD_Connection *_Nonnull connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == 0 ? -1 : info->connect_fd;
}

// MHD_get_connection_info is variadic. The daemon running the connection, or NULL.
static inline struct MHD_Daemon *_Nullable larder_mhd_connection_daemon(struct MHD_Connection *_Nonnull connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
    return info == 0 ? 0 : info->daemon;
}

// MHD_get_connection_info is variadic. The connection's client address, or NULL.
static inline const struct sockaddr *_Nullable larder_mhd_client_address(struct MHD_Connection *_Nonnull connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == 0 ? 0 : info->client_addr;
}

// MHD_SIZE_UNKNOWN and MHD_CONTENT_READER_END_OF_STREAM are macros.
static inline uint64_t larder_mhd_size_unknown(void) { return MHD_SIZE_UNKNOWN; }
static inline ssize_t larder_mhd_end_of_stream(void) { return MHD_CONTENT_READER_END_OF_STREAM; }
static inline ssize_t larder_mhd_end_with_error(void) { return MHD_CONTENT_READER_END_WITH_ERROR; }

#endif
