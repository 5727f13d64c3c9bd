/* src/api/audit.h - kilnd's audit log: one JSON line per request that
 * changes state or is denied, appended to a file rotated by size.
 *
 * The fields follow Kubernetes' audit events (audit.k8s.io/v1 Event), cut
 * to what kilnd knows; docs/service.md "Audit log" lists them. A line never
 * holds a token, only its id (a prefix of its SHA-256). Thread safe: one
 * mutex orders the writes and the rotation; each line is one write(2) on an
 * O_APPEND descriptor, so that a reader never sees half of one. */
#ifndef KILN_AUDIT_H
#define KILN_AUDIT_H

#include <stdbool.h>
#include <stdint.h>

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

#endif
