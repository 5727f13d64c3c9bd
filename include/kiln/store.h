/* kiln/store.h - the durable state of kilnd: jobs, their state machine and
 * node cordons, in one SQLite database (WAL mode, schema versioned and
 * migrated on open: a data dir of an older kilnd opens, one of a newer is
 * refused).
 *
 * Every write (create, state change, labels, runtime, cordon) has been
 * committed and fsynced when the call returns KILN_OK: it survives kill -9
 * of the process and a power cut from then on. Writers on several threads
 * share their fsyncs (group commit, KILN_STORE_SYNC_GROUP). A failed fsync
 * fails the writes it covered with KILN_EIO (committed, but not known to be
 * on disk), is logged to stderr once with the file and errno, and from then
 * on every write is refused with KILN_EIO until the store is reopened. Every
 * state change is one conditional UPDATE (compare-and-set on the current
 * state), so the API threads and the supervisor never need a lock of their
 * own to agree on a job's state: the loser of a race sees KILN_ECONFLICT.
 *
 * Thread safety: a kiln_store may be shared by threads; calls are serialised
 * by a mutex inside it.
 *
 * Ownership: records returned are owned by the caller (kiln_job_record_free /
 * kiln_job_records_free); input pointers are only read during the call. */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_store kiln_store;

/* One job as stored: the Job resource (output fields filled in) plus what the
 * service keeps beside it. */
typedef struct kiln_job_record {
    int64_t seq;     /* insertion order; page tokens are built on it */
    int64_t version; /* bumped by every write to the job (the etag is seq-version) */
    char *project;
    kiln_job *job;     /* state, createTime, startTime, endTime, errorMessage, etag set */
    int64_t create_ns; /* CLOCK_REALTIME, ns */
    int64_t start_ns;  /* first RUNNING, 0 = never */
    int64_t end_ns;    /* terminal state reached, 0 = not yet */
    int64_t priority;
    int restarts;  /* group restarts of any cause (failures, drains, kilnd restarts) */
    int failures;  /* restarts charged to the backoff limit */
    char *runtime; /* supervisor's JSON (replica pids, ...); NULL when none */
} kiln_job_record;

/* Bit mask of states: KILN_STATE_MASK(QUEUED) | ... */
#define KILN_STATE_MASK(s) (1u << (KILN_STATE_##s))
#define KILN_STATES_ACTIVE                                                                         \
    (KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) |             \
     KILN_STATE_MASK(CANCELLING))
#define KILN_STATES_TERMINAL                                                                       \
    (KILN_STATE_MASK(SUCCEEDED) | KILN_STATE_MASK(FAILED) | KILN_STATE_MASK(CANCELLED))

/* The schema version this build writes (and the newest it opens). */
int kiln_store_schema_version(void);

/* Opens (creating if needed) the database at `path`. */
kiln_err kiln_store_open(const char *path, kiln_store **out, kiln_diag *d);
void kiln_store_close(kiln_store *s);

/* What a backup copied (kiln_store_backup). */
typedef struct kiln_store_backup_info {
    int schema;      /* the copy's schema version (PRAGMA user_version) */
    long long jobs;  /* rows of its jobs table */
    long long bytes; /* the copy's size */
} kiln_store_backup_info;

/* Copies the store at `src` (a kilnd.db, which a kilnd may be serving from
 * at the time) to a new file `dest` with SQLite's online backup: one read
 * transaction of the source, so the copy is the store as of one commit,
 * while kilnd goes on writing (WAL: a reader does not block it). The copy
 * is written to dest.tmp (mode 0600), made a single file (journal_mode DELETE), checked
 * (PRAGMA integrity_check), synced and renamed to dest; `dest` must not
 * exist. Neither file is left half-written: on any failure dest.tmp is
 * removed. The source is never created or migrated. src/store/backup.c */
kiln_err kiln_store_backup(const char *src, const char *dest, kiln_store_backup_info *info,
                           kiln_diag *d);

/* Marks the store at `path` in use by this process: a shared flock on
 * PATH-lock (created, mode 0600, when missing), held while `*fd` stays open
 * (the caller closes it, or exits; the fd is close-on-exec). Any number of
 * holders share it (two kilnds on one store stay possible); a restore takes
 * it exclusively. KILN_ECONFLICT while a restore holds it, KILN_EIO when the
 * lock file cannot be opened; a sentence in `d` either way.
 * src/store/restore.c */
kiln_err kiln_store_hold(const char *path, int *fd, kiln_diag *d);

/* What a restore did (kiln_store_restore). */
typedef struct kiln_store_restore_info {
    kiln_store_backup_info copy; /* what was put in place: schema, jobs, bytes */
    char aside[4096];            /* where the replaced files went; "" = none were there */
    char moved[64];              /* their names moved there, e.g. "kilnd.db -wal" */
    bool replaced;               /* a store was there: undoing restores aside/BASE */
} kiln_store_restore_info;

/* Puts the backup `file` in place of the store at `path` (a kilnd.db),
 * refusing, with nothing changed, while anyone holds the store
 * (kiln_store_hold: a kilnd) and when `file` is not a whole kiln store
 * (PRAGMA integrity_check; the jobs and nodes tables) of a schema version
 * this kiln knows (an older one is fine: kilnd upgrades it at open). The
 * copy is staged as PATH.restore (kiln__store_copy: synced, checked, 0600,
 * given the owner of the store it replaces, else of the data dir); then
 * PATH's -wal, -shm and -journal files and PATH itself move to a new
 * DIR/before-restore-YYYYmmddTHHMMSSZ/ (never deleted: undoing is a restore
 * of its kilnd.db), and the staged copy is renamed to PATH. `file` is only
 * read. On a failure before the rename, what was moved is moved back.
 * src/store/restore.c */
kiln_err kiln_store_restore(const char *file, const char *path, kiln_store_restore_info *info,
                            kiln_diag *d);

/* Inserts `job` (input fields; output fields are ignored) as QUEUED with
 * createTime = now. KILN_EEXIST when (project, jobId) exists. When `out` is
 * non-NULL it receives the stored record. */
kiln_err kiln_store_job_create(kiln_store *s, const char *project, const kiln_job *job,
                               int64_t now_ns, kiln_job_record **out);

/* KILN_ENOTFOUND when absent. */
kiln_err kiln_store_job_get(kiln_store *s, const char *project, const char *job_id,
                            kiln_job_record **out);

/* The job's change counter (bumped by every write to it) and state, read on
 * the calling thread's own read-only connection: cheap and lock-free, for
 * caches keyed on (seq, version). KILN_ENOTFOUND when absent. */
kiln_err kiln_store_job_version(kiln_store *s, const char *project, const char *job_id,
                                int64_t *seq, int64_t *version, kiln_job_state *state);

/* Moves a job to `to` if its current state is in `from_mask`; sets startTime
 * on the first move to RUNNING and endTime on a terminal state. `error` (may
 * be NULL) replaces errorMessage when non-NULL. KILN_ECONFLICT when the state
 * was not in the mask (*was, when non-NULL, gets the current state). */
kiln_err kiln_store_job_transition(kiln_store *s, const char *project, const char *job_id,
                                   unsigned from_mask, kiln_job_state to, const char *error,
                                   int64_t now_ns, kiln_job_state *was);

/* Replaces the labels. KILN_ENOTFOUND when absent. `out` as for create. */
kiln_err kiln_store_job_set_labels(kiln_store *s, const char *project, const char *job_id,
                                   const kiln_map *labels, kiln_job_record **out);

/* Removes an ended job (SUCCEEDED, FAILED, CANCELLED) and its labels from
 * the store: KILN_ECONFLICT while it is active (*was, when non-NULL, gets
 * its state), KILN_ENOTFOUND when absent. Its files are the caller's. */
kiln_err kiln_store_job_delete(kiln_store *s, const char *project, const char *job_id,
                               kiln_job_state *was);

/* Supervisor bookkeeping: counters and the runtime JSON (NULL clears it). */
kiln_err kiln_store_job_set_runtime(kiln_store *s, const char *project, const char *job_id,
                                    int restarts, int failures, const char *runtime);

/* A watcher is told of every committed write to a job (create, state
 * change, labels, runtime): its project, id and seq. kilnd's supervisor keeps
 * its queue in memory between passes with it. The call is made on the
 * writer's thread with the store's lock held, so a watcher sees the writes in
 * commit order; it must be quick and must not call the store. One watcher per
 * store; fn NULL removes it. */
typedef void (*kiln_store_watch_fn)(void *arg, const char *project, const char *job_id,
                                    int64_t seq);
void kiln_store_set_watch(kiln_store *s, kiln_store_watch_fn fn, void *arg);

/* 1-based position of a QUEUED job in the queue (priority desc, then submit
 * time); 0 when the job is not QUEUED. Exact, and O(log queue): the store
 * keeps the queue's order in memory beside the table. */
kiln_err kiln_store_job_position(kiln_store *s, const kiln_job_record *r, int64_t *pos);

/* Jobs (all projects) whose state is in `mask`, in queue order: priority
 * desc, then createTime asc. */
kiln_err kiln_store_jobs_by_state(kiln_store *s, unsigned mask, kiln_job_record ***out, size_t *n);

/* A list filter (facts §1): terms joined by AND, each FIELD:VALUE (VALUE may
 * end in '*' for a prefix) or FIELD=VALUE / FIELD!=VALUE; fields jobId,
 * state, labels.KEY. Parse errors go to `d` under field "filter". */
typedef struct kiln_job_filter kiln_job_filter;
kiln_err kiln_job_filter_parse(const char *text, kiln_job_filter **out, kiln_diag *d);
bool kiln_job_filter_match(const kiln_job_filter *f, const kiln_job_record *r);
void kiln_job_filter_free(kiln_job_filter *f);

/* One page of a project's jobs in creation order, starting after seq
 * `after` (0 = from the start), at most `limit` that match `f` (NULL = all).
 * *next is the seq to continue after, 0 when there are no more. The page is
 * read through indexes (a label equality, a state, or the project's seq
 * order) and stops once full, so its cost follows the page, not the store;
 * only terms no index answers (!=, prefixes) read rows that do not match. */
kiln_err kiln_store_job_list(kiln_store *s, const char *project, const kiln_job_filter *f,
                             int64_t after, size_t limit, kiln_job_record ***out, size_t *n,
                             int64_t *next);

/* Page tokens: opaque text for "continue after seq `after`" of a list of
 * `project` under the filter text `filter` (NULL or "" = none), signed with
 * a secret kept in the store. kiln_store_page_after() reads one back;
 * KILN_EINVAL for a token that was edited, or made for another project,
 * another filter or another store. */
#define KILN_STORE_TOKEN_LEN 40
void kiln_store_page_token(kiln_store *s, const char *project, const char *filter, int64_t after,
                           char out[KILN_STORE_TOKEN_LEN]);
kiln_err kiln_store_page_after(kiln_store *s, const char *project, const char *filter,
                               const char *token, int64_t *after);

/* How writes reach the disk:
 *   GROUP (the default) each write is fsynced before it returns; concurrent
 *         writers share one fsync of the WAL;
 *   EACH  each commit does its own fsync inside SQLite, under the store's
 *         lock (what synchronous=FULL gives: the bound group commit beats);
 *   NONE  commits reach the OS only (survive kill -9, not a power cut): for
 *         bulk loads and tests. */
typedef enum kiln_store_sync {
    KILN_STORE_SYNC_GROUP = 0,
    KILN_STORE_SYNC_EACH,
    KILN_STORE_SYNC_NONE,
} kiln_store_sync;
kiln_err kiln_store_set_sync(kiln_store *s, kiln_store_sync mode);
/* fsyncs group commit has made so far (tests, benchmarks). */
uint64_t kiln_store_group_syncs(kiln_store *s);

/* How many jobs (all projects) are in each state: counts[state]. */
#define KILN_STORE_STATES (KILN_STATE_CANCELLED + 1)
kiln_err kiln_store_job_counts(kiln_store *s, int64_t counts[KILN_STORE_STATES]);

/* Time spent in the store's write statements (create, transition, labels,
 * runtime, cordon), lock wait excluded, as a cumulative histogram over
 * KILN_STORE_WRITE_BUCKETS upper bounds in seconds (kiln_store_write_bounds). */
#define KILN_STORE_WRITE_BUCKETS 10
typedef struct kiln_store_write_stats {
    uint64_t count;
    double sum_seconds;
    uint64_t le[KILN_STORE_WRITE_BUCKETS]; /* writes that took <= bound i (cumulative) */
} kiln_store_write_stats;
extern const double kiln_store_write_bounds[KILN_STORE_WRITE_BUCKETS];
void kiln_store_write_stats_get(kiln_store *s, kiln_store_write_stats *out);

/* Node cordons (drain/uncordon), kept across restarts. */
kiln_err kiln_store_node_cordoned(kiln_store *s, const char *node, bool *cordoned);
kiln_err kiln_store_node_set_cordon(kiln_store *s, const char *node, bool cordoned);

/* Documents of other kinds of resource, as JSON text keyed by (kind,
 * project, name): notebook instances ("notebook") and their long-running
 * operations ("nbop") (src/notebooks/notebooks.c). put with json NULL deletes
 * (no error when absent); get gives KILN_ENOTFOUND when absent (*json NULL);
 * list gives a kind's documents of one project (NULL: all) in name order,
 * names and bodies malloc'd, freed with kiln_store_docs_free. */
kiln_err kiln_store_doc_put(kiln_store *s, const char *kind, const char *project, const char *name,
                            const char *json);
kiln_err kiln_store_doc_get(kiln_store *s, const char *kind, const char *project, const char *name,
                            char **json);
typedef struct kiln_store_doc {
    char *project, *name, *json;
} kiln_store_doc;
kiln_err kiln_store_doc_list(kiln_store *s, const char *kind, const char *project,
                             kiln_store_doc **out, size_t *n);
void kiln_store_docs_free(kiln_store_doc *v, size_t n);

void kiln_job_record_free(kiln_job_record *r);
void kiln_job_records_free(kiln_job_record **v, size_t n);

/* RFC 3339 UTC with milliseconds ("2026-11-22T00:12:45.123Z") into buf[32]. */
void kiln_format_time(int64_t ns, char buf[32]);
int64_t kiln_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
