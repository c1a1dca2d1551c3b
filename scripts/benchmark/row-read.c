/* The floor of a hit's store read: random rows of a Larder database read the way its readers
 * read them (the SELECT of Sources/LarderSQLite/Reads/ReaderPool.swift, through a memory map,
 * with the readers' small page cache), every column of the row read by its type, on one
 * thread, in one read transaction. Nothing else: no HTTP, no key derived, no entry built.
 * scripts/bench-scale runs it on the filled store and prints the CPU it spends a row, by key
 * (the index on `key`, then the table, as Larder reads) and by rowid (the table alone), beside
 * the CPU a whole hit costs Larder and nginx (docs/performance.md, "What a hit over a million
 * cannot go below").
 *   row-read DATABASE SECONDS
 * prints "by-key-µs by-rowid-µs rows". */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The reader's 26 columns, in its order. */
#define READER_SELECT                                                                                             \
    "SELECT namespace, method, url, status, headers, body, body_kind, body_checksum, stored_at, freshness, version, " \
    "sensitive_fp, etag, last_modified, stale_while_revalidate, stale_if_error, must_revalidate, initial_age, url_key, " \
    "key, vary, variant_fp, body_file, body_size, tags, ttl FROM entries "
static const char *by_key = READER_SELECT "WHERE key >= ?1 AND key < ?1 || '/' AND primary_key = ?1";
static const char *by_rowid = READER_SELECT "WHERE rowid = ?1";

struct row { char key[72]; sqlite3_int64 rowid; };
static struct row *rows;
static int row_count;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* One column read by its type, as Larder's SQLiteStatement reads it (numbers as numbers:
 * asking for the bytes of a number would make SQLite format it as text first). */
static uint64_t read_column(sqlite3_stmt *select, int column) {
    switch (sqlite3_column_type(select, column)) {
    case SQLITE_INTEGER: return (uint64_t)sqlite3_column_int64(select, column);
    case SQLITE_FLOAT: return sqlite3_column_double(select, column) != 0;
    case SQLITE_NULL: return 0;
    default: return (uint64_t)sqlite3_column_bytes(select, column) + (sqlite3_column_blob(select, column) != 0);
    }
}

/* Reads random rows for `seconds`; returns the CPU microseconds a row. */
static double measure(sqlite3 *db, const char *sql, int keyed, double seconds) {
    sqlite3_stmt *select;
    if (sqlite3_prepare_v2(db, sql, -1, &select, 0) != SQLITE_OK) {
        fprintf(stderr, "row-read: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    uint64_t state = 0x9E3779B97F4A7C15u, touched = 0;
    long reads = 0;
    double started = wall_seconds(), cpu = cpu_seconds();
    while (wall_seconds() - started < seconds) {
        for (int i = 0; i < 256; i++, reads++) {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17; /* xorshift64 */
            const struct row *row = &rows[state % (uint64_t)row_count];
            if (keyed) sqlite3_bind_text(select, 1, row->key, -1, SQLITE_STATIC);
            else sqlite3_bind_int64(select, 1, row->rowid);
            int step;
            while ((step = sqlite3_step(select)) == SQLITE_ROW)
                for (int column = 0; column < 26; column++)
                    touched += read_column(select, column);
            if (step != SQLITE_DONE) {
                fprintf(stderr, "row-read: %s\n", sqlite3_errmsg(db));
                exit(1);
            }
            sqlite3_reset(select);
        }
    }
    double microseconds = (cpu_seconds() - cpu) * 1e6 / reads;
    sqlite3_finalize(select);
    return touched == 1 ? -1 : microseconds; /* `touched` keeps the column reads */
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: row-read DATABASE SECONDS\n");
        return 2;
    }
    sqlite3 *db;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, 0) != SQLITE_OK) {
        fprintf(stderr, "row-read: cannot open %s\n", argv[1]);
        return 1;
    }
    double seconds = atof(argv[2]);
    sqlite3_exec(db, "PRAGMA mmap_size = 274877906944; PRAGMA cache_size = -256", 0, 0, 0);
    sqlite3_stmt *list;
    /* Rows that are their primary key's only one (no Vary), as a plain GET's hit reads. */
    sqlite3_prepare_v2(db, "SELECT key, rowid FROM entries WHERE key = primary_key", -1, &list, 0);
    int capacity = 1 << 16;
    rows = malloc(sizeof *rows * capacity);
    if (rows == 0) return 1;
    while (sqlite3_step(list) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(list, 0);
        if (key == 0 || strlen(key) >= sizeof rows->key) continue;
        if (row_count == capacity && (rows = realloc(rows, sizeof *rows * (capacity *= 2))) == 0) return 1;
        strcpy(rows[row_count].key, key);
        rows[row_count++].rowid = sqlite3_column_int64(list, 1);
    }
    sqlite3_finalize(list);
    if (row_count == 0) {
        fprintf(stderr, "row-read: no rows\n");
        return 1;
    }
    sqlite3_exec(db, "BEGIN", 0, 0, 0);
    measure(db, by_key, 1, seconds / 4); /* the maps' pages found once, as in a running Larder */
    double keyed = measure(db, by_key, 1, seconds);
    double direct = measure(db, by_rowid, 0, seconds);
    sqlite3_exec(db, "COMMIT", 0, 0, 0);
    sqlite3_close(db);
    printf("%.1f %.1f %d\n", keyed, direct, row_count);
    return 0;
}
