#ifndef LARDER_CCURL_SHIM_H
#define LARDER_CCURL_SHIM_H
#include <curl/curl.h>
#include <sys/socket.h>
#include <sys/eventfd.h>

// curl_easy_setopt / curl_easy_getinfo / curl_multi_setopt are variadic: Swift cannot call
// them. One wrapper per argument shape.

static inline CURLcode larder_curl_setopt_long(CURL *_Nonnull h, CURLoption o, long v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode larder_curl_setopt_pointer(CURL *_Nonnull h, CURLoption o, void *_Nullable v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode larder_curl_setopt_string(CURL *_Nonnull h, CURLoption o, const char *_Nullable v) {
    return curl_easy_setopt(h, o, v);
}
static inline CURLcode larder_curl_setopt_offset(CURL *_Nonnull h, CURLoption o, curl_off_t v) {
    return curl_easy_setopt(h, o, v);
}

typedef size_t (*larder_curl_data_callback)(char *_Nonnull, size_t, size_t, void *_Nullable);
static inline CURLcode larder_curl_setopt_data_callback(CURL *_Nonnull h, CURLoption o,
                                                        larder_curl_data_callback _Nullable cb) {
    return curl_easy_setopt(h, o, cb);
}

typedef curl_socket_t (*larder_curl_opensocket_callback)(void *_Nullable, curlsocktype,
                                                         struct curl_sockaddr *_Nonnull);
static inline CURLcode larder_curl_setopt_opensocket(CURL *_Nonnull h,
                                                     larder_curl_opensocket_callback _Nullable cb) {
    return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, cb);
}

static inline CURLcode larder_curl_getinfo_long(CURL *_Nonnull h, CURLINFO i, long *_Nonnull out) {
    return curl_easy_getinfo(h, i, out);
}
static inline CURLcode larder_curl_getinfo_pointer(CURL *_Nonnull h, CURLINFO i, void *_Nullable *_Nonnull out) {
    return curl_easy_getinfo(h, i, out);
}

static inline CURLMcode larder_curl_multi_setopt_long(CURLM *_Nonnull m, CURLMoption o, long v) {
    return curl_multi_setopt(m, o, v);
}

// The multi handle's socket and timer callbacks (curl_multi_socket_action), set through the
// variadic curl_multi_setopt.
typedef int (*larder_curl_socket_callback)(CURL *_Nullable, curl_socket_t, int, void *_Nullable, void *_Nullable);
typedef int (*larder_curl_timer_callback)(CURLM *_Nullable, long, void *_Nullable);
static inline CURLMcode larder_curl_multi_setopt_pointer(CURLM *_Nonnull m, CURLMoption o, void *_Nullable v) {
    return curl_multi_setopt(m, o, v);
}
static inline CURLMcode larder_curl_multi_setopt_socket_callback(CURLM *_Nonnull m, larder_curl_socket_callback _Nullable cb) {
    return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, cb);
}
static inline CURLMcode larder_curl_multi_setopt_timer_callback(CURLM *_Nonnull m, larder_curl_timer_callback _Nullable cb) {
    return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, cb);
}

// CURLMsg keeps the result in a union; Swift imports it awkwardly.
static inline CURLcode larder_curl_msg_result(const CURLMsg *_Nonnull msg) {
    return msg->data.result;
}

// CURL_WRITEFUNC_PAUSE and CURLPAUSE_CONT are macros.
static inline size_t larder_curl_writefunc_pause(void) { return CURL_WRITEFUNC_PAUSE; }
static inline CURLcode larder_curl_unpause(CURL *_Nonnull h) { return curl_easy_pause(h, CURLPAUSE_CONT); }

// CURL_SOCKET_BAD and CURL_SOCKET_TIMEOUT are macros.
static inline curl_socket_t larder_curl_socket_bad(void) { return CURL_SOCKET_BAD; }
static inline curl_socket_t larder_curl_socket_timeout(void) { return CURL_SOCKET_TIMEOUT; }

// A descriptor that wakes a driver's own thread (eventfd is not in Swift's Glibc module).
static inline int larder_curl_wake_descriptor(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

#endif
