#ifndef LARDER_CHIREDIS_SHIM_H
#define LARDER_CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>

// REDIS_REPLY_* and REDIS_OK are macros; redisReply fields are reached through these so the
// Swift side does not depend on the struct's layout across hiredis versions.
static inline int larder_redis_ok(void) { return REDIS_OK; }
static inline int larder_reply_type(const redisReply *_Nonnull r) { return r->type; }
static inline long long larder_reply_integer(const redisReply *_Nonnull r) { return r->integer; }
static inline const char *_Nullable larder_reply_str(const redisReply *_Nonnull r) { return r->str; }
static inline size_t larder_reply_len(const redisReply *_Nonnull r) { return r->len; }
static inline size_t larder_reply_elements(const redisReply *_Nonnull r) { return r->elements; }
static inline const redisReply *_Nonnull larder_reply_element(const redisReply *_Nonnull r, size_t i) { return r->element[i]; }
enum {
    LARDER_REPLY_STRING = REDIS_REPLY_STRING,
    LARDER_REPLY_ARRAY = REDIS_REPLY_ARRAY,
    LARDER_REPLY_INTEGER = REDIS_REPLY_INTEGER,
    LARDER_REPLY_NIL = REDIS_REPLY_NIL,
    LARDER_REPLY_STATUS = REDIS_REPLY_STATUS,
    LARDER_REPLY_ERROR = REDIS_REPLY_ERROR,
};
static inline int larder_context_error(const redisContext *_Nonnull c) { return c->err; }
static inline const char *_Nonnull larder_context_errstr(const redisContext *_Nonnull c) { return c->errstr; }
#include <sys/socket.h>
// Wakes a thread blocked reading this connection (the subscriber, at shutdown).
static inline void larder_context_shutdown(redisContext *_Nonnull c) { if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR); }
#endif
