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

// sqlite3_config is variadic, which Swift cannot call. With memory statistics on (SQLite's
// default), every allocation and free by any connection takes one process-wide mutex to count
// it, so the server threads' readers and the writer wait on each other (docs/performance.md).
// Larder reads no SQLite memory statistics. Must run before SQLite is initialised.
static inline int larder_sqlite3_config_no_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

// sqlite3_db_config is variadic too. A closed store's writer connection lives until the store
// object is freed, after the file's lock is let go; when it is finally closed it must not
// checkpoint, nor delete the WAL and shared-memory files by name, which by then may be another
// store's (SQLiteCacheStore.close).
static inline int larder_sqlite3_no_checkpoint_on_close(sqlite3 *_Nonnull db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

#endif
