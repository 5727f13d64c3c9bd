/* src/cli/cli_validate.c - `kiln validate`: read a job the way `kiln submit`
 * would (config file, TFJob/PyTorchJob, flags), check it against the catalog, and print
 * the normalised Job. Nothing is submitted.
 *
 * Exit status (src/cli/cli.h): 0 valid, the Job is on stdout; 1 a file could
 * not be read or the command line could not be understood; 2 the input was
 * read but is invalid (every violation on stderr, then a summary line). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kiln/submit.h"

static const char usage[] =
    "usage: kiln validate [JOB] [--config FILE | --kubeflow-job FILE] [--catalog FILE]\n"
    "                     [--format yaml|json] [SUBMIT FLAGS...] [-- USER_ARGS...]\n"
    "\n"
    "Reads a job as `kiln submit` would - a Job/config.yaml (--config) or a Kubeflow\n"
    "TFJob, PyTorchJob, JAXJob, PaddleJob, XGBoostJob, MPIJob or TrainJob (--kubeflow-job,\n"
    "or --tfjob; a TrainJob's runtime from --runtimes-dir DIR, default data/runtimes),\n"
    "with every flag "
    "laid over the file - checks it against the\n"
    "built-in catalog (plus a site catalog given with --catalog) and prints the\n"
    "normalised Job. JOB sets the jobId (default: the file's).\n"
    "\n"
    "Submit flags: --scale-tier --region --job-dir --module-name --package-path\n"
    "  --packages --runtime-version --python-version --labels\n"
    "  --{master,worker,parameter-server,evaluator}-machine-type\n"
    "  --{master,worker,parameter-server,evaluator}-accelerator count=N,type=T\n"
    "  --{master,worker,parameter-server,evaluator}-image-uri\n"
    "  --{worker,parameter-server,evaluator}-count --stream-logs --async\n"
    "See docs/cli.md for each flag and the field it sets.\n"
    "\n"
    "Exit status: 0 valid (Job on stdout), 1 unreadable input or bad command line,\n"
    "2 invalid job (violations on stderr as FIELD: DESCRIPTION).\n";

/* The violations, then one summary line; `err` explains an empty list
 * (ENOMEM, or a module that failed without saying why). */
static void report(const kiln_diag *d, kiln_err err, const char *what)
{
    kiln_diag_print(d, stderr);
    size_t n = d->n + d->dropped;
    if (n == 0)
        fprintf(stderr, "kiln validate: failed %s: %s\n", what, kiln_err_str(err));
    else
        fprintf(stderr, "kiln validate: %zu problem%s %s\n", n, n == 1 ? "" : "s", what);
}

/* 1 for input that could not be read (or no memory), 2 for input that broke a rule. */
static int status_of(kiln_err err)
{
    return err == KILN_EINVAL ? 2 : 1;
}

static const char *input_name(const kiln_submit_args *a)
{
    if (a->config_path) return a->config_path;
    if (a->tfjob_path) return a->tfjob_path;
    return "the command line";
}

static int print_job(const kiln_job *job, const char *format)
{
    bool json = format && strcmp(format, "json") == 0;
    char *text = json ? kiln_job_to_json(job, 0) : kiln_job_to_yaml(job);
    if (text == NULL) {
        fprintf(stderr, "kiln validate: out of memory\n");
        return 1;
    }
    size_t n = strlen(text);
    fputs(text, stdout);
    if (n == 0 || text[n - 1] != '\n') fputc('\n', stdout);
    free(text);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The catalog: built in, plus the site's file when --catalog is given. */
static int load_catalog(const kiln_submit_args *a, kiln_catalog **cat, kiln_diag *d)
{
    kiln_err err = kiln_catalog_default(cat, d);
    if (err != KILN_OK) {
        report(d, err, "in kiln's built-in catalog (a bug: please report it)");
        return 1;
    }
    if (a->catalog_path == NULL) return 0;
    err = kiln_catalog_merge_file(*cat, a->catalog_path, d);
    if (err == KILN_OK) return 0;
    if (d->n == 0)
        kiln_diag_add(d, "--catalog", "cannot use '%s': %s", a->catalog_path, kiln_err_str(err));
    char what[512];
    snprintf(what, sizeof what, "in the site catalog '%s'", a->catalog_path);
    report(d, err, what);
    return status_of(err);
}

/* A Kubeflow TFJob names no region (unless annotated with kiln.dev/region):
 * it runs in the catalog's default region, us-central1 in the built-in one. */
static kiln_err fill_region(const kiln_submit_args *a, const kiln_catalog *cat, kiln_job *job)
{
    if (a->tfjob_path == NULL || (job->training_input.region && *job->training_input.region))
        return KILN_OK;
    const char *region = kiln_catalog_default_region(cat);
    return kiln_set_str(&job->training_input.region, region ? region : "us-central1");
}

/* securityContext runAsUser, runAsGroup, runAsNonRoot: kilnd checks them
 * at create against its project's user (kiln_catalog_check_run_as), which
 * `kiln validate` does not know: said, so that a pass here is not read as
 * theirs. */
static void run_as_note(const kiln_job *job)
{
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        if (!rc || !rc->has_security_context) continue;
        const kiln_security_context *sc = &rc->security_context;
        static const char *const names[3] = {"runAsUser", "runAsGroup", "runAsNonRoot"};
        const bool given[3] = {sc->has_run_as_user, sc->has_run_as_group, sc->run_as_non_root};
        for (int k = 0; k < 3; k++)
            if (given[k])
                fprintf(stderr,
                        "note: trainingInput.%sConfig.securityContext.%s: checked when the job "
                        "is submitted: kilnd refuses it unless the project's replicas run as "
                        "that %s\n",
                        kiln_role_field((kiln_role)r), names[k],
                        k == 0   ? "user"
                        : k == 1 ? "group"
                                 : "user (not root)");
    }
}

/* A job with a runtimeVersion: the image each role would run in (stderr,
 * as the notes: stdout stays the job). */
static void runtime_note(const kiln_catalog *cat, const kiln_job *job)
{
    const kiln_training_input *ti = &job->training_input;
    const kiln_runtime *rt = kiln_catalog_runtime(cat, ti->runtime_version, ti->python_version);
    if (!rt) return;
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    size_t n = kiln_catalog_plan(cat, job, plans);
    for (size_t i = 0; i < n; i++) {
        const char *image = kiln_catalog_runtime_image(cat, job, plans[i].role);
        if (image)
            fprintf(stderr,
                    "note: trainingInput.runtimeVersion: %s (Python %s): the %s runs in %s\n",
                    rt->version, rt->python, kiln_role_name(plans[i].role), image);
    }
}

int kiln_cli_validate(int argc, char **argv)
{
    kiln_submit_args a;
    kiln_diag d = KILN_DIAG_INIT, notes = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_catalog *cat = NULL;
    char what[512];
    int rc = 1;

    argc--, argv++; /* past "validate" */
    if (kiln_cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        return 0;
    }
    kiln_err err = kiln_submit_parse(argc, argv, &a, &d);
    if (err != KILN_OK) {
        report(&d, err, "on the command line (see kiln validate --help)");
        rc = a.usage_errors ? 1 : status_of(err);
        goto out;
    }
    if (a.format && strcmp(a.format, "table") == 0) {
        fprintf(stderr, "kiln validate: --format table is for listings; use yaml or json\n");
        goto out;
    }
    err = kiln_submit_build_notes(&a, &job, &d, &notes);
    if (err != KILN_OK) {
        snprintf(what, sizeof what, "%s %s", err == KILN_EINVAL ? "in" : "reading", input_name(&a));
        report(&d, err, what);
        rc = status_of(err);
        goto out;
    }
    /* as `kiln jobs submit` says them: accepted, not used */
    for (size_t i = 0; i < notes.n; i++)
        fprintf(stderr, "note: %s: %s\n", notes.v[i].field, notes.v[i].description);
    rc = load_catalog(&a, &cat, &d);
    if (rc != 0) goto out;
    err = fill_region(&a, cat, job);
    if (err != KILN_OK) {
        fprintf(stderr, "kiln validate: out of memory\n");
        rc = 1;
        goto out;
    }
    err = kiln_catalog_validate(cat, job, &d);
    if (err == KILN_OK) err = kiln_catalog_check_honoured(cat, job, &d); /* as kilnd's create */
    if (err != KILN_OK) {
        snprintf(what, sizeof what, "in job '%s' (from %s)", job->job_id ? job->job_id : "",
                 input_name(&a));
        report(&d, err, what);
        rc = status_of(err);
        goto out;
    }
    err = kiln_catalog_normalise(cat, job);
    if (err != KILN_OK) {
        fprintf(stderr, "kiln validate: cannot normalise the job: %s\n", kiln_err_str(err));
        rc = 1;
        goto out;
    }
    runtime_note(cat, job);
    run_as_note(job);
    rc = print_job(job, a.format);
out:
    kiln_catalog_free(cat);
    kiln_job_free(job);
    kiln_submit_args_free(&a);
    kiln_diag_free(&d);
    kiln_diag_free(&notes);
    return rc;
}
