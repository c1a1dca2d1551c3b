#ifndef LARDER_CSQLITE_SHIM_H
#define LARDER_CSQLITE_SHIM_H
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift cannot import.
// These wrappers bind values that SQLite copies before returning.
static inline int larder_sqlite3_bind_text_transient(sqlite3_stmt *_Nonnull stmt, int index,
                                                     const char *_Nonnull text, int length) {
    return sqlite3_bind_text(stmt, index, text, length, SQLITE_TRANSIENT);
}

static inline int larder_sqlite3_bind_blob_transient(sqlite3_stmt *_Nonnull stmt, int index,
                                                     const void *_Nullable bytes, int length) {
    return sqlite3_bind_blob(stmt, index, bytes == 0 ? "" : bytes, length, SQLITE_TRANSIENT);
}

#endif
