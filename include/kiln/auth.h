/* include/kiln/auth.h - who may call kilnd, as whom a project's replicas
 * run, and what was done (src/auth).
 *
 * Three handles, each owning one thing and none knowing `struct kilnd`:
 *
 *   kiln_auth    the bearer tokens in force (a kiln_tokens table, hashed),
 *                behind the lock that lets a SIGHUP swap them while API
 *                threads match; no table: no auth (kilnd on loopback only).
 *   kiln_users   the Unix users projects' replicas run as ("project P user
 *                U [group G]" lines of the tokens file), and the rules about
 *                root. Read once at start, then only read: no lock.
 *   kiln_audit   the audit log, one JSON line per request that changes
 *                state or is denied (and per act of kilnd itself, such as
 *                a preemption). Thread safe.
 *
 * src/daemon/main.c builds all three from its flags and hands them to the
 * API and the supervisor, which only use them. They are separate because
 * their lifetimes and locking differ: the tokens are swapped on SIGHUP, the
 * users are not (the supervisor reads them without a lock), and the audit
 * log is opened only once the data dir exists.
 *
 * The tokens file: one line per token, `TOKEN PROJECT ROLE` or
 * `sha256:HEX PROJECT ROLE` (HEX: the lowercase hex SHA-256 of the token,
 * as `kiln tokens new` prints it), plus the `project P user U [group G]`
 * lines. Only hashes are kept in memory: a plain line is hashed when read.
 * Matching hashes the presented token and compares it with every line in
 * constant time, so that neither the answer's timing nor a memory dump
 * gives a token away. A file that group or others may read is refused, as
 * ssh refuses such a key. */
#ifndef KILN_AUTH_H
#define KILN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------- tokens ---------- */

/* What a token may do in its project(s). */
typedef enum kiln_auth_role { KILN_AUTH_VIEWER = 1, KILN_AUTH_EDITOR = 2 } kiln_auth_role;

/* The hex digits of a token id: a prefix of its SHA-256, what the audit log
 * and the logs name a token by (never the token). */
#define KILN_TOKEN_ID_LEN 12

/* One tokens file, read: immutable once loaded. */
typedef struct kiln_tokens kiln_tokens;

/* Who a token is: its project copied out (a reload may free the table while
 * a request still runs). */
typedef struct kiln_token_match {
    char project[128]; /* "*" = every project */
    kiln_auth_role role;
    char id[KILN_TOKEN_ID_LEN + 1];
} kiln_token_match;

/* Reads the file (its token lines; the project lines are kiln_users'). Returns
 * NULL after writing the reason to err (a permission problem names the fix).
 * *n_plain gets the number of lines that hold a token in clear. */
kiln_tokens *kiln_tokens_load(const char *path, size_t *n_plain, char *err, size_t errlen);
void kiln_tokens_free(kiln_tokens *t);
size_t kiln_tokens_count(const kiln_tokens *t);
/* Whether token is in the table; m gets who it is. m->id is set either way. */
bool kiln_tokens_match(const kiln_tokens *t, const char *token, kiln_token_match *m);
/* The id of a token (KILN_TOKEN_ID_LEN hex digits of its SHA-256). */
void kiln_tokens_id(const char *token, char id[KILN_TOKEN_ID_LEN + 1]);

/* ---------- the tokens in force ---------- */

typedef struct kiln_auth kiln_auth;

/* With no table yet: every caller is allowed, as an editor of every
 * project. NULL when out of memory. */
kiln_auth *kiln_auth_new(void);
/* Frees the handle and the table in force. */
void kiln_auth_free(kiln_auth *a);
/* Puts t in force (the handle owns it from here); the table it replaces is
 * freed once no match reads it. */
void kiln_auth_swap(kiln_auth *a, kiln_tokens *t);
/* Whether a table is in force (callers must then present a token). */
bool kiln_auth_required(kiln_auth *a);

typedef enum kiln_auth_result {
    KILN_AUTH_OPEN,  /* no table in force: allowed, as an editor of every project */
    KILN_AUTH_MATCH, /* the token is in the table: m says who */
    KILN_AUTH_DENIED /* a table is in force and token (NULL: none presented) is not in it */
} kiln_auth_result;

/* Decides who presents `token` (NULL: none) under the table in force,
 * taking the read side of the swap lock. Thread safe. */
kiln_auth_result kiln_auth_check(kiln_auth *a, const char *token, kiln_token_match *m);

/* ---------- project users ---------- */

/* The Unix user (and group) a project's replicas run as. */
typedef struct kiln_user {
    char *project; /* "*": every project without a line of its own */
    long uid, gid;
    char *user;    /* for messages */
    char *account; /* a "serviceaccount" line's account; NULL: a project's own user */
} kiln_user;

typedef struct kiln_users kiln_users;

/* No users yet. allow_root: kilnd as root may run replicas as root
 * (--allow-root-replicas yes). NULL when out of memory. */
kiln_users *kiln_users_new(bool allow_root);
void kiln_users_free(kiln_users *u);
size_t kiln_users_count(const kiln_users *u);
/* The i-th line read (i < kiln_users_count), owned by u. */
const kiln_user *kiln_users_at(const kiln_users *u, size_t i);
/* Parses a "project P user U [group G]" line, or a "serviceaccount SA
 * project P user U [group G]" line (a job of P with serviceAccount SA runs
 * as U), into u; -1 with a message on stderr when it is malformed or names
 * an unknown user. */
int kiln_users_parse_line(kiln_users *u, const char *path, int lineno, const char *line);
/* Reads every "project " and "serviceaccount " line of the tokens file at
 * path into u. Returns 0, or -1 after printing why. */
int kiln_users_load(kiln_users *u, const char *path);
/* The user a project's replicas run as: uid and gid -1 for kilnd's own.
 * KILN_EINVAL with a sentence naming what to change when that would be
 * root and the site did not allow it, or a user kilnd cannot switch to.
 * The API asks it when a job is created, the supervisor again at
 * placement. */
kiln_err kiln_users_project(const kiln_users *u, const char *project, long *uid, long *gid,
                            char *why, size_t whylen);
/* The user a job's replicas run as: the one a "serviceaccount" line maps
 * its serviceAccount (AI Platform's trainingInput.serviceAccount, Vertex's
 * jobSpec.serviceAccount) to for its project (or "*"), else, with no
 * account (NULL or ""), the project's (kiln_users_project). An account no
 * line maps is KILN_EINVAL with a sentence naming it and the line to add;
 * the root and switching rules are kiln_users_project's. */
kiln_err kiln_users_job(const kiln_users *u, const char *project, const char *account, long *uid,
                        long *gid, char *why, size_t whylen);
/* Names the user kiln_users_project gave (uid, gid; -1: kilnd's own) for
 * a message: "user alice (uid 1000, gid 1000), the project's user in
 * kilnd's tokens file" (securityContext's refusals, kiln/catalog.h). */
void kiln_users_who(long uid, long gid, char *out, size_t len);
/* At start: one line on stderr for each kind of job kilnd will refuse as
 * configured (kiln_users_project's refusals), nothing when there is none. */
void kiln_users_report(const kiln_users *u);
/* At start, kilnd as root: each project user (not root) can enter data_dir,
 * where its replicas' job directories are (data_dir/jobs/P/JOB, given to
 * that user), tried as that user (a child that switches to it: modes,
 * groups and ACLs as the replica will meet them). KILN_EINVAL with a
 * sentence naming the directory, the user and the fix. */
kiln_err kiln_users_check_dirs(const kiln_users *u, const char *data_dir, char *why, size_t whylen);
/* Gives a job's directory, its replicas/ and log files to uid:gid (the
 * monitor's own files stay kilnd's). */
void kiln_users_chown_job(const char *job_dir, long uid, long gid);

/* ---------- the audit log ---------- */

/* The fields follow Kubernetes' audit events (audit.k8s.io/v1 Event), cut
 * to what kilnd knows; docs/service.md "Audit log" lists them. A line never
 * holds a token, only its id (a prefix of its SHA-256). Thread safe: one
 * mutex orders the writes and the rotation; each line is one write(2) on an
 * O_APPEND descriptor, so that a reader never sees half of one. */
typedef struct kiln_audit kiln_audit;

/* One request, as the handler saw it. NULL strings are written as null. */
typedef struct kiln_audit_event {
    const char *token_id; /* the presented token's id; NULL: none presented */
    const char *project;  /* the token's project ("*": all); NULL: no auth */
    const char *verb;     /* the HTTP method */
    const char *resource; /* the path */
    unsigned code;        /* the response's HTTP status (0: none was sent) */
    const char *source;   /* the client's address */
    bool denied;          /* 401, 403, or a 404 that hides another project's */
    /* objectRef (Kubernetes' audit Event): the job it touched, NULL: none */
    const char *object_project, *object_job;
    const char *reason; /* why, for an act of kilnd itself (a preemption); NULL: none */
} kiln_audit_event;

/* Opens (creating, mode 0600) path for appending; past max_bytes the file
 * becomes path.1 (path.1 path.2, ... up to path.KEEP, the oldest dropped).
 * Returns NULL with errno set. */
kiln_audit *kiln_audit_open(const char *path, uint64_t max_bytes, int keep);
/* Appends the event's line; returns 0, or -1 (errno) when it could not. */
int kiln_audit_write(kiln_audit *a, const kiln_audit_event *e);
void kiln_audit_close(kiln_audit *a);

#ifdef __cplusplus
}
#endif

#endif
