/* kiln/submit.h - gcloud-style command-line flags -> kiln_job.
 *
 * The command line of `gcloud ai-platform jobs submit training` (facts §7),
 * shared by `kiln validate` and `kiln submit`:
 *
 *   JOB [--config FILE | --kubeflow-job FILE (alias --tfjob)] [--scale-tier T]
 * [--master-machine-type T]
 *       [--master-accelerator count=N,type=nvidia-tesla-t4] [--worker-count N] ...
 *       -- USER_ARGS...
 *
 * Two steps: kiln_submit_parse() checks the command line's own syntax and
 * records what each flag said; kiln_submit_build() reads the file (if any)
 * and lays every given flag over it, field by field, so a flag always wins
 * over the file. docs/cli.md lists every flag and the field it sets.
 *
 * Ownership: every pointer inside kiln_submit_args is owned by it and freed by
 * kiln_submit_args_free(). */
#ifndef KILN_SUBMIT_H
#define KILN_SUBMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/diag.h"
#include "kiln/job.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the command line said. NULL / has_* false: the flag was not given. */
typedef struct kiln_submit_args {
    char *job_id; /* the positional JOB */

    /* inputs and output, not job fields */
    char *config_path;  /* --config: a Job (or config.yaml) in YAML or JSON; "-" = stdin */
    char *tfjob_path;   /* --kubeflow-job or --tfjob: a TFJob or PyTorchJob; "-" = stdin */
    char *catalog_path; /* --catalog: a site catalog laid over the built-in one */
    char *runtimes_dir; /* --runtimes-dir: where a TrainJob's runtimeRef is looked up */
    char *format;       /* --format: "json" | "yaml" | "table" */
    bool stream_logs;   /* --stream-logs */
    bool async;         /* --async */

    /* trainingInput fields */
    char *scale_tier; /* --scale-tier, in enum form: basic-gpu -> BASIC_GPU */
    char *master_type, *worker_type, *parameter_server_type, *evaluator_type;
    bool has_worker_count, has_parameter_server_count, has_evaluator_count;
    int64_t worker_count, parameter_server_count, evaluator_count;
    /* --<role>-accelerator count=N,type=T (count defaults to 1; type in enum form) */
    bool has_master_accelerator, has_worker_accelerator, has_parameter_server_accelerator,
        has_evaluator_accelerator;
    kiln_accelerator_config master_accelerator, worker_accelerator, parameter_server_accelerator,
        evaluator_accelerator;
    char *master_image_uri, *worker_image_uri, *parameter_server_image_uri, *evaluator_image_uri;
    char *job_dir;
    char *region;
    char *python_module; /* --module-name */
    char *package_path;  /* --package-path, already turned into a file:// URI */
    bool has_packages;   /* --packages a.tar.gz,b.whl */
    kiln_strv packages;
    char *runtime_version;
    char *python_version;
    bool has_labels; /* --labels k=v,k2=v2 */
    kiln_map labels;

    bool has_user_args; /* a bare `--` was given; user_args may still be empty */
    kiln_strv user_args;

    /* Problems with the command line itself (unknown flag, missing value,
     * stray argument), as opposed to a bad value: a CLI exits 1 for these. */
    unsigned usage_errors;
} kiln_submit_args;

/* Parses argv[0..argc) - the arguments after the verb, not a program name.
 * Accepts `--flag value` and `--flag=value`; a flag given twice keeps the last
 * value; everything after a bare `--` is kept untouched as user args. Each
 * problem becomes a violation whose field is the flag ("--worker-count");
 * unknown flags name the closest known one. Parsing goes on after a problem
 * so that every one is reported. KILN_OK, KILN_EINVAL or KILN_ENOMEM; `out`
 * is filled either way and must be freed with kiln_submit_args_free(). */
kiln_err kiln_submit_parse(int argc, char **argv, kiln_submit_args *out, kiln_diag *d);

void kiln_submit_args_free(kiln_submit_args *a);

/* Builds the job: reads --config (kiln_job_from_yaml) or --tfjob
 * (kiln_job_from_kubeflow), else starts from an empty job; then applies every
 * flag that was given over it, sets jobId from JOB (when given) and, when `--`
 * was given, replaces trainingInput.args with the user args. --labels adds to
 * (and overrides keys of) the file's labels; --package-path and --packages
 * together replace packageUris. No catalog rules are checked here.
 * Returns KILN_OK and sets *out (caller frees with kiln_job_free), or
 * KILN_EIO / KILN_ELIMIT when a file cannot be read (a violation names the
 * file), KILN_EINVAL (see `d`) or KILN_ENOMEM; *out is NULL on error. */
kiln_err kiln_submit_build(const kiln_submit_args *a, kiln_job **out, kiln_diag *d);
/* The same, with the Kubeflow file's notes (kiln_job_from_kubeflow_notes) in
 * `notes` when not NULL: the CLI prints them as `note: FIELD: ...`. */
kiln_err kiln_submit_build_notes(const kiln_submit_args *a, kiln_job **out, kiln_diag *d,
                                 kiln_diag *notes);

/* The arguments the executor passes to the job's program (facts §6): the user
 * args (trainingInput.args), then `--job-dir DIR` when trainingInput.jobDir is
 * set. `out` is cleared first; on error it is left empty. */
kiln_err kiln_job_program_args(const kiln_job *job, kiln_strv *out);

/* Reads a whole input file (or stdin for "-") for a front end, capped at
 * KILN_SPEC_MAX_BYTES. On failure adds a violation naming `field` and the file
 * and returns KILN_EIO, KILN_ELIMIT or KILN_ENOMEM. *buf is NUL-terminated;
 * the caller frees it. */
kiln_err kiln_read_input(const char *path, const char *field, char **buf, size_t *len,
                         kiln_diag *d);

#ifdef __cplusplus
}
#endif
#endif
