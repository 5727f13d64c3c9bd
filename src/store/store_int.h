/* src/store/store_int.h - what the store's files share (internal to src/store).
 *
 *   store.c    the connection, the jobs table, the public calls
 *   schema.c   the schema and its numbered migrations (PRAGMA user_version)
 *   backup.c   copies of a store (kiln admin backup, the pre-upgrade copy)
 *   restore.c  the in-use lock (kiln_store_hold) and kiln admin restore
 *   filter.c   the list filter: parse, match, and the SQL that narrows a list
 *   qrank.c    the queue's order in memory, for an exact jobPosition in O(log n)
 *   commit.c   group commit: one fdatasync of the WAL for many writers
 *   token.c    opaque, authenticated page tokens */
#ifndef KILN_STORE_INT_H
#define KILN_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/store.h"

/* ---- schema.c ---- */

/* The schema version this build writes (PRAGMA user_version). */
#define KILN__STORE_SCHEMA 3
/* Brings `db` to KILN__STORE_SCHEMA in one transaction: creates a new store,
 * or migrates an older one in place. A store written by a newer kiln is
 * refused (its meaning is unknown here). Errors go to `d`. */
kiln_err kiln__store_schema(sqlite3 *db, const char *path, kiln_diag *d);
/* ---- backup.c ---- */

/* Copies the database of `from` (which the caller keeps) to the new file
 * `dest`, as kiln_store_backup does: dest.tmp, one file, checked, synced,
 * renamed; `dest` must not exist. The migration's copy (schema.c) and
 * `kiln admin backup` share it. */
kiln_err kiln__store_copy(sqlite3 *from, const char *dest, kiln_store_backup_info *info,
                          kiln_diag *d);
/* fsync(2) of the file or directory at `path`, opened with `flags`
 * (O_RDONLY, plus O_DIRECTORY for a directory's entries); -1 and errno. */
int kiln__store_fsync_path(const char *path, int flags);

/* The store's secret (for page tokens), created with the schema. */
kiln_err kiln__store_secret(sqlite3 *db, unsigned char key[32]);

/* ---- filter.c ---- */

/* The SQL of one list page: rows of `project` after seq ?2, in seq order,
 * narrowed by the filter's terms that an index can answer. Every row the
 * statement yields still goes through kiln_job_filter_match(): the SQL only
 * has to yield a superset, in order. `cols` is the column list to select
 * (qualified with "j."). The statement binds ?1 = project, ?2 = after;
 * kiln__filter_bind() binds the rest. */
char *kiln__filter_sql(const kiln_job_filter *f, const char *cols);
void kiln__filter_bind(const kiln_job_filter *f, sqlite3_stmt *st);

/* ---- qrank.c: an order-statistic set of queued jobs' keys ---- */

typedef struct kiln__qkey {
    int64_t priority; /* higher first */
    int64_t create_ns;
    int64_t seq;
} kiln__qkey;

typedef struct kiln__qrank kiln__qrank;
kiln__qrank *kiln__qrank_new(void);
void kiln__qrank_free(kiln__qrank *q);
/* Adds k (no-op when present); KILN_ENOMEM. */
kiln_err kiln__qrank_add(kiln__qrank *q, kiln__qkey k);
/* Removes k (no-op when absent). */
void kiln__qrank_remove(kiln__qrank *q, kiln__qkey k);
/* How many keys come before k in queue order. */
size_t kiln__qrank_before(const kiln__qrank *q, kiln__qkey k);
size_t kiln__qrank_size(const kiln__qrank *q);

/* ---- commit.c: group commit ---- */

typedef struct kiln__gcommit {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t committed; /* commits made (tickets handed out) */
    uint64_t durable;   /* commits known to be on disk */
    bool flushing;      /* a leader is in fdatasync */
    int fd;             /* the WAL file, opened on first use; -1 = not yet */
    int err;            /* errno of the failed flush, 0 = none (sticky: see commit.c) */
    char *wal_path;
    uint64_t flushes; /* fdatasync calls made (for tests and benchmarks) */
} kiln__gcommit;

kiln_err kiln__gcommit_init(kiln__gcommit *g, const char *db_path);
void kiln__gcommit_destroy(kiln__gcommit *g);
/* After a commit of the database connection (under the store's lock, so
 * tickets follow commit order): its ticket. */
uint64_t kiln__gcommit_ticket(kiln__gcommit *g);
/* Returns once commit `ticket` is on disk (outside the store's lock): the
 * first waiter syncs the WAL for every commit made so far, those arriving
 * meanwhile wait for it or for the next one. KILN_EIO when the sync covering
 * it failed, and for every ticket not durable before a failed sync (the
 * failure is sticky: logged once to stderr with the WAL's path and errno). */
kiln_err kiln__gcommit_wait(kiln__gcommit *g, uint64_t ticket);
/* Whether a sync has failed: the store then refuses writes (KILN_EIO). */
bool kiln__gcommit_failed(kiln__gcommit *g);

/* ---- token.c ---- */

/* A page token for "continue after seq" of a list of `project` under the
 * filter text `filter` ("" = none): base64url of a version, the seq and a
 * MAC over all three plus the project and filter, so that a token edited by
 * hand, or made for another project or another filter, is refused. */
#define KILN__TOKEN_LEN KILN_STORE_TOKEN_LEN
void kiln__token_make(const unsigned char key[32], const char *project, const char *filter,
                      int64_t seq, char out[KILN__TOKEN_LEN]);
bool kiln__token_read(const unsigned char key[32], const char *project, const char *filter,
                      const char *token, int64_t *seq);

#endif
