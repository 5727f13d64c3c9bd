/* schema.h - field tables describing the Job resource, and the generic
 * decode / encode / free that walk them.
 *
 * Why tables: the resource has ~80 fields in 12 messages; one descriptor per
 * field keeps names, types and presence in one place, so JSON, YAML, clone,
 * equality and free cannot drift apart. */
#ifndef KILN_SPEC_SCHEMA_H
#define KILN_SPEC_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kiln/diag.h"

typedef enum kiln__kind {
    FK_STR,      /* char* */
    FK_ENUM,     /* char*, value must be in .enums */
    FK_INT64,    /* int64_t; JSON number or decimal string; written as a string */
    FK_INT32,    /* int64_t holding an int32: read as FK_INT64, range-checked; written
                  * as a JSON number, as proto3's JSON mapping (and gcloud) has it */
    FK_BOOL,     /* bool */
    FK_DOUBLE,   /* double */
    FK_DURATION, /* kiln_duration, JSON "3600s" */
    FK_STRV,     /* kiln_strv */
    FK_DOUBLEV,  /* double* + size_t count at .count_off */
    FK_MAP,      /* kiln_map */
    FK_MSG,      /* nested struct, described by .msg */
    FK_MSGV,     /* array of nested structs + size_t count at .count_off */
    FK_STATE,    /* kiln_job_state */
} kiln__kind;

typedef struct kiln__msg kiln__msg;

typedef struct kiln__field {
    const char *name; /* JSON name */
    kiln__kind kind;
    size_t off;
    long has_off; /* offset of a `bool has_x`, or -1 (proto3 implicit presence) */
    const kiln__msg *msg;
    const char *const *enums; /* NULL-terminated */
    size_t count_off;
    /* the proto enum's numbers of .enums, in order: proto3 JSON sends an
     * enum as its name or its number. NULL: a kiln or Kubernetes enum,
     * names only. */
    const int *enum_nums;
} kiln__field;

struct kiln__msg {
    const char *name;
    size_t size;
    const kiln__field *fields;
    size_t nfields;
};

extern const kiln__msg kiln__job_msg;

enum {
    KILN__DEC_YAML = 1, /* scalars arrive as strings: read bools and numbers from text */
};

/* Decodes `obj` into `base` (zeroed struct of type m). Appends violations to d
 * with paths below `path`. Returns false if any violation was added. */
bool kiln__decode(const kiln__msg *m, const json_t *obj, void *base, const char *path, int flags,
                  kiln_diag *d);

enum {
    KILN__ENC_INT64_NUMBERS = 1, /* int64 as JSON numbers (YAML); default: strings (proto3 JSON) */
};
/* New object reference, or NULL on ENOMEM. */
json_t *kiln__encode(const kiln__msg *m, const void *base, int flags);

/* Frees everything `base` owns (not base itself). */
void kiln__free_fields(const kiln__msg *m, void *base);

#endif
