/* src/cli/jobs.c - `kiln jobs ...`: gcloud ai-platform jobs against kilnd.
 *
 *   kiln jobs submit training JOB [SUBMIT FLAGS] [--stream-logs] [-- USER_ARGS]
 *   kiln jobs describe JOB
 *   kiln jobs list [--filter F] [--page-size N] [--limit N]
 *   kiln jobs cancel JOB
 *   kiln jobs stream-logs JOB [--task-name master-replica-0] [--polling-interval S]
 *   kiln jobs update JOB --update-labels k=v[,k=v] | --remove-labels k[,k]
 * Everywhere: --project P (KILN_PROJECT), --endpoint URL (KILN_ENDPOINT),
 * --format json|yaml|table; KILN_TOKEN is sent as a bearer token. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_service.h"
#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kiln/submit.h"

static const char usage[] =
    "usage: kiln jobs submit training JOB [--config FILE | --tfjob FILE] [SUBMIT FLAGS]\n"
    "                 [--stream-logs] [-- USER_ARGS...]\n"
    "       kiln jobs describe JOB\n"
    "       kiln jobs list [--filter FILTER] [--page-size N] [--limit N]\n"
    "       kiln jobs cancel JOB\n"
    "       kiln jobs stream-logs JOB [--task-name TASK] [--polling-interval SECONDS]\n"
    "       kiln jobs update JOB [--update-labels K=V,...] [--remove-labels K,...]\n"
    "\n"
    "Common flags: --project P (or KILN_PROJECT; default 'default'), --endpoint URL (or\n"
    "KILN_ENDPOINT; default " KILN_DEFAULT_ENDPOINT "), --format json|yaml|table.\n"
    "KILN_TOKEN is sent as 'Authorization: Bearer TOKEN'. Submit flags are those of\n"
    "`kiln validate` (docs/cli.md). Filters: jobId:census* AND state:FAILED, labels.K=V.\n"
    "\n"
    "Exit status: 0 ok, 1 usage or kilnd unreachable, 2 invalid request, 3 not found,\n"
    "4 denied, 5 the streamed job ended FAILED or CANCELLED.\n";

#define PROG "kiln jobs"

static bool is_terminal(const char *state)
{
    return state && (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
                     strcmp(state, "CANCELLED") == 0);
}

static char *job_path(kiln_cli_ctx *ctx, const char *job, const char *suffix)
{
    char *p = NULL;
    char *pe = kiln_client_escape(ctx->client, ctx->project);
    char *je = kiln_client_escape(ctx->client, job);
    if (pe && je && asprintf(&p, "/v1/projects/%s/jobs/%s%s", pe, je, suffix ? suffix : "") < 0)
        p = NULL;
    free(pe);
    free(je);
    return p;
}

/* Follows the job's log until it has ended and every line is printed. */
static int stream_logs(kiln_cli_ctx *ctx, const char *job, const char *task, double interval)
{
    char *base = job_path(ctx, job, ":logs"), *te = NULL, *path = NULL;
    char offset[32] = "0";
    int rc = 1;

    if (!base) goto out;
    if (task && !(te = kiln_client_escape(ctx->client, task))) goto out;
    for (;;) {
        json_t *v = NULL;
        free(path);
        if (asprintf(&path, "%s?offset=%s%s%s", base, offset, te ? "&taskName=" : "",
                     te ? te : "") < 0) {
            path = NULL;
            goto out;
        }
        rc = kiln_cli_call(ctx, "GET", path, NULL, &v, PROG);
        if (rc != 0) goto out;
        json_t *entries = json_object_get(v, "entries"), *e;
        size_t i;
        json_array_foreach(entries, i, e)
        {
            printf("%s\t%s\t%s\t%s\n", json_string_value(json_object_get(e, "severity")),
                   json_string_value(json_object_get(e, "timestamp")),
                   json_string_value(json_object_get(e, "taskName")),
                   json_string_value(json_object_get(e, "message")));
        }
        fflush(stdout);
        const char *next = json_string_value(json_object_get(v, "nextOffset"));
        const char *state = json_string_value(json_object_get(v, "jobState"));
        bool moved = next && strcmp(next, offset) != 0;
        if (next) snprintf(offset, sizeof offset, "%s", next);
        bool done = is_terminal(state) && !moved;
        rc = (state && strcmp(state, "SUCCEEDED") == 0) ? 0 : 5;
        json_decref(v);
        if (done) break;
        if (!moved) {
            struct timespec ts = {(time_t)interval,
                                  (long)((interval - (double)(time_t)interval) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
out:
    free(base);
    free(te);
    free(path);
    return rc;
}

static int submit(kiln_cli_ctx *ctx, int argc, char **argv)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_catalog *cat = NULL;
    char *body = NULL, *path = NULL, *pe = NULL;
    json_t *resp = NULL;
    int rc = 1;

    if (argc < 1 || strcmp(argv[0], "training") != 0) {
        fprintf(stderr, PROG ": usage: kiln jobs submit training JOB [FLAGS] [-- ARGS]\n");
        return 1;
    }
    kiln_err err = kiln_submit_parse(argc - 1, argv + 1, &a, &d);
    if (err != KILN_OK) {
        kiln_diag_print(&d, stderr);
        rc = a.usage_errors ? 1 : 2;
        goto out;
    }
    if ((err = kiln_submit_build(&a, &job, &d)) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        rc = err == KILN_EINVAL ? 2 : 1;
        goto out;
    }
    if (!job->job_id || !*job->job_id) {
        fprintf(stderr, PROG ": give the job a name: kiln jobs submit training JOB ...\n");
        goto out;
    }
    /* like gcloud's compute/region property: the catalog's default region */
    if (!job->training_input.region || !*job->training_input.region) {
        if (kiln_catalog_default(&cat, &d) == KILN_OK) {
            const char *r = kiln_catalog_default_region(cat);
            kiln_set_str(&job->training_input.region, r ? r : "us-central1");
        }
    }
    /* gcloud's default tier when neither the file nor a flag names one */
    if (!job->training_input.scale_tier || !*job->training_input.scale_tier)
        kiln_set_str(&job->training_input.scale_tier, "BASIC");
    job->has_training_input = true;
    if (!(body = kiln_job_to_json(job, KILN_ENC_COMPACT))) goto out;
    if (!(pe = kiln_client_escape(ctx->client, ctx->project))) goto out;
    if (asprintf(&path, "/v1/projects/%s/jobs", pe) < 0) {
        path = NULL;
        goto out;
    }
    rc = kiln_cli_call(ctx, "POST", path, body, &resp, PROG);
    if (rc != 0) goto out;
    fprintf(stderr, "Job [%s] submitted successfully.\n", job->job_id);
    if (ctx->format && strcmp(ctx->format, "json") == 0) {
        kiln_cli_print(stdout, resp, "json");
    } else {
        printf("jobId: %s\nstate: %s\n", job->job_id,
               json_string_value(json_object_get(resp, "state")));
    }
    fflush(stdout);
    if (a.stream_logs) rc = stream_logs(ctx, job->job_id, NULL, 0.5);
out:
    json_decref(resp);
    free(body);
    free(path);
    free(pe);
    kiln_catalog_free(cat);
    kiln_job_free(job);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
    return rc;
}

static int describe(kiln_cli_ctx *ctx, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, PROG ": usage: kiln jobs describe JOB\n");
        return 1;
    }
    char *path = job_path(ctx, argv[0], NULL);
    json_t *v = NULL;
    int rc = path ? kiln_cli_call(ctx, "GET", path, NULL, &v, PROG) : 1;
    if (rc == 0) kiln_cli_print(stdout, v, ctx->format ? ctx->format : "yaml");
    json_decref(v);
    free(path);
    return rc;
}

static void table_row(json_t *j)
{
    const char *id = json_string_value(json_object_get(j, "jobId"));
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *ct = json_string_value(json_object_get(j, "createTime"));
    printf("%-32s %-11s %s\n", id ? id : "", st ? st : "", ct ? ct : "");
}

static int list(kiln_cli_ctx *ctx, int argc, char **argv)
{
    const char *filter = NULL;
    long page = 100, limit = -1, shown = 0;
    char *fe = NULL, *pe = NULL, *path = NULL, token[64] = "";
    json_t *all = json_array();
    int rc = 1;

    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--filter") == 0 && v)
            filter = v, i++;
        else if (strncmp(argv[i], "--filter=", 9) == 0)
            filter = argv[i] + 9;
        else if (strcmp(argv[i], "--page-size") == 0 && v)
            page = atol(v), i++;
        else if (strcmp(argv[i], "--limit") == 0 && v)
            limit = atol(v), i++;
        else {
            fprintf(stderr, PROG ": list: unexpected '%s'\n", argv[i]);
            goto out;
        }
    }
    if (page < 1 || page > 100) page = 100;
    if (!all || !(pe = kiln_client_escape(ctx->client, ctx->project))) goto out;
    if (filter && !(fe = kiln_client_escape(ctx->client, filter))) goto out;
    bool table = !ctx->format || strcmp(ctx->format, "table") == 0;
    if (table) printf("%-32s %-11s %s\n", "JOB_ID", "STATUS", "CREATED");
    for (int pages = 0; pages < 100000; pages++) {
        json_t *v = NULL;
        free(path);
        if (asprintf(&path, "/v1/projects/%s/jobs?pageSize=%ld%s%s%s%s", pe, page,
                     fe ? "&filter=" : "", fe ? fe : "", token[0] ? "&pageToken=" : "",
                     token) < 0) {
            path = NULL;
            goto out;
        }
        rc = kiln_cli_call(ctx, "GET", path, NULL, &v, PROG);
        if (rc != 0) goto out;
        json_t *jobs = json_object_get(v, "jobs"), *j;
        size_t i;
        json_array_foreach(jobs, i, j)
        {
            if (limit >= 0 && shown >= limit) break;
            shown++;
            if (table)
                table_row(j);
            else
                json_array_append(all, j);
        }
        const char *nt = json_string_value(json_object_get(v, "nextPageToken"));
        snprintf(token, sizeof token, "%s", nt ? nt : "");
        json_decref(v);
        if (!token[0] || (limit >= 0 && shown >= limit)) break;
    }
    if (!table) kiln_cli_print(stdout, all, ctx->format);
    rc = 0;
out:
    json_decref(all);
    free(fe);
    free(pe);
    free(path);
    return rc;
}

static int cancel(kiln_cli_ctx *ctx, int argc, char **argv)
{
    if (argc != 1) {
        fprintf(stderr, PROG ": usage: kiln jobs cancel JOB\n");
        return 1;
    }
    char *path = job_path(ctx, argv[0], ":cancel");
    json_t *v = NULL;
    int rc = path ? kiln_cli_call(ctx, "POST", path, "{}", &v, PROG) : 1;
    if (rc == 0) printf("Cancelled job [%s].\n", argv[0]);
    json_decref(v);
    free(path);
    return rc;
}

static int stream(kiln_cli_ctx *ctx, int argc, char **argv)
{
    const char *job = NULL, *task = NULL;
    double interval = 0.5;
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--task-name") == 0 && v)
            task = v, i++;
        else if (strncmp(argv[i], "--task-name=", 12) == 0)
            task = argv[i] + 12;
        else if (strcmp(argv[i], "--polling-interval") == 0 && v)
            interval = atof(v), i++;
        else if (argv[i][0] != '-' && !job)
            job = argv[i];
        else {
            fprintf(stderr, PROG ": stream-logs: unexpected '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!job) {
        fprintf(stderr, PROG ": usage: kiln jobs stream-logs JOB [--task-name TASK]\n");
        return 1;
    }
    if (interval < 0.05 || interval > 60) interval = 0.5;
    return stream_logs(ctx, job, task, interval);
}

/* Reads the job, changes its labels, and writes them back with its etag:
 * a concurrent change makes kilnd refuse rather than lose an update. */
static int update(kiln_cli_ctx *ctx, int argc, char **argv)
{
    const char *job = NULL, *upd = NULL, *rem = NULL;
    json_t *cur = NULL, *resp = NULL, *body = NULL;
    char *path = NULL, *ppath = NULL, *text = NULL;
    int rc = 1;

    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--update-labels") == 0 && v)
            upd = v, i++;
        else if (strcmp(argv[i], "--remove-labels") == 0 && v)
            rem = v, i++;
        else if (argv[i][0] != '-' && !job)
            job = argv[i];
        else {
            fprintf(stderr, PROG ": update: unexpected '%s'\n", argv[i]);
            return 1;
        }
    }
    if (!job || (!upd && !rem)) {
        fprintf(stderr, PROG ": usage: kiln jobs update JOB --update-labels K=V,... | "
                             "--remove-labels K,...\n");
        return 1;
    }
    if (!(path = job_path(ctx, job, NULL))) goto out;
    if ((rc = kiln_cli_call(ctx, "GET", path, NULL, &cur, PROG)) != 0) goto out;
    rc = 1;
    json_t *labels = json_deep_copy(json_object_get(cur, "labels"));
    if (!labels) labels = json_object();
    char *list = upd ? strdup(upd) : NULL, *save = NULL;
    for (char *kv = list ? strtok_r(list, ",", &save) : NULL; kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            fprintf(stderr, PROG ": --update-labels wants KEY=VALUE, got '%s'\n", kv);
            free(list);
            json_decref(labels);
            goto out;
        }
        *eq = '\0';
        json_object_set_new(labels, kv, json_string(eq + 1));
    }
    free(list);
    list = rem ? strdup(rem) : NULL;
    for (char *k = list ? strtok_r(list, ",", &save) : NULL; k; k = strtok_r(NULL, ",", &save))
        json_object_del(labels, k);
    free(list);
    body = json_pack("{s:o,s:O}", "labels", labels, "etag", json_object_get(cur, "etag"));
    if (!body || !(text = json_dumps(body, JSON_COMPACT))) goto out;
    if (asprintf(&ppath, "%s?updateMask=labels", path) < 0) {
        ppath = NULL;
        goto out;
    }
    rc = kiln_cli_call(ctx, "PATCH", ppath, text, &resp, PROG);
    if (rc == 0) kiln_cli_print(stdout, resp, ctx->format ? ctx->format : "yaml");
out:
    json_decref(cur);
    json_decref(resp);
    json_decref(body);
    free(path);
    free(ppath);
    free(text);
    return rc;
}

int kiln_cli_jobs(int argc, char **argv)
{
    kiln_cli_ctx ctx;
    int rc = 1;

    argc--, argv++; /* past "jobs" */
    if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0 ||
        strcmp(argv[0], "help") == 0) {
        fputs(usage, argc < 1 ? stderr : stdout);
        return argc < 1 ? 1 : 0;
    }
    const char *sub = argv[0];
    argc--, argv++;
    if (kiln_cli_ctx_init(&ctx, &argc, argv, PROG) != 0) goto out;
    if (strcmp(sub, "submit") == 0)
        rc = submit(&ctx, argc, argv);
    else if (strcmp(sub, "describe") == 0)
        rc = describe(&ctx, argc, argv);
    else if (strcmp(sub, "list") == 0)
        rc = list(&ctx, argc, argv);
    else if (strcmp(sub, "cancel") == 0)
        rc = cancel(&ctx, argc, argv);
    else if (strcmp(sub, "stream-logs") == 0)
        rc = stream(&ctx, argc, argv);
    else if (strcmp(sub, "update") == 0)
        rc = update(&ctx, argc, argv);
    else {
        fprintf(stderr, PROG ": unknown command '%s'\n%s", sub, usage);
        rc = 1;
    }
out:
    kiln_cli_ctx_free(&ctx);
    return rc;
}
