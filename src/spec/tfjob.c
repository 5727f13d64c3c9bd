/* src/spec/tfjob.c - Kubeflow TFJob (kubeflow.org/v1) -> kiln_job.
 *
 * The mapping, in short (docs/cli.md has the user-facing version):
 *   metadata.name                      -> jobId, with '-' and '.' turned into '_'
 *   metadata.labels                    -> labels
 *   metadata.annotations[kiln.dev/region]  -> trainingInput.region (else unset: the
 *                                         CLI uses the catalog's default region)
 *   metadata.annotations[kiln.dev/job-dir] -> trainingInput.jobDir
 *   spec.tfReplicaSpecs.Chief|Master   -> master (Chief also sets useChiefInTfConfig)
 *   spec.tfReplicaSpecs.Worker         -> workers; without Chief/Master, worker 0
 *                                         becomes the master (useChiefInTfConfig) and
 *                                         workerCount = replicas - 1
 *   spec.tfReplicaSpecs.PS / Evaluator -> parameter servers / evaluators
 *   pod container "tensorflow" (else the first one): image, command, args,
 *   resources.limits["nvidia.com/gpu"], nodeSelector -> the role's ReplicaConfig
 *   spec.runPolicy (or the older fields directly under spec) -> runPolicy
 * scaleTier is CUSTOM; machine types come from the pod template annotation
 * kiln.dev/machine-type, else kiln__default_machine_type().
 *
 * Only shape is checked here (with field paths into the TFJob); catalog rules
 * (machine types, GPU counts, regions) are kiln/catalog.h's business. Fields
 * that belong to Kubernetes (volumes, env, probes, tolerations...) are ignored. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "kiln/job.h"
#include "spec/flags.h"
#include "spec/tree.h"

#define TF_API_VERSION    "kubeflow.org/v1"
#define TF_KIND           "TFJob"
#define TF_DEFAULT_REGION "us-central1"
#define TF_CONTAINER      "tensorflow"
#define TF_GPU_RESOURCE   "nvidia.com/gpu"
#define TF_DEFAULT_GPU    "NVIDIA_TESLA_K80" /* what BASIC_GPU uses */
#define ANN_REGION        "kiln.dev/region"
#define ANN_JOB_DIR       "kiln.dev/job-dir"
#define ANN_MACHINE_TYPE  "kiln.dev/machine-type"

/* Kubeflow's replica types, in the order their specs are decoded. */
enum { TF_CHIEF, TF_MASTER, TF_PS, TF_WORKER, TF_EVALUATOR, TF_NTYPES };
static const char *const tf_type_names[TF_NTYPES] = {"Chief", "Master", "PS", "Worker",
                                                     "Evaluator"};

/* Node-selector keys that name the GPU model, most specific first. */
static const char *const gpu_selector_keys[] = {"cloud.google.com/gke-accelerator",
                                                "kiln.dev/accelerator", "accelerator"};

/* Path prefixes are built from known names only ("spec.tfReplicaSpecs.Evaluator"
 * plus a container index), so these sizes never truncate. */
#define ROLE_PATH_MAX 64
#define CTR_PATH_MAX  192
#define PATH_MAX_LEN  256

typedef struct tf_ctx {
    kiln_diag *d;
    kiln_err err; /* first hard error (ENOMEM); EINVAL is counted through d */
    size_t bad;   /* violations reported by this decoder */
} tf_ctx;

static void bad(tf_ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void bad(tf_ctx *c, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kiln_diag_addv(c->d, field, fmt, ap);
    va_end(ap);
    c->bad++;
}

static void nomem(tf_ctx *c, kiln_err e)
{
    if (e != KILN_OK && c->err == KILN_OK) c->err = e;
}

static json_t *get(const json_t *obj, const char *key)
{
    return json_is_object(obj) ? json_object_get(obj, key) : NULL;
}

/* YAML gives every scalar as a string; JSON-shaped trees may not. */
static const char *scalar(const json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool present(const json_t *v)
{
    return v != NULL && !json_is_null(v);
}

/* Reads an integer that YAML handed over as a string (or JSON as a number). */
static bool get_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    const char *s = scalar(v);
    return s != NULL && kiln__parse_i64(s, out);
}

/* An optional non-negative integer field; reports and returns false when set but bad. */
static bool opt_count(tf_ctx *c, const json_t *obj, const char *key, const char *path, bool *has,
                      int64_t *out)
{
    const json_t *v = get(obj, key);
    if (!present(v)) return true;
    int64_t n;
    if (!get_int(v, &n) || n < 0) {
        bad(c, path, "%s must be a whole number, 0 or more", scalar(v) ? scalar(v) : "value");
        return false;
    }
    *has = true;
    *out = n;
    return true;
}

/* ---- header: apiVersion, kind, metadata ---- */

static void check_header(tf_ctx *c, const json_t *root)
{
    const char *api = scalar(get(root, "apiVersion"));
    const char *kind = scalar(get(root, "kind"));
    if (api == NULL)
        bad(c, "apiVersion", "required: a TFJob has apiVersion " TF_API_VERSION "");
    else if (strcmp(api, TF_API_VERSION) != 0)
        bad(c, "apiVersion", "'%s' is not supported; kiln reads apiVersion " TF_API_VERSION, api);
    if (kind == NULL)
        bad(c, "kind", "required: kind must be " TF_KIND "");
    else if (strcmp(kind, TF_KIND) != 0)
        bad(c, "kind", "'%s' is not a TFJob; kiln reads kind " TF_KIND, kind);
}

/* Kubernetes names allow lowercase letters, digits, '-' and '.'; jobIds allow
 * letters, digits and '_' and start with a letter. */
static void map_name(tf_ctx *c, const json_t *meta, kiln_job *job)
{
    const char *name = scalar(get(meta, "name"));
    if (name == NULL || *name == '\0') {
        bad(c, "metadata.name", "required: the TFJob's name becomes the kiln jobId");
        return;
    }
    char *id = strdup(name);
    if (id == NULL) {
        nomem(c, KILN_ENOMEM);
        return;
    }
    for (char *p = id; *p; p++)
        if (*p == '-' || *p == '.') *p = '_';
    bool ok = (id[0] >= 'a' && id[0] <= 'z') || (id[0] >= 'A' && id[0] <= 'Z');
    for (const char *p = id; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
             *p == '_';
    if (!ok)
        bad(c, "metadata.name",
            "'%s' cannot become a jobId: after '-' and '.' become '_', it must start with a "
            "letter and hold only letters, digits and '_'",
            name);
    else
        nomem(c, kiln_set_str(&job->job_id, id));
    free(id);
}

static void map_string_map(tf_ctx *c, const json_t *obj, const char *path, kiln_map *out)
{
    if (!present(obj)) return;
    if (!json_is_object(obj)) {
        bad(c, path, "must be a map of strings");
        return;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val)
    {
        const char *s = json_is_null(val) ? "" : scalar(val);
        if (s == NULL) {
            bad(c, path, "the value of '%s' must be a string", key);
            continue;
        }
        nomem(c, kiln_map_set(out, key, s));
    }
}

static void map_metadata(tf_ctx *c, const json_t *root, kiln_job *job)
{
    const json_t *meta = get(root, "metadata");
    if (!json_is_object(meta)) {
        bad(c, "metadata", "required: a TFJob needs metadata.name");
        return;
    }
    map_name(c, meta, job);
    map_string_map(c, get(meta, "labels"), "metadata.labels", &job->labels);

    const json_t *ann = get(meta, "annotations");
    const char *region = scalar(get(ann, ANN_REGION));
    const char *job_dir = scalar(get(ann, ANN_JOB_DIR));
    /* no annotation: region stays unset, and the CLI fills in the catalog's
     * default region (kiln_catalog_default_region) - a TFJob has no region */
    if (region) nomem(c, kiln_set_str(&job->training_input.region, region));
    if (job_dir) nomem(c, kiln_set_str(&job->training_input.job_dir, job_dir));
}

/* ---- one replica spec ---- */

static void map_strv(tf_ctx *c, const json_t *arr, const char *path, kiln_strv *out)
{
    if (!present(arr)) return;
    if (!json_is_array(arr)) {
        bad(c, path, "must be a list of strings");
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        const char *s = scalar(v);
        if (s == NULL) {
            char p[PATH_MAX_LEN];
            snprintf(p, sizeof p, "%s[%zu]", path, i);
            bad(c, p, "must be a string");
            continue;
        }
        nomem(c, kiln_strv_push(out, s));
    }
}

/* The container that runs TensorFlow: the one named "tensorflow", else the first. */
static const json_t *pick_container(tf_ctx *c, const json_t *containers, const char *path,
                                    size_t *index)
{
    if (!json_is_array(containers) || json_array_size(containers) == 0) {
        bad(c, path, "required: a list with the '" TF_CONTAINER "' container");
        return NULL;
    }
    size_t i;
    json_t *v;
    json_array_foreach(containers, i, v)
    {
        const char *name = scalar(get(v, "name"));
        if (name && strcmp(name, TF_CONTAINER) == 0) {
            *index = i;
            return v;
        }
    }
    *index = 0;
    return json_array_get(containers, 0);
}

/* GPUs: resources.limits["nvidia.com/gpu"] (Kubernetes wants GPUs in limits);
 * the model from a node-selector label, else TF_DEFAULT_GPU. */
static void map_gpus(tf_ctx *c, const json_t *ctr, const json_t *selector, const char *cpath,
                     kiln_replica_config *rc)
{
    const json_t *gpu = get(get(get(ctr, "resources"), "limits"), TF_GPU_RESOURCE);
    if (!present(gpu)) return;
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s.resources.limits[\"" TF_GPU_RESOURCE "\"]", cpath);
    int64_t n;
    if (!get_int(gpu, &n) || n < 0) {
        bad(c, p, "%s is not a whole number of GPUs", scalar(gpu) ? scalar(gpu) : "value");
        return;
    }
    if (n == 0) return;
    const char *model = NULL;
    for (size_t i = 0; model == NULL && i < sizeof gpu_selector_keys / sizeof *gpu_selector_keys;
         i++)
        model = scalar(get(selector, gpu_selector_keys[i]));
    char *type = kiln__accelerator_enum(model ? model : TF_DEFAULT_GPU);
    if (type == NULL) {
        bad(c, p, "the node selector names GPU model '%s', which is not an accelerator name",
            model);
        return;
    }
    rc->has_accelerator_config = true;
    rc->accelerator_config.count = n;
    free(rc->accelerator_config.type);
    rc->accelerator_config.type = type;
}

static void map_restart_policy(tf_ctx *c, const json_t *spec, const char *rpath,
                               kiln_replica_config *rc)
{
    static const char *const ok[] = {"Always", "OnFailure", "Never", "ExitCode"};
    const json_t *v = get(spec, "restartPolicy");
    if (!present(v)) return; /* unset: left to the executor's default */
    const char *s = scalar(v);
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s.restartPolicy", rpath);
    for (size_t i = 0; s && i < sizeof ok / sizeof *ok; i++)
        if (strcmp(s, ok[i]) == 0) {
            nomem(c, kiln_set_str(&rc->restart_policy, s));
            return;
        }
    bad(c, p, "'%s' is not a restart policy; use Always, OnFailure, Never or ExitCode",
        s ? s : "value");
}

/* Fills `rc` and `*machine` from one tfReplicaSpecs entry (path `rpath`). */
static void map_replica_config(tf_ctx *c, const json_t *spec, const char *rpath,
                               kiln_replica_config *rc, const char **machine)
{
    char p[PATH_MAX_LEN];
    const json_t *tmpl = get(spec, "template");
    const json_t *pod = get(tmpl, "spec");
    snprintf(p, sizeof p, "%s.template.spec.containers", rpath);
    size_t idx = 0;
    const json_t *ctr = pick_container(c, get(pod, "containers"), p, &idx);

    map_restart_policy(c, spec, rpath, rc);
    snprintf(p, sizeof p, "%s.template.spec.nodeSelector", rpath);
    const json_t *selector = get(pod, "nodeSelector");
    map_string_map(c, selector, p, &rc->node_selector);
    *machine = scalar(get(get(get(tmpl, "metadata"), "annotations"), ANN_MACHINE_TYPE));
    if (ctr == NULL) return;

    char cpath[CTR_PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s.template.spec.containers[%zu]", rpath, idx);
    if (!json_is_object(ctr)) {
        bad(c, cpath, "must be a container");
        return;
    }
    const char *image = scalar(get(ctr, "image"));
    snprintf(p, sizeof p, "%s.image", cpath);
    if (image == NULL || *image == '\0')
        bad(c, p, "required: the container image to run");
    else
        nomem(c, kiln_set_str(&rc->image_uri, image));
    snprintf(p, sizeof p, "%s.command", cpath);
    map_strv(c, get(ctr, "command"), p, &rc->container_command);
    snprintf(p, sizeof p, "%s.args", cpath);
    map_strv(c, get(ctr, "args"), p, &rc->container_args);
    map_gpus(c, ctr, selector, cpath, rc);
}

/* replicas defaults to 1, as in Kubeflow. */
static int64_t map_replicas(tf_ctx *c, const json_t *spec, const char *rpath, bool chief)
{
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s.replicas", rpath);
    const json_t *v = get(spec, "replicas");
    int64_t n = 1;
    if (present(v) && (!get_int(v, &n) || n < 0)) {
        bad(c, p, "%s is not a whole number of replicas (0 or more)",
            scalar(v) ? scalar(v) : "value");
        return -1;
    }
    if (chief && n != 1) {
        bad(c, p, "%s: a TFJob has exactly one Chief or Master replica",
            scalar(v) ? scalar(v) : "value");
        return -1;
    }
    return n;
}

/* ---- replica specs -> roles ---- */

/* Decodes one replica spec into `role` with `count` replicas. `quiet` drops
 * violations (used when the same spec is decoded a second time). */
static void fill_role(tf_ctx *c, const json_t *spec, const char *rpath, kiln_training_input *ti,
                      kiln_role role, int64_t count)
{
    kiln_role_fields s = kiln_job_role_fields(ti, role);
    const char *machine = NULL;
    map_replica_config(c, spec, rpath, s.config, &machine);
    *s.has_config = true;
    if (machine == NULL || *machine == '\0') {
        const kiln_accelerator_config *ac = &s.config->accelerator_config;
        machine = kiln__default_machine_type(s.config->has_accelerator_config ? ac->type : NULL,
                                             ac->count);
    }
    nomem(c, kiln_set_str(s.type, machine));
    if (s.count) *s.count = count;
}

/* Finds the replica specs by name (Kubeflow's names, any letter case). */
static void find_specs(tf_ctx *c, const json_t *specs, const json_t *found[TF_NTYPES])
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)specs, key, val)
    {
        size_t t = 0;
        while (t < TF_NTYPES && strcasecmp(key, tf_type_names[t]) != 0)
            t++;
        char p[PATH_MAX_LEN];
        if (t == TF_NTYPES) {
            bad(c, "spec.tfReplicaSpecs",
                "'%s' is not a TFJob replica type; use Chief, Master, PS, Worker or Evaluator",
                key);
            continue;
        }
        snprintf(p, sizeof p, "spec.tfReplicaSpecs.%s", tf_type_names[t]);
        if (found[t] != NULL)
            bad(c, p, "given twice (names differ only in letter case)");
        else if (!json_is_object(val))
            bad(c, p, "must be a replica spec (replicas, restartPolicy, template)");
        else
            found[t] = val;
    }
}

/* Decodes the spec that has `found[t]` into `role`, checking replicas. */
static void decode_role(tf_ctx *c, const json_t *found[TF_NTYPES], int t, kiln_training_input *ti,
                        kiln_role role)
{
    char rpath[ROLE_PATH_MAX];
    snprintf(rpath, sizeof rpath, "spec.tfReplicaSpecs.%s", tf_type_names[t]);
    int64_t n = map_replicas(c, found[t], rpath, role == KILN_ROLE_MASTER);
    /* a bad count still gets its template checked: every problem at once */
    if (n != 0) fill_role(c, found[t], rpath, ti, role, n < 0 ? 0 : n);
}

/* Without a Chief or Master, Kubeflow's job succeeds when worker 0 does: kiln
 * makes worker 0 the master (named "chief" in TF_CONFIG, which TensorFlow's
 * multi-worker strategies treat as a worker that also does the chief's
 * duties) and keeps the other replicas as workers. */
static void promote_worker(tf_ctx *c, const json_t *worker, kiln_training_input *ti)
{
    const char *rpath = "spec.tfReplicaSpecs.Worker";
    int64_t n = map_replicas(c, worker, rpath, false);
    if (n < 0) return;
    if (n == 0) {
        bad(c, "spec.tfReplicaSpecs.Worker.replicas",
            "0: without a Chief or Master, worker 0 is the chief, so at least 1 replica is "
            "needed");
        return;
    }
    fill_role(c, worker, rpath, ti, KILN_ROLE_MASTER, 1);
    ti->use_chief_in_tf_config = true;
    if (n == 1) return;
    /* same spec again for the remaining workers; its problems are already reported */
    kiln_diag quiet = KILN_DIAG_INIT;
    tf_ctx qc = {.d = &quiet};
    fill_role(&qc, worker, rpath, ti, KILN_ROLE_WORKER, n - 1);
    nomem(c, qc.err);
    kiln_diag_free(&quiet);
}

static void map_replica_specs(tf_ctx *c, const json_t *spec, kiln_training_input *ti)
{
    const json_t *specs = get(spec, "tfReplicaSpecs");
    if (!json_is_object(specs) || json_object_size(specs) == 0) {
        bad(c, "spec.tfReplicaSpecs", "required: the replica specs (Chief, PS, Worker...)");
        return;
    }
    const json_t *found[TF_NTYPES] = {0};
    find_specs(c, specs, found);
    if (found[TF_CHIEF] && found[TF_MASTER]) {
        bad(c, "spec.tfReplicaSpecs",
            "has both Chief and Master; a TFJob has one of them, not both");
        return;
    }
    nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    if (found[TF_CHIEF] || found[TF_MASTER]) {
        int t = found[TF_CHIEF] ? TF_CHIEF : TF_MASTER;
        ti->use_chief_in_tf_config = (t == TF_CHIEF);
        decode_role(c, found, t, ti, KILN_ROLE_MASTER);
        if (found[TF_WORKER]) decode_role(c, found, TF_WORKER, ti, KILN_ROLE_WORKER);
    } else if (found[TF_WORKER]) {
        promote_worker(c, found[TF_WORKER], ti);
    } else {
        bad(c, "spec.tfReplicaSpecs", "needs a Chief, Master or Worker replica spec");
    }
    if (found[TF_PS]) decode_role(c, found, TF_PS, ti, KILN_ROLE_PARAMETER_SERVER);
    if (found[TF_EVALUATOR]) decode_role(c, found, TF_EVALUATOR, ti, KILN_ROLE_EVALUATOR);
}

/* ---- runPolicy ---- */

/* spec.runPolicy, or for TFJobs written before runPolicy existed, the same
 * fields directly under spec (runPolicy wins where both are given). */
static void map_run_policy(tf_ctx *c, const json_t *spec, kiln_training_input *ti)
{
    static const char *const clean_ok[] = {"All", "Running", "None"};
    const json_t *rp = get(spec, "runPolicy");
    if (present(rp) && !json_is_object(rp)) {
        bad(c, "spec.runPolicy", "must be a map (backoffLimit, activeDeadlineSeconds...)");
        return;
    }
    kiln_run_policy *out = &ti->run_policy;
    const json_t *srcs[2] = {spec, rp}; /* later wins */
    const char *prefix[2] = {"spec.", "spec.runPolicy."};
    for (int i = 0; i < 2; i++) {
        const json_t *s = srcs[i];
        char p[PATH_MAX_LEN];
        snprintf(p, sizeof p, "%sbackoffLimit", prefix[i]);
        opt_count(c, s, "backoffLimit", p, &out->has_backoff_limit, &out->backoff_limit);
        snprintf(p, sizeof p, "%sactiveDeadlineSeconds", prefix[i]);
        opt_count(c, s, "activeDeadlineSeconds", p, &out->has_active_deadline_seconds,
                  &out->active_deadline_seconds);
        snprintf(p, sizeof p, "%sttlSecondsAfterFinished", prefix[i]);
        opt_count(c, s, "ttlSecondsAfterFinished", p, &out->has_ttl_seconds_after_finished,
                  &out->ttl_seconds_after_finished);
        const json_t *cp = get(s, "cleanPodPolicy");
        if (!present(cp)) continue;
        snprintf(p, sizeof p, "%scleanPodPolicy", prefix[i]);
        const char *v = scalar(cp);
        size_t k = 0;
        while (v && k < 3 && strcmp(v, clean_ok[k]) != 0)
            k++;
        if (v == NULL || k == 3)
            bad(c, p, "'%s' is not a clean-pod policy; use All, Running or None", v ? v : "value");
        else
            nomem(c, kiln_set_str(&out->clean_pod_policy, v));
    }
    if (out->has_active_deadline_seconds && out->active_deadline_seconds == 0)
        bad(c,
            present(get(rp, "activeDeadlineSeconds")) ? "spec.runPolicy.activeDeadlineSeconds"
                                                      : "spec.activeDeadlineSeconds",
            "must be at least 1 second");
    ti->has_run_policy = out->has_backoff_limit || out->has_active_deadline_seconds ||
                         out->has_ttl_seconds_after_finished || out->clean_pod_policy != NULL;
}

/* Kubeflow features kiln cannot honour are errors, not silent surprises. */
static void check_unsupported(tf_ctx *c, const json_t *spec)
{
    const char *sp = scalar(get(spec, "successPolicy"));
    if (sp && *sp && strcmp(sp, "Default") != 0)
        bad(c, "spec.successPolicy",
            "'%s' is not supported: a kiln job succeeds when its chief (or worker 0) succeeds", sp);
    const char *suspend = scalar(get(get(spec, "runPolicy"), "suspend"));
    if (suspend && strcmp(suspend, "true") == 0)
        bad(c, "spec.runPolicy.suspend", "suspended TFJobs are not supported");
}

static kiln_err decode(tf_ctx *c, const json_t *root, kiln_job *job)
{
    if (!json_is_object(root)) {
        bad(c, "", "a TFJob must be a YAML or JSON map");
        return KILN_EINVAL;
    }
    check_header(c, root);
    if (c->bad) return KILN_EINVAL; /* not a TFJob: the rest would be noise */
    map_metadata(c, root, job);
    job->has_training_input = true;
    const json_t *spec = get(root, "spec");
    if (!json_is_object(spec)) {
        bad(c, "spec", "required: the TFJob spec with tfReplicaSpecs");
        return KILN_EINVAL;
    }
    map_replica_specs(c, spec, &job->training_input);
    map_run_policy(c, spec, &job->training_input);
    check_unsupported(c, spec);
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}

kiln_err kiln_job_from_tfjob(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    kiln_err err = KILN_OK;
    json_t *root = NULL;
    kiln_job *job = NULL;
    tf_ctx c = {.d = d};

    *out = NULL;
    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(d, "", "the TFJob is %zu bytes; the limit is %u", len,
                      (unsigned)KILN_SPEC_MAX_BYTES);
        return KILN_ELIMIT;
    }
    root = kiln__yaml_load_err(buf, len, d, &err);
    if (root == NULL) goto out;
    job = kiln_job_new();
    if (job == NULL) {
        err = KILN_ENOMEM;
        goto out;
    }
    err = decode(&c, root, job);
    if (err == KILN_OK) {
        *out = job;
        job = NULL;
    }
out:
    kiln_job_free(job);
    json_decref(root);
    return err;
}
