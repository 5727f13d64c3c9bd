/* diag.c - violation lists and Google's error envelope. */
#include "kiln/diag.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

const char *kiln_err_str(kiln_err e)
{
    switch (e) {
    case KILN_OK:
        return "ok";
    case KILN_EINVAL:
        return "invalid input";
    case KILN_ENOMEM:
        return "out of memory";
    case KILN_EIO:
        return "input/output error";
    case KILN_ENOTFOUND:
        return "not found";
    case KILN_ELIMIT:
        return "input exceeds a limit";
    case KILN_EINTERNAL:
        return "internal error";
    case KILN_EEXIST:
        return "already exists";
    case KILN_ECONFLICT:
        return "conflicts with the current state";
    }
    return "unknown error";
}

void kiln_diag_add(kiln_diag *d, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(d, field, fmt, ap);
    va_end(ap);
}

void kiln_diag_addv(kiln_diag *d, const char *field, const char *fmt, va_list ap)
{
    char *desc = NULL, *fld = NULL;

    if (!d) return;
    if (d->n >= KILN_DIAG_MAX) goto drop;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        kiln_violation *nv = realloc(d->v, cap * sizeof(*nv));
        if (!nv) goto drop;
        d->v = nv;
        d->cap = cap;
    }
    int rc = vasprintf(&desc, fmt, ap);
    if (rc < 0) goto drop;
    fld = strdup(field ? field : "");
    if (!fld) {
        free(desc);
        goto drop;
    }
    /* descriptions quote user text, often cut to a length: keep them valid
     * UTF-8 so that the JSON error envelope can always be written */
    kiln__utf8_scrub(desc);
    kiln__utf8_scrub(fld);
    d->v[d->n].field = fld;
    d->v[d->n].description = desc;
    d->n++;
    return;
drop:
    d->dropped++;
}

int kiln_diag_has(const kiln_diag *d, const char *field)
{
    for (size_t i = 0; d && i < d->n; i++)
        if (strcmp(d->v[i].field, field) == 0) return 1;
    return 0;
}

void kiln_diag_print(const kiln_diag *d, FILE *f)
{
    for (size_t i = 0; i < d->n; i++) {
        if (d->v[i].field[0])
            fprintf(f, "%s: %s\n", d->v[i].field, d->v[i].description);
        else
            fprintf(f, "%s\n", d->v[i].description);
    }
    if (d->dropped) fprintf(f, "(%zu more violations not shown)\n", d->dropped);
}

void kiln_diag_clear(kiln_diag *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].field);
        free(d->v[i].description);
    }
    d->n = 0;
    d->dropped = 0;
}

void kiln_diag_free(kiln_diag *d)
{
    if (!d) return;
    kiln_diag_clear(d);
    free(d->v);
    d->v = NULL;
    d->cap = 0;
}

char *kiln_diag_to_envelope(const kiln_diag *d, int http_code, const char *status,
                            const char *message)
{
    char *out = NULL;
    json_t *viol = json_array();
    json_t *root = NULL;

    if (!viol) goto out;
    for (size_t i = 0; d && i < d->n; i++) {
        json_t *fv =
            json_pack("{s:s,s:s}", "field", d->v[i].field, "description", d->v[i].description);
        if (!fv || json_array_append_new(viol, fv) < 0) goto out;
    }
    json_t *details = json_array();
    if (!details) goto out;
    if (json_array_size(viol) > 0) {
        json_t *br = json_pack("{s:s,s:O}", "@type", "type.googleapis.com/google.rpc.BadRequest",
                               "fieldViolations", viol);
        if (!br || json_array_append_new(details, br) < 0) {
            json_decref(details);
            goto out;
        }
    }
    root = json_pack("{s:{s:i,s:s,s:s,s:o}}", "error", "code", http_code, "status", status,
                     "message", message ? message : "", "details", details);
    if (!root) goto out;
    out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
out:
    json_decref(viol);
    json_decref(root);
    return out;
}
