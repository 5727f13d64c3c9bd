/* kiln/diag.h - result codes and violation lists.
 *
 * Every kiln function that can fail returns a kiln_err. Functions that check
 * user input (parsers, the validator) also append human-readable violations to
 * a kiln_diag, each tied to a field path such as
 * "trainingInput.workerConfig.acceleratorConfig.count", so that a user sees
 * every problem at once rather than one per attempt. The same list maps onto
 * Google's error envelope (INVALID_ARGUMENT + BadRequest.fieldViolations). */
#ifndef KILN_DIAG_H
#define KILN_DIAG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_err {
    KILN_OK = 0,
    KILN_EINVAL,    /* input broke a rule; details in the kiln_diag */
    KILN_ENOMEM,    /* allocation failed */
    KILN_EIO,       /* a file could not be read or written */
    KILN_ENOTFOUND, /* a named thing does not exist */
    KILN_ELIMIT,    /* input exceeded a size, depth or count cap */
    KILN_EINTERNAL, /* a bug: an invariant did not hold */
    KILN_EEXIST,    /* the thing to create already exists */
    KILN_ECONFLICT, /* the thing is not in a state that allows the change */
} kiln_err;

const char *kiln_err_str(kiln_err e);

typedef struct kiln_violation {
    char *field;       /* dotted path, e.g. "trainingInput.workerCount"; "" = whole input */
    char *description; /* one sentence: the offending value and what is allowed */
} kiln_violation;

/* Caps the list so hostile input cannot grow it without bound. */
#define KILN_DIAG_MAX 256

typedef struct kiln_diag {
    kiln_violation *v;
    size_t n, cap;
    size_t dropped; /* violations past KILN_DIAG_MAX, counted but not kept */
} kiln_diag;

#define KILN_DIAG_INIT                                                                             \
    {                                                                                              \
        0                                                                                          \
    }

/* Appends a violation. `field` may be NULL (treated as ""). Formatting follows
 * printf. Allocation failure is swallowed (counted in `dropped`): reporting an
 * error must never itself fail. */
void kiln_diag_add(kiln_diag *d, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same with a va_list, for wrappers that add context of their own. */
void kiln_diag_addv(kiln_diag *d, const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
/* Is there a violation whose field equals `field` (exact match)? For tests and callers. */
int kiln_diag_has(const kiln_diag *d, const char *field);
/* Prints "FIELD: DESCRIPTION" lines, one per violation. */
void kiln_diag_print(const kiln_diag *d, FILE *f);
void kiln_diag_clear(kiln_diag *d);
void kiln_diag_free(kiln_diag *d);

/* Google error envelope as a JSON string (caller frees):
 * {"error":{"code":400,"status":"INVALID_ARGUMENT","message":...,"details":[
 *   {"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[...]}]}} */
char *kiln_diag_to_envelope(const kiln_diag *d, int http_code, const char *status,
                            const char *message);

#ifdef __cplusplus
}
#endif
#endif
