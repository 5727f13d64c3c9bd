/* src/cli/cli_jobs.c - `kiln jobs ...`: gcloud ai-platform jobs against kilnd.
 *
 *   kiln jobs submit training JOB [SUBMIT FLAGS] [--stream-logs] [-- USER_ARGS]
 *   kiln jobs describe JOB
 *   kiln jobs list [--filter F] [--page-size N] [--limit N]
 *   kiln jobs cancel JOB
 *   kiln jobs stream-logs JOB [--task-name master-replica-0] [--trial N] [--polling-interval S]
 *   kiln jobs update JOB --update-labels k=v[,k=v] | --remove-labels k[,k]
 * Everywhere: --project P (KILN_PROJECT), --endpoint URL (KILN_ENDPOINT),
 * --format json|yaml|table; KILN_TOKEN is sent as a bearer token. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_service.h"
#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kiln/submit.h"

/* What every sub-command's usage ends with. */
#define COMMON_FLAGS                                                                               \
    "\n"                                                                                           \
    "Common flags: --project P (or KILN_PROJECT; default 'default'), --endpoint URL (or\n"         \
    "KILN_ENDPOINT; default " KILN_DEFAULT_ENDPOINT "), --format json|yaml|table.\n"               \
    "KILN_TOKEN is sent as 'Authorization: Bearer TOKEN'. An https endpoint is\n"                  \
    "verified against --ca-file FILE (or KILN_CA_FILE), else the system's CA store.\n"             \
    "\n"                                                                                           \
    "Exit status: 0 ok, 1 usage or kilnd unreachable, 2 invalid request, 3 not found,\n"           \
    "4 denied, 5 the streamed job ended FAILED or CANCELLED.\n"

static const char usage[] =
    "usage: kiln jobs submit training JOB [--config FILE | --kubeflow-job FILE] [SUBMIT FLAGS]\n"
    "                 [--stream-logs] [-- USER_ARGS...]\n"
    "       kiln jobs describe JOB\n"
    "       kiln jobs list [--filter FILTER] [--page-size N] [--limit N]\n"
    "       kiln jobs cancel JOB\n"
    "       kiln jobs stream-logs JOB [--task-name TASK] [--trial N] [--polling-interval "
    "SECONDS]\n"
    "       kiln jobs update JOB [--update-labels K=V,...] [--remove-labels K,...]\n"
    "\n"
    "`kiln jobs COMMAND --help` describes one. Submit flags are those of\n"
    "`kiln validate` (docs/cli.md). Filters: jobId:census* AND state:FAILED, "
    "labels.K=V.\n" COMMON_FLAGS;

static const char submit_usage[] =
    "usage: kiln jobs submit training JOB [--config FILE | --kubeflow-job FILE] [SUBMIT FLAGS]\n"
    "                 [--stream-logs] [-- USER_ARGS...]\n"
    "\n"
    "Submits a training job to kilnd. The file and the flags are read as `kiln validate`\n"
    "reads them (its --help lists the submit flags; docs/cli.md has each), every flag\n"
    "laid over the file; everything after a bare `--` goes to the program untouched.\n"
    "--stream-logs then follows the job's logs until it ends.\n" COMMON_FLAGS;
static const char describe_usage[] =
    "usage: kiln jobs describe JOB\n"
    "\n"
    "Prints the job as kilnd has it (YAML unless --format); a tuning job's trials\n"
    "follow as a table, best first.\n" COMMON_FLAGS;
static const char list_usage[] =
    "usage: kiln jobs list [--filter FILTER] [--page-size N] [--limit N]\n"
    "\n"
    "Lists the project's jobs, a table unless --format json|yaml. Filters:\n"
    "jobId:census* AND state:FAILED, labels.K=V. --page-size is per request (1-100),\n"
    "--limit the most jobs shown.\n" COMMON_FLAGS;
static const char cancel_usage[] =
    "usage: kiln jobs cancel JOB\n"
    "\n"
    "Cancels a queued or running job: its replicas get SIGTERM and, after kilnd's\n"
    "grace period, SIGKILL.\n" COMMON_FLAGS;
static const char stream_usage[] =
    "usage: kiln jobs stream-logs JOB [--task-name TASK] [--trial N] [--polling-interval "
    "SECONDS]\n"
    "\n"
    "Prints the job's log lines (severity, timestamp, task name, message) until the\n"
    "job has ended: one task's with --task-name (master-replica-0), a tuning job's\n"
    "trial N's with --trial N.\n" COMMON_FLAGS;
static const char update_usage[] =
    "usage: kiln jobs update JOB [--update-labels K=V,...] [--remove-labels K,...]\n"
    "\n"
    "Changes the job's labels, the one thing a job lets change.\n" COMMON_FLAGS;

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

/* Follows the job's log until it has ended and every line is printed. A
 * tuning job's trial N (trial > 0) is its replicas' lines, whose task names
 * are trial-N-ROLE-replica-I: with a task name kilnd picks that one task,
 * without one the lines are picked here by the prefix. */
static int stream_logs(kiln_cli_ctx *ctx, const char *job, const char *task, long trial,
                       double interval)
{
    char *base = job_path(ctx, job, ":logs"), *te = NULL, *path = NULL;
    char offset[32] = "0", prefix[40] = "", trial_task[200];
    int rc = 1;

    if (!base) goto out;
    if (trial > 0 && task) {
        snprintf(trial_task, sizeof trial_task, "trial-%ld-%s", trial, task);
        task = trial_task;
    } else if (trial > 0) {
        snprintf(prefix, sizeof prefix, "trial-%ld-", trial);
    }
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
            const char *tn = json_string_value(json_object_get(e, "taskName"));
            if (prefix[0] && (!tn || strncmp(tn, prefix, strlen(prefix)) != 0)) continue;
            printf("%s\t%s\t%s\t%s\n", json_string_value(json_object_get(e, "severity")),
                   json_string_value(json_object_get(e, "timestamp")), tn,
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
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
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
    if ((err = kiln_submit_build_notes(&a, &job, &d, &notes)) != KILN_OK) {
        kiln_diag_print(&d, stderr);
        rc = err == KILN_EINVAL ? 2 : 1;
        goto out;
    }
    /* what a Kubeflow file holds that kiln accepts and does not use: kilnd
     * never sees the file, so this is where it is said (kiln validate too) */
    for (size_t i = 0; i < notes.n; i++)
        fprintf(stderr, "note: %s: %s\n", notes.v[i].field, notes.v[i].description);
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
    if (a.stream_logs) rc = stream_logs(ctx, job->job_id, NULL, 0, 0.5);
out:
    json_decref(resp);
    free(body);
    free(path);
    free(pe);
    kiln_catalog_free(cat);
    kiln_job_free(job);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
    return rc;
}

static void table_row(json_t *j)
{
    const char *id = json_string_value(json_object_get(j, "jobId"));
    const char *st = json_string_value(json_object_get(j, "state"));
    const char *ct = json_string_value(json_object_get(j, "createTime"));
    printf("%-32s %-11s %s\n", id ? id : "", st ? st : "", ct ? ct : "");
}

/* A tuning job's trials, best first as trainingOutput has them. */
static void trials_table(json_t *job)
{
    json_t *trials = json_object_get(json_object_get(job, "trainingOutput"), "trials"), *t;
    size_t i, hw = strlen("HYPERPARAMETERS");
    char **hps = calloc(json_array_size(trials) + 1, sizeof *hps);
    if (!json_array_size(trials) || !hps) {
        free(hps);
        return;
    }
    json_array_foreach(trials, i, t)
    {
        json_t *v;
        const char *k;
        size_t len = 0, cap = 256;
        char *buf = malloc(cap);
        if (!buf) break;
        buf[0] = '\0';
        json_object_foreach(json_object_get(t, "hyperparameters"), k, v)
        {
            const char *val = json_string_value(v);
            size_t need = strlen(k) + (val ? strlen(val) : 0) + 3;
            if (len + need >= cap) {
                char *nb = realloc(buf, cap = 2 * (len + need));
                if (!nb) break;
                buf = nb;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%s%s=%s", len ? " " : "", k,
                                    val ? val : "");
        }
        hps[i] = buf;
        if (len > hw) hw = len;
    }
    printf("\n%-6s %-10s %-14s %-10s %-*s %s\n", "TRIAL", "STATE", "OBJECTIVE", "STEP", (int)hw,
           "HYPERPARAMETERS", "EARLY_STOPPED");
    json_array_foreach(trials, i, t)
    {
        json_t *fm = json_object_get(t, "finalMetric");
        const char *id = json_string_value(json_object_get(t, "trialId"));
        const char *st = json_string_value(json_object_get(t, "state"));
        const char *step = json_string_value(json_object_get(fm, "trainingStep"));
        char obj[32] = "-";
        if (json_is_number(json_object_get(fm, "objectiveValue")))
            snprintf(obj, sizeof obj, "%.6g",
                     json_number_value(json_object_get(fm, "objectiveValue")));
        printf("%-6s %-10s %-14s %-10s %-*s %s\n", id ? id : "", st ? st : "", obj,
               step ? step : "-", (int)hw, hps[i] ? hps[i] : "",
               json_is_true(json_object_get(t, "isTrialStoppedEarly")) ? "yes" : "no");
    }
    for (i = 0; i < json_array_size(trials); i++)
        free(hps[i]);
    free(hps);
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
    /* a tuning job's trials follow as a table, best first, unless a format
     * for programs (json, yaml) was asked for */
    if (rc == 0 && ctx->format && strcmp(ctx->format, "table") == 0) {
        printf("%-32s %-11s %s\n", "JOB_ID", "STATUS", "CREATED");
        table_row(v);
        trials_table(v);
    } else if (rc == 0) {
        kiln_cli_print(stdout, v, ctx->format ? ctx->format : "yaml");
        if (!ctx->format) trials_table(v);
    }
    json_decref(v);
    free(path);
    return rc;
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
    const char *job = NULL, *task = NULL, *trial = NULL;
    double interval = 0.5;
    for (int i = 0; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--task-name") == 0 && v)
            task = v, i++;
        else if (strcmp(argv[i], "--trial") == 0 && v)
            trial = v, i++;
        else if (strncmp(argv[i], "--trial=", 8) == 0)
            trial = argv[i] + 8;
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
        fprintf(stderr, PROG ": usage: kiln jobs stream-logs JOB [--task-name TASK] [--trial N]\n");
        return 1;
    }
    long tn = 0;
    if (trial) {
        char *end = NULL;
        tn = strtol(trial, &end, 10);
        if (!*trial || *end || tn < 1 || tn > 1000000) {
            fprintf(stderr, PROG ": stream-logs: --trial takes a trial id (1, 2, ...), not '%s'\n",
                    trial);
            return 1;
        }
    }
    if (interval < 0.05 || interval > 60) interval = 0.5;
    return stream_logs(ctx, job, task, tn, interval);
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

/* The sub-commands, each with its own usage (`kiln jobs CMD --help`). */
static const struct jobs_cmd {
    const char *name;
    int (*run)(kiln_cli_ctx *ctx, int argc, char **argv);
    const char *usage;
} jobs_cmds[] = {
    {"submit", submit, submit_usage},
    {"describe", describe, describe_usage},
    {"list", list, list_usage},
    {"cancel", cancel, cancel_usage},
    {"stream-logs", stream, stream_usage},
    {"update", update, update_usage},
};

int kiln_cli_jobs(int argc, char **argv)
{
    const struct jobs_cmd *cmd = NULL;
    kiln_cli_ctx ctx = {0};
    int rc = 1;

    argc--, argv++; /* past "jobs" */
    if (argc < 1) {
        fputs(usage, stderr);
        return 1;
    }
    for (size_t i = 0; i < sizeof jobs_cmds / sizeof *jobs_cmds && !cmd; i++)
        if (strcmp(argv[0], jobs_cmds[i].name) == 0) cmd = &jobs_cmds[i];
    if (!cmd) {
        bool help = kiln_cli_wants_help(1, argv) || strcmp(argv[0], "help") == 0;
        if (!help) fprintf(stderr, PROG ": unknown command '%s'\n", argv[0]);
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 1;
    }
    argc--, argv++;
    /* before the common flags and the client: help needs neither kilnd nor
     * a valid command line */
    if (kiln_cli_wants_help(argc, argv)) {
        fputs(cmd->usage, stdout);
        return 0;
    }
    if (kiln_cli_ctx_init(&ctx, &argc, argv, PROG) == 0) rc = cmd->run(&ctx, argc, argv);
    kiln_cli_ctx_free(&ctx);
    return rc;
}

/* ---------- kiln local train ---------- */

static const char local_usage[] =
    "usage: kiln local train [--distributed [--worker-count N] [--parameter-server-count N]]\n"
    "                        [--module-name M] [--package-path DIR] [--job-dir DIR]\n"
    "                        [SUBMIT FLAGS] [-- USER_ARGS...]\n"
    "\n"
    "Runs one job on this machine without a running kilnd: a private kilnd (loopback,\n"
    "a temporary data dir) runs it, its logs stream to stdout, and everything but the\n"
    "job dir is removed at the end. --distributed runs a master, 2 workers and 2\n"
    "parameter servers (counts adjustable) that find each other through TF_CONFIG and\n"
    "MASTER_ADDR/RANK/WORLD_SIZE, as they would under kilnd.\n"
    "Exit status: 0 the job SUCCEEDED, 5 it FAILED, 1 it could not be run.\n";

/* kilnd next to this program, else from PATH. */
static void find_kilnd(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, len, "%s/kilnd", self);
            if (access(buf, X_OK) == 0) return;
        }
    }
    snprintf(buf, len, "kilnd");
}

/* Starts a private kilnd on a free loopback port; *endpoint gets its URL. */
static pid_t start_private_kilnd(const char *dir, char *endpoint, size_t len)
{
    char kilnd[PATH_MAX + 16], addr_path[PATH_MAX + 32], log_path[PATH_MAX + 32];
    find_kilnd(kilnd, sizeof kilnd);
    snprintf(addr_path, sizeof addr_path, "%s/kilnd.addr", dir);
    snprintf(log_path, sizeof log_path, "%s/kilnd.log", dir);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) dup2(fd, 2);
        /* the private kilnd runs the person's own program as that person:
         * as root too, when that is who asked (docs/service.md) */
        execlp(kilnd, kilnd, "--listen", "127.0.0.1:0", "--data-dir", dir, "--grace-period", "5",
               "--allow-root-replicas", geteuid() == 0 ? "yes" : "no", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) { /* at most 20 s */
        FILE *f = fopen(addr_path, "r");
        char addr[128] = "";
        if (f) {
            if (fgets(addr, sizeof addr, f)) addr[strcspn(addr, "\n")] = '\0';
            fclose(f);
        }
        if (addr[0]) {
            snprintf(endpoint, len, "http://%s", addr);
            return pid;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) break;
        usleep(50000);
    }
    fprintf(stderr, "kiln local: kilnd (%s) did not start; see %s\n", kilnd, log_path);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void remove_tree(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

int kiln_cli_local(int argc, char **argv)
{
    char dir[PATH_MAX] = "", endpoint[160], id[64];
    char wc[24] = "2", pc[24] = "2";
    char **sub = NULL;
    kiln_cli_ctx ctx = {0};
    bool distributed = false, have_wc = false, have_pc = false, have_tier = false;
    pid_t kpid = -1;
    int rc = 1, n = 0;

    argc--, argv++; /* past "local" */
    if (argc < 1 || strcmp(argv[0], "train") != 0) {
        bool help = argc >= 1 && (kiln_cli_wants_help(1, argv) || strcmp(argv[0], "help") == 0);
        if (argc >= 1 && !help) fprintf(stderr, "kiln local: unknown command '%s'\n", argv[0]);
        fputs(local_usage, help ? stdout : stderr);
        return help ? 0 : 1;
    }
    argc--, argv++;
    if (kiln_cli_wants_help(argc, argv)) {
        fputs(local_usage, stdout);
        return 0;
    }
    /* training JOB [--distributed expansion] flags... --stream-logs */
    sub = calloc((size_t)argc + 24, sizeof *sub);
    if (!sub) return 1;
    snprintf(id, sizeof id, "local_%d", (int)getpid());
    sub[n++] = "training";
    sub[n++] = id;
    int user = argc;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            user = i;
            break;
        }
        if (strcmp(a, "--distributed") == 0) {
            distributed = true;
        } else if (strcmp(a, "--worker-count") == 0 && i + 1 < argc) {
            snprintf(wc, sizeof wc, "%s", argv[++i]);
            have_wc = true;
        } else if (strcmp(a, "--parameter-server-count") == 0 && i + 1 < argc) {
            snprintf(pc, sizeof pc, "%s", argv[++i]);
            have_pc = true;
        } else {
            have_tier |= strncmp(a, "--scale-tier", 12) == 0 || strncmp(a, "--config", 8) == 0;
            sub[n++] = argv[i];
        }
    }
    if ((have_wc || have_pc) && !distributed) {
        fprintf(stderr, "kiln local train: --worker-count and --parameter-server-count go with "
                        "--distributed\n");
        goto out;
    }
    if (distributed && !have_tier) {
        static char *fixed[] = {"--scale-tier",
                                "custom",
                                "--master-machine-type",
                                "n1-standard-4",
                                "--worker-machine-type",
                                "n1-standard-4",
                                "--parameter-server-machine-type",
                                "n1-standard-4"};
        for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
            sub[n++] = fixed[k];
        sub[n++] = "--worker-count";
        sub[n++] = wc;
        if (strcmp(pc, "0") != 0) {
            sub[n++] = "--parameter-server-count";
            sub[n++] = pc;
        }
    }
    sub[n++] = "--stream-logs";
    for (int i = user; i < argc; i++)
        sub[n++] = argv[i];
    sub[n] = NULL;

    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/kiln-local.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        perror("kiln local train: mkdtemp");
        goto out;
    }
    kpid = start_private_kilnd(dir, endpoint, sizeof endpoint);
    if (kpid < 0) goto out;
    if (kiln_client_new(endpoint, NULL, &ctx.client) != KILN_OK) goto out;
    ctx.project = "local";
    rc = submit(&ctx, n, sub);
out:
    kiln_cli_ctx_free(&ctx);
    if (kpid > 0) {
        kill(kpid, SIGTERM);
        waitpid(kpid, NULL, 0);
    }
    if (dir[0] && !strstr(dir, "XXXXXX")) remove_tree(dir);
    free(sub);
    return rc;
}
