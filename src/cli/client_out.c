/* src/cli/client_out.c - what the service verbs share: common flags, calls
 * with kilnd's error envelope turned into messages, JSON/YAML output. */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_service.h"

int kiln_cli_ctx_init(kiln_cli_ctx *ctx, int *argc, char **argv, const char *prog)
{
    const char *endpoint = getenv("KILN_ENDPOINT");
    const char *token = getenv("KILN_TOKEN");
    const char *ca_file = getenv("KILN_CA_FILE");
    int k = 0;
    bool user = false;

    memset(ctx, 0, sizeof *ctx);
    ctx->project = getenv("KILN_PROJECT");
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (user || strcmp(a, "--") == 0) {
            user = true;
            argv[k++] = argv[i];
            continue;
        }
        const char *names[] = {"--project", "--endpoint", "--format", "--ca-file"};
        const char **slots[] = {&ctx->project, &endpoint, &ctx->format, &ca_file};
        bool taken = false;
        for (int n = 0; n < 4 && !taken; n++) {
            size_t l = strlen(names[n]);
            if (strncmp(a, names[n], l) != 0) continue;
            if (a[l] == '=') {
                *slots[n] = a + l + 1;
                taken = true;
            } else if (a[l] == '\0') {
                if (i + 1 >= *argc) {
                    fprintf(stderr, "%s: %s needs a value\n", prog, names[n]);
                    return 1;
                }
                *slots[n] = argv[++i];
                taken = true;
            }
        }
        if (!taken) argv[k++] = argv[i];
    }
    *argc = k;
    argv[k] = NULL;
    if (!ctx->project || !*ctx->project) ctx->project = "default";
    if (ctx->format && strcmp(ctx->format, "json") != 0 && strcmp(ctx->format, "yaml") != 0 &&
        strcmp(ctx->format, "table") != 0) {
        fprintf(stderr, "%s: --format must be json, yaml or table\n", prog);
        return 1;
    }
    if (kiln_client_new(endpoint, token, &ctx->client) != KILN_OK ||
        (ca_file && *ca_file && kiln_client_set_ca_file(ctx->client, ca_file) != KILN_OK)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    return 0;
}

void kiln_cli_ctx_free(kiln_cli_ctx *ctx)
{
    kiln_client_free(ctx->client);
    ctx->client = NULL;
}

static int exit_for(long status)
{
    if (status == 400 || status == 413) return 2;
    if (status == 404) return 3;
    if (status == 401 || status == 403) return 4;
    return 1;
}

int kiln_cli_call(kiln_cli_ctx *ctx, const char *method, const char *path, const char *body,
                  json_t **out, const char *prog)
{
    char err[512], *resp = NULL;
    long status = 0;
    int rc = 1;

    *out = NULL;
    kiln_err e = kiln_client_do(ctx->client, method, path, body, &status, &resp, err, sizeof err);
    if (e != KILN_OK) {
        fprintf(stderr, "%s: cannot reach kilnd at %s (set KILN_ENDPOINT or --endpoint)\n", prog,
                e == KILN_EIO ? err : kiln_err_str(e));
        goto out;
    }
    json_t *v = json_loads(resp, 0, NULL);
    if (status >= 200 && status < 300) {
        if (!v) {
            fprintf(stderr, "%s: kilnd answered something that is not JSON\n", prog);
            goto out;
        }
        *out = v;
        rc = 0;
        goto out;
    }
    json_t *e_obj = json_object_get(v, "error");
    const char *st = json_string_value(json_object_get(e_obj, "status"));
    const char *msg = json_string_value(json_object_get(e_obj, "message"));
    fprintf(stderr, "%s: ERROR: (%s) %s\n", prog, st ? st : "HTTP", msg ? msg : resp);
    json_t *details = json_object_get(e_obj, "details"), *dt;
    size_t i, j;
    json_array_foreach(details, i, dt)
    {
        json_t *fv = json_object_get(dt, "fieldViolations"), *x;
        json_array_foreach(fv, j, x)
        {
            const char *f = json_string_value(json_object_get(x, "field"));
            const char *ds = json_string_value(json_object_get(x, "description"));
            if (f && *f)
                fprintf(stderr, "  %s: %s\n", f, ds ? ds : "");
            else
                fprintf(stderr, "  %s\n", ds ? ds : "");
        }
    }
    json_decref(v);
    rc = exit_for(status);
out:
    free(resp);
    return rc;
}

/* ---------- YAML (block style) from a JSON value ---------- */

static bool plain_ok(const char *s)
{
    if (!*s) return false;
    static const char *const special[] = {"true", "false", "null", "yes", "no", "on", "off", "~"};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        if (strcasecmp(s, special[i]) == 0) return false;
    if (isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '.' || s[0] == '+') return false;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_-./@", *p)) return false;
    return true;
}

static void y_scalar(FILE *f, json_t *v)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (plain_ok(s)) {
            fputs(s, f);
        } else {
            char *q = json_dumps(v, JSON_ENCODE_ANY); /* a JSON string is a YAML string */
            fputs(q ? q : "\"\"", f);
            free(q);
        }
    } else if (json_is_object(v)) {
        fputs("{}", f);
    } else if (json_is_array(v)) {
        fputs("[]", f);
    } else {
        char *q = json_dumps(v, JSON_ENCODE_ANY);
        fputs(q ? q : "null", f);
        free(q);
    }
}

/* A mapping key: plain when it is a simple word, else a quoted string. */
static void y_key(FILE *f, const char *k)
{
    bool plain = *k && !strchr("-?:,[]{}#&*!|>'\"%@`", *k);
    for (const char *p = k; plain && *p; p++)
        plain = isalnum((unsigned char)*p) || strchr("_-./@", *p);
    if (plain) {
        fprintf(f, "%s:", k);
        return;
    }
    json_t *s = json_string(k);
    char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    fprintf(f, "%s:", q ? q : "\"\"");
    free(q);
    json_decref(s);
}

static bool complex_value(json_t *v)
{
    return (json_is_object(v) && json_object_size(v)) || (json_is_array(v) && json_array_size(v));
}

static void y_emit(FILE *f, json_t *v, int ind, bool first_inline)
{
    bool first = true;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            if (!(first && first_inline)) fprintf(f, "%*s", ind, "");
            first = false;
            y_key(f, k);
            if (complex_value(x)) {
                fputc('\n', f);
                y_emit(f, x, json_is_array(x) ? ind : ind + 2, false);
            } else {
                fputc(' ', f);
                y_scalar(f, x);
                fputc('\n', f);
            }
        }
    } else {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (!(first && first_inline)) fprintf(f, "%*s", ind, "");
            first = false;
            fputs("- ", f);
            if (json_is_object(x) && json_object_size(x)) {
                y_emit(f, x, ind + 2, true);
            } else if (complex_value(x)) {
                fputc('\n', f);
                y_emit(f, x, ind + 2, false);
            } else {
                y_scalar(f, x);
                fputc('\n', f);
            }
        }
    }
}

void kiln_cli_print(FILE *f, json_t *v, const char *format)
{
    if (format && strcmp(format, "json") == 0) {
        char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        if (s) fprintf(f, "%s\n", s);
        free(s);
        return;
    }
    if (complex_value(v)) {
        y_emit(f, v, 0, false);
    } else {
        y_scalar(f, v);
        fputc('\n', f);
    }
}

void kiln_cli_print_one(json_t *v, const char *format, void (*table)(json_t *rows))
{
    if (format && strcmp(format, "table") == 0) {
        json_t *rows = json_pack("[O]", v);
        if (rows) table(rows);
        json_decref(rows);
    } else {
        kiln_cli_print(stdout, v, format ? format : "yaml");
    }
}
