/* vertex.c - a Vertex AI CustomJob (aiplatform v1) onto the Job model.
 *
 *   jobSpec.workerPoolSpecs[0]  -> the master (replicaCount must be 1)
 *   jobSpec.workerPoolSpecs[1]  -> workers            ([k] may be {} to skip a pool)
 *   jobSpec.workerPoolSpecs[2]  -> parameter servers
 *   jobSpec.workerPoolSpecs[3]  -> evaluators
 *     machineSpec.machineType   -> <role>Type
 *     machineSpec.accelerator*  -> <role>Config.acceleratorConfig (names or enum numbers)
 *     containerSpec             -> <role>Config.imageUri, containerCommand, containerArgs, env
 *     pythonPackageSpec         -> <role>Config.imageUri (executorImageUri), containerCommand
 *                                  python3 -m MODULE, containerArgs, env; packageUris
 *                                  (one list for the job: every pool must give the same)
 *     diskSpec                  -> <role>Config.diskConfig: the replica's scratch space,
 *                                  checked at create against kilnd's disk
 *   jobSpec.scheduling.timeout  -> scheduling.maxRunningTime
 *   restartJobOnWorkerRestart   -> restartPolicy OnFailure on pools 1-3 (kiln restarts all
 *                                  of a job's replicas when one is restarted)
 *   disableRetries              -> runPolicy.backoffLimit 0, restartPolicy Never
 *   baseOutputDirectory         -> vertex.baseOutputDirectory (AIP_*_DIR, kiln/exec.h)
 *   jobSpec.serviceAccount      -> serviceAccount (the Unix user kilnd maps it to runs the
 *                                  replicas: kiln_users_job, kiln/auth.h)
 *   jobSpec.persistentResourceId -> vertex.persistentResourceId (the ClusterQueue declared
 *                                  as it admits the job: kiln_queues_persistent_lq)
 *   displayName, labels         -> vertex.displayName, labels
 * Everything else is refused by its CustomJob path; a field holding its
 * proto3 default (false, "", 0, [] or {}) is the same as absent, an omitted
 * one means its default where that is legal, and names may be snake_case
 * (proto3 JSON, docs/vertex.md). */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"

#define MAX_POOLS 4

/* AcceleratorType's numbers (google/cloud/aiplatform/v1/accelerator_type.proto):
 * the Python SDK's REST transport sends enums as integers. */
static const char *const accel_names[] = {
    [0] = "ACCELERATOR_TYPE_UNSPECIFIED",
    [1] = "NVIDIA_TESLA_K80",
    [2] = "NVIDIA_TESLA_P100",
    [3] = "NVIDIA_TESLA_V100",
    [4] = "NVIDIA_TESLA_P4",
    [5] = "NVIDIA_TESLA_T4",
    [6] = "TPU_V2",
    [7] = "TPU_V3",
    [8] = "NVIDIA_TESLA_A100",
    [9] = "NVIDIA_A100_80GB",
    [10] = "TPU_V4_POD",
    [11] = "NVIDIA_L4",
    [12] = "TPU_V5_LITEPOD",
    [13] = "NVIDIA_H100_80GB",
    [14] = "NVIDIA_H100_MEGA_80GB",
    [15] = "NVIDIA_H200_141GB",
    [16] = "NVIDIA_B200",
    [17] = "NVIDIA_GB200",
    [18] = "NVIDIA_RTX_PRO_6000",
};
#define N_ACCEL (sizeof accel_names / sizeof accel_names[0])

typedef struct vctx {
    kiln_diag *d;
    kiln_job *job;
    bool nomem;
    bool have_pkgs; /* a pool gave packageUris: the others must match */
} vctx;

static void nomem(vctx *c, kiln_err e)
{
    if (e != KILN_OK) c->nomem = true;
}

/* proto3: a default value is "not set" */
static bool is_default(const json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v)) return true;
    if (json_is_string(v)) return json_string_length(v) == 0;
    if (json_is_integer(v)) return json_integer_value(v) == 0;
    if (json_is_real(v)) return json_real_value(v) == 0.0;
    if (json_is_array(v)) return json_array_size(v) == 0;
    if (json_is_object(v)) return json_object_size(v) == 0;
    return false;
}

/* proto3 JSON's parsers take a field's original snake_case name as well as
 * its lowerCamelCase JSON name (hand-written files and the SDK's Struct
 * dicts use the first). The tree is rewritten to lowerCamelCase before it
 * is read, so the rest of this file knows one spelling; a map's keys
 * (labels) are data and are left alone. A key given in both spellings is
 * refused. Returns a new reference, NULL on ENOMEM. */
static void camel_name(const char *k, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = k; *p && n + 1 < cap; p++) {
        if (*p == '_' && p != k && p[1] && !isupper((unsigned char)p[1]) && p[1] != '_') {
            out[n++] = (char)toupper((unsigned char)*++p);
            continue;
        }
        out[n++] = *p;
    }
    out[n] = '\0';
}

static json_t *camel_tree(json_t *v, bool is_map, kiln_diag *d)
{
    if (json_is_array(v)) {
        json_t *a = json_array(), *e;
        size_t i;
        if (!a) return NULL;
        json_array_foreach(v, i, e)
        {
            if (json_array_append_new(a, camel_tree(e, false, d)) < 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    if (!json_is_object(v)) return json_incref(v);
    json_t *o = json_object(), *e;
    const char *k;
    if (!o) return NULL;
    json_object_foreach(v, k, e)
    {
        char nk[256];
        if (is_map || strlen(k) >= sizeof nk)
            snprintf(nk, sizeof nk, "%s", k);
        else
            camel_name(k, nk, sizeof nk);
        if (json_object_get(o, nk)) {
            kiln_diag_add(d, nk, "is given twice (as '%.128s' too): proto3 JSON reads both", k);
            continue;
        }
        if (json_object_set_new(o, nk, camel_tree(e, strcmp(nk, "labels") == 0, d)) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* json_loadb, then the names in lowerCamelCase (camel_tree). */
static json_t *load_proto3(const char *buf, size_t len, json_error_t *je, kiln_diag *d)
{
    json_t *raw = json_loadb(buf, len, JSON_REJECT_DUPLICATES, je), *root;
    if (!raw) return NULL;
    root = camel_tree(raw, false, d);
    json_decref(raw);
    if (!root) snprintf(je->text, sizeof je->text, "out of memory");
    return root;
}

/* A job's top-level keys: an output-only one set is refused (the service
 * sets it), and so is any key in neither list that holds more than its
 * default, with `unknown` as the reason. */
static void top_keys(kiln_diag *d, json_t *root, const char *const *keys,
                     const char *const *output_only, const char *unknown)
{
    for (size_t i = 0; output_only[i]; i++)
        if (!is_default(json_object_get(root, output_only[i])))
            kiln_diag_add(d, output_only[i], "is output only: the service sets it");
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        bool known = false;
        for (size_t i = 0; keys[i] && !known; i++)
            known = strcmp(keys[i], k) == 0;
        for (size_t i = 0; output_only[i] && !known; i++)
            known = strcmp(output_only[i], k) == 0;
        if (!known && !is_default(v)) kiln_diag_add(d, k, "%s", unknown);
    }
}

/* A job's labels: a map of strings, onto the kiln job's labels (the
 * label rules themselves are checked with every job's, at admission). */
static void job_labels(vctx *c, const json_t *labels)
{
    if (!labels || json_is_null(labels)) return;
    if (!json_is_object(labels)) {
        kiln_diag_add(c->d, "labels", "must be a map of strings");
        return;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)labels, k, v)
    {
        if (!json_is_string(v))
            kiln_diag_add(c->d, "labels", "the value of '%.64s' must be a string", k);
        else
            nomem(c, kiln_map_set(&c->job->labels, k, json_string_value(v)));
    }
}

/* Every key of obj must be in `known`; the others are refused unless they
 * hold their default. `why` says what kiln does instead, per refused key
 * (NULL: the generic sentence). */
static void check_keys(vctx *c, const json_t *obj, const char *path, const char *const *known)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++)
            ok = strcmp(known[i], k) == 0;
        if (ok || is_default(v)) continue;
        char f[512];
        snprintf(f, sizeof f, "%s%s%.128s", path, *path ? "." : "", k);
        kiln_diag_add(c->d, f,
                      "not a field kiln acts on (it would be ignored, so it is refused; "
                      "docs/vertex.md lists what kiln reads)");
    }
}

static const char *opt_str(vctx *c, const json_t *obj, const char *key, const char *path)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return NULL;
    if (!json_is_string(v)) {
        kiln_diag_add(c->d, path, "must be a string");
        return NULL;
    }
    return json_string_value(v);
}

/* The start of every decoder of an aiplatform resource (CustomJob,
 * HyperparameterTuningJob, TrainingPipeline; `kind` names it in the
 * sentences): the size cap, the JSON with its names in lowerCamelCase
 * (load_proto3), an object, and c->job a new Vertex job of scale tier
 * CUSTOM. Returns the tree (the caller's, given back to vertex_end), or
 * NULL with the failure in *err and its sentence in c->d. */
static json_t *vertex_begin(vctx *c, const char *buf, size_t len, const char *kind, kiln_err *err)
{
    json_error_t je;
    json_t *root = NULL;

    *err = KILN_EINVAL;
    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(c->d, NULL, "the %s is larger than %u bytes", kind, KILN_SPEC_MAX_BYTES);
        *err = KILN_ELIMIT;
        goto out;
    }
    root = load_proto3(buf, len, &je, c->d);
    if (!root) {
        kiln_diag_add(c->d, NULL, "not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        goto out;
    }
    if (!json_is_object(root)) {
        kiln_diag_add(c->d, NULL, "a %s is a JSON object", kind);
        goto out;
    }
    if (!(c->job = kiln_job_new())) {
        *err = KILN_ENOMEM;
        goto out;
    }
    kiln_training_input *ti = &c->job->training_input;
    c->job->has_training_input = true;
    ti->has_vertex = true;
    nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    *err = KILN_OK;
out:
    if (*err != KILN_OK) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* The end of every decoder: KILN_OK, and the job in *out, when nothing
 * was refused since the decoder began (n0: the violations before it);
 * else the job is freed. The tree is released either way. */
static kiln_err vertex_end(vctx *c, json_t *root, size_t n0, kiln_job **out)
{
    kiln_err err = KILN_EINVAL;
    if (c->nomem)
        err = KILN_ENOMEM;
    else if (c->d->n == n0 && !c->d->dropped)
        err = KILN_OK;
    json_decref(root);
    if (err == KILN_OK)
        *out = c->job;
    else
        kiln_job_free(c->job);
    return err;
}

/* displayName: required, at most 128 characters; vertex.displayName. */
static void display_name(vctx *c, const json_t *root)
{
    const char *dn = opt_str(c, root, "displayName", "displayName");
    if (!dn || !*dn)
        kiln_diag_add(c->d, "displayName", "is required");
    else if (strlen(dn) > 128)
        kiln_diag_add(c->d, "displayName", "is longer than 128 characters");
    else
        nomem(c, kiln_set_str(&c->job->training_input.vertex.display_name, dn));
}

/* An int64 as proto3's JSON has it: a number or a decimal string. A whole
 * number written as a double (1.0) is accepted too: inside a
 * google.protobuf.Struct (a pipeline's trainingTaskInputs) every number is
 * a double, and protobuf's own parsers take 1.0 for an integer field. */
static bool opt_int(vctx *c, const json_t *obj, const char *key, const char *path, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v || json_is_null(v)) return false;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        /* the range first: casting a double outside int64's is undefined */
        if (x > -9.2e18 && x < 9.2e18 && x == (double)(int64_t)x) {
            *out = (int64_t)x;
            return true;
        }
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        long long n = strtoll(s, &end, 10);
        if (*s && !errno && !*end) {
            *out = n;
            return true;
        }
    }
    kiln_diag_add(c->d, path, "must be a whole number (a JSON number or a decimal string)");
    return false;
}

static bool opt_bool(vctx *c, const json_t *obj, const char *key, const char *path)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return false;
    if (!json_is_boolean(v)) {
        kiln_diag_add(c->d, path, "must be true or false");
        return false;
    }
    return json_is_true(v);
}

/* A list of strings into v. */
static void str_list(vctx *c, const json_t *obj, const char *key, const char *path, kiln_strv *v)
{
    json_t *a = json_object_get(obj, key), *e;
    size_t i;
    if (!a || json_is_null(a)) return;
    if (!json_is_array(a)) {
        kiln_diag_add(c->d, path, "must be a list of strings");
        return;
    }
    json_array_foreach(a, i, e)
    {
        if (!json_is_string(e)) {
            kiln_diag_add(c->d, path, "item %zu must be a string", i);
            continue;
        }
        nomem(c, kiln_strv_push(v, json_string_value(e)));
    }
}

/* env: [{name, value}] into the role's env map. */
static void env_list(vctx *c, const json_t *obj, const char *path, kiln_map *env)
{
    json_t *a = json_object_get(obj, "env"), *e;
    size_t i;
    char p[512];
    static const char *const keys[] = {"name", "value", NULL};
    if (!a || json_is_null(a)) return;
    if (!json_is_array(a)) {
        kiln_diag_add(c->d, path, "must be a list of {name, value}");
        return;
    }
    json_array_foreach(a, i, e)
    {
        snprintf(p, sizeof p, "%s[%zu]", path, i);
        if (!json_is_object(e)) {
            kiln_diag_add(c->d, p, "must be {name, value}");
            continue;
        }
        check_keys(c, e, p, keys);
        const char *n = opt_str(c, e, "name", p), *v = opt_str(c, e, "value", p);
        if (!n || !*n) {
            kiln_diag_add(c->d, p, "needs a name");
            continue;
        }
        if (kiln_map_get(env, n)) {
            kiln_diag_add(c->d, p, "'%.64s' is given twice", n);
            continue;
        }
        nomem(c, kiln_map_set(env, n, v ? v : ""));
    }
}

static void machine_spec(vctx *c, const json_t *ms, const char *path, kiln_role r)
{
    static const char *const keys[] = {"machineType", "acceleratorType", "acceleratorCount", NULL};
    char p[512];
    kiln_role_fields rf = kiln_job_role_fields(&c->job->training_input, r);
    snprintf(p, sizeof p, "%s.machineSpec", path);
    if (!json_is_object(ms)) {
        kiln_diag_add(c->d, p, "is required: {machineType, acceleratorType, acceleratorCount}");
        return;
    }
    check_keys(c, ms, p, keys);
    snprintf(p, sizeof p, "%s.machineSpec.machineType", path);
    const char *mt = opt_str(c, ms, "machineType", p);
    if (!mt || !*mt)
        kiln_diag_add(c->d, p, "is required (n1-standard-4, a2-highgpu-1g, ...)");
    else
        nomem(c, kiln_set_str(rf.type, mt));
    json_t *at = json_object_get(ms, "acceleratorType");
    const char *aname = NULL;
    snprintf(p, sizeof p, "%s.machineSpec.acceleratorType", path);
    if (json_is_integer(at)) {
        json_int_t n = json_integer_value(at);
        if (n < 0 || (size_t)n >= N_ACCEL || !accel_names[n])
            kiln_diag_add(c->d, p, "%lld is not an AcceleratorType", (long long)n);
        else if (n > 0)
            aname = accel_names[n];
    } else if (json_is_string(at)) {
        aname = json_string_value(at);
        if (strcmp(aname, "ACCELERATOR_TYPE_UNSPECIFIED") == 0 || !*aname) aname = NULL;
    } else if (at && !json_is_null(at)) {
        kiln_diag_add(c->d, p, "must be an AcceleratorType name or number");
    }
    int64_t count = 0;
    snprintf(p, sizeof p, "%s.machineSpec.acceleratorCount", path);
    opt_int(c, ms, "acceleratorCount", p, &count);
    if (count < 0) kiln_diag_add(c->d, p, "must not be negative");
    if (aname || count > 0) {
        *rf.has_config = true;
        rf.config->has_accelerator_config = true;
        nomem(c, kiln_set_str(&rf.config->accelerator_config.type, aname));
        rf.config->accelerator_config.count = count;
        if (!aname) kiln_diag_add(c->d, p, "needs an acceleratorType");
        if (aname && count == 0) {
            snprintf(p, sizeof p, "%s.machineSpec.acceleratorCount", path);
            kiln_diag_add(c->d, p, "must be at least 1 with an acceleratorType");
        }
    }
}

/* diskSpec: the replica's scratch space. bootDiskSizeGb goes onto
 * <role>Config.diskConfig, which kilnd checks at create against the disk
 * its replicas' working directories are on (kiln__api_job_admit: refused,
 * naming the field, when that disk can never give it). bootDiskType is a
 * class of cloud disk: pd-ssd (Vertex's default) and pd-standard are
 * accepted, as a node's local disk is at least that; the others (hyperdisk
 * and the rest, with provisioned throughput) are refused. */
static void disk_spec(vctx *c, const json_t *ds, const char *path, kiln_replica_config *rc)
{
    static const char *const keys[] = {"bootDiskType", "bootDiskSizeGb", NULL};
    char p[512];
    if (!ds || is_default(ds)) return;
    snprintf(p, sizeof p, "%s.diskSpec", path);
    if (!json_is_object(ds)) {
        kiln_diag_add(c->d, p, "must be {bootDiskType, bootDiskSizeGb}");
        return;
    }
    check_keys(c, ds, p, keys);
    snprintf(p, sizeof p, "%s.diskSpec.bootDiskType", path);
    const char *t = opt_str(c, ds, "bootDiskType", p);
    if (t && *t && strcmp(t, "pd-ssd") != 0 && strcmp(t, "pd-standard") != 0)
        kiln_diag_add(c->d, p,
                      "'%.32s' is refused: a replica's disk is its node's local disk, which "
                      "kiln can promise to be pd-ssd or pd-standard, not a provisioned "
                      "'%.32s'",
                      t, t);
    int64_t gb = 0;
    snprintf(p, sizeof p, "%s.diskSpec.bootDiskSizeGb", path);
    bool sized = opt_int(c, ds, "bootDiskSizeGb", p, &gb);
    if (sized && (gb < 0 || gb > 65536))
        kiln_diag_add(c->d, p, "%lld is out of range (1 to 65536 GB)", (long long)gb);
    else if (gb == 100 && (!t || !*t || strcmp(t, "pd-ssd") == 0))
        ; /* Vertex's default, which the SDK always sends: no request of its own */
    else if (gb > 0 || (t && *t)) {
        rc->has_disk_config = true;
        rc->disk_config.boot_disk_size_gb = gb;
        nomem(c, kiln_set_str(&rc->disk_config.boot_disk_type, t));
    }
}

static void container_spec(vctx *c, const json_t *cs, const char *path, kiln_replica_config *rc)
{
    static const char *const keys[] = {"imageUri", "command", "args", "env", NULL};
    char p[512];
    snprintf(p, sizeof p, "%s.containerSpec", path);
    if (!json_is_object(cs)) {
        kiln_diag_add(c->d, p, "must be {imageUri, command, args, env}");
        return;
    }
    check_keys(c, cs, p, keys);
    snprintf(p, sizeof p, "%s.containerSpec.imageUri", path);
    const char *img = opt_str(c, cs, "imageUri", p);
    if (!img || !*img) kiln_diag_add(c->d, p, "is required");
    nomem(c, kiln_set_str(&rc->image_uri, img));
    snprintf(p, sizeof p, "%s.containerSpec.command", path);
    str_list(c, cs, "command", p, &rc->container_command);
    snprintf(p, sizeof p, "%s.containerSpec.args", path);
    str_list(c, cs, "args", p, &rc->container_args);
    snprintf(p, sizeof p, "%s.containerSpec.env", path);
    env_list(c, cs, p, &rc->env);
}

static bool strv_eq(const kiln_strv *a, const kiln_strv *b)
{
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0) return false;
    return true;
}

static void python_spec(vctx *c, const json_t *ps, const char *path, kiln_replica_config *rc)
{
    static const char *const keys[] = {
        "executorImageUri", "packageUris", "pythonModule", "args", "env", NULL};
    char p[512];
    kiln_strv pkgs = {0};
    snprintf(p, sizeof p, "%s.pythonPackageSpec", path);
    if (!json_is_object(ps)) {
        kiln_diag_add(c->d, p, "must be {executorImageUri, packageUris, pythonModule, args, env}");
        return;
    }
    check_keys(c, ps, p, keys);
    snprintf(p, sizeof p, "%s.pythonPackageSpec.executorImageUri", path);
    const char *img = opt_str(c, ps, "executorImageUri", p);
    if (!img || !*img) kiln_diag_add(c->d, p, "is required");
    nomem(c, kiln_set_str(&rc->image_uri, img));
    snprintf(p, sizeof p, "%s.pythonPackageSpec.pythonModule", path);
    const char *mod = opt_str(c, ps, "pythonModule", p);
    if (!mod || !*mod) kiln_diag_add(c->d, p, "is required");
    /* what Vertex's prebuilt images run: the package installed, then the module */
    nomem(c, kiln_strv_push(&rc->container_command, "python3"));
    nomem(c, kiln_strv_push(&rc->container_command, "-m"));
    nomem(c, kiln_strv_push(&rc->container_command, mod ? mod : ""));
    snprintf(p, sizeof p, "%s.pythonPackageSpec.args", path);
    str_list(c, ps, "args", p, &rc->container_args);
    snprintf(p, sizeof p, "%s.pythonPackageSpec.env", path);
    env_list(c, ps, p, &rc->env);
    snprintf(p, sizeof p, "%s.pythonPackageSpec.packageUris", path);
    str_list(c, ps, "packageUris", p, &pkgs);
    kiln_strv *job_pkgs = &c->job->training_input.package_uris;
    if (!c->have_pkgs) {
        for (size_t i = 0; i < pkgs.n; i++)
            nomem(c, kiln_strv_push(job_pkgs, pkgs.v[i]));
        c->have_pkgs = true;
    } else if (!strv_eq(job_pkgs, &pkgs)) {
        kiln_diag_add(c->d, p,
                      "must be the same list as the first pool's: kiln stages one set of "
                      "packages for the whole job");
    }
    kiln_strv_clear(&pkgs);
}

static void worker_pool(vctx *c, const json_t *wp, size_t k)
{
    static const char *const keys[] = {"containerSpec", "pythonPackageSpec", "machineSpec",
                                       "replicaCount",  "diskSpec",          NULL};
    char path[64], p[512];
    kiln_role r = (kiln_role)k;
    kiln_role_fields rf = kiln_job_role_fields(&c->job->training_input, r);
    snprintf(path, sizeof path, "jobSpec.workerPoolSpecs[%zu]", k);
    if (!json_is_object(wp)) {
        kiln_diag_add(c->d, path, "must be a WorkerPoolSpec object");
        return;
    }
    if (json_object_size(wp) == 0) { /* a placeholder: no replicas of this role */
        if (k == 0) kiln_diag_add(c->d, path, "the first pool (the chief) cannot be empty");
        return;
    }
    check_keys(c, wp, path, keys);
    int64_t n = 0;
    snprintf(p, sizeof p, "%s.replicaCount", path);
    opt_int(c, wp, "replicaCount", p, &n);
    if (k == 0 && n != 1)
        kiln_diag_add(c->d, p, "must be 1 for the first pool (the chief), got %lld", (long long)n);
    else if (k > 0 && n < 1)
        kiln_diag_add(c->d, p, "must be at least 1 (leave the pool {} for none)");
    else if (n > 1000)
        kiln_diag_add(c->d, p, "%lld is more than kiln runs (1000)", (long long)n);
    if (rf.count) *rf.count = n;
    machine_spec(c, json_object_get(wp, "machineSpec"), path, r);
    *rf.has_config = true;
    disk_spec(c, json_object_get(wp, "diskSpec"), path, rf.config);
    const json_t *cs = json_object_get(wp, "containerSpec");
    const json_t *ps = json_object_get(wp, "pythonPackageSpec");
    bool has_cs = cs && !is_default(cs), has_ps = ps && !is_default(ps);
    if (has_cs && has_ps)
        kiln_diag_add(c->d, path, "give one of containerSpec and pythonPackageSpec, not both");
    else if (has_cs)
        container_spec(c, cs, path, rf.config);
    else if (has_ps)
        python_spec(c, ps, path, rf.config);
    else
        kiln_diag_add(c->d, path, "needs a containerSpec or a pythonPackageSpec");
    /* Vertex's Reduction Server (its image in pool 2, what the SDK's
     * reduction_server_container_uri sends) is an all-reduce service for
     * the workers, not a parameter server: run as pool 2 it would be taken
     * for one, so it is refused */
    const char *img = has_cs ? json_string_value(json_object_get(cs, "imageUri")) : NULL;
    if (k == 2 && img && strstr(img, "reductionserver")) {
        snprintf(p, sizeof p, "%s.containerSpec.imageUri", path);
        kiln_diag_add(c->d, p,
                      "'%.128s' is Vertex's Reduction Server: kiln runs pool 2 as parameter "
                      "servers, and its workers all-reduce among themselves (NCCL or MPI, "
                      "docs/collectives.md); leave the pool out (reduction_server_replica_count "
                      "0)",
                      img);
    }
}

/* "3600s", "1.5s": whole seconds and nanos. */
static bool parse_duration(const char *s, kiln_duration *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s)) return false;
    long long sec = strtoll(s, &end, 10);
    long nanos = 0;
    if (errno || sec < 0 || sec > 315576000000LL) return false;
    if (*end == '.') {
        const char *f = end + 1;
        int digits = 0;
        while (isdigit((unsigned char)*f) && digits < 9) {
            nanos = nanos * 10 + (*f++ - '0');
            digits++;
        }
        if (digits == 0) return false;
        for (; digits < 9; digits++)
            nanos *= 10;
        end = (char *)f;
    }
    if (strcmp(end, "s") != 0) return false;
    out->seconds = sec;
    out->nanos = (int32_t)nanos;
    return true;
}

static void scheduling(vctx *c, const json_t *s)
{
    static const char *const keys[] = {"timeout", "restartJobOnWorkerRestart", "disableRetries",
                                       NULL};
    kiln_training_input *ti = &c->job->training_input;
    if (!s || is_default(s)) return;
    if (!json_is_object(s)) {
        kiln_diag_add(c->d, "jobSpec.scheduling", "must be an object");
        return;
    }
    check_keys(c, s, "jobSpec.scheduling", keys);
    const char *t = opt_str(c, s, "timeout", "jobSpec.scheduling.timeout");
    if (t && *t) {
        kiln_duration dur;
        if (!parse_duration(t, &dur) || (dur.seconds == 0 && dur.nanos == 0))
            kiln_diag_add(c->d, "jobSpec.scheduling.timeout",
                          "'%.32s' is not a positive duration like \"7200s\"", t);
        else {
            ti->has_scheduling = true;
            ti->scheduling.has_max_running_time = true;
            ti->scheduling.max_running_time = dur;
        }
    }
    bool restart =
        opt_bool(c, s, "restartJobOnWorkerRestart", "jobSpec.scheduling.restartJobOnWorkerRestart");
    bool noretry = opt_bool(c, s, "disableRetries", "jobSpec.scheduling.disableRetries");
    if (restart && noretry) {
        kiln_diag_add(c->d, "jobSpec.scheduling.restartJobOnWorkerRestart",
                      "cannot be true with disableRetries: a restart is a retry");
        return;
    }
    for (int r = KILN_ROLE_MASTER; r < KILN_ROLE_COUNT && (restart || noretry); r++) {
        kiln_role_fields rf = kiln_job_role_fields(ti, (kiln_role)r);
        if (!*rf.has_config) continue;
        if (noretry) nomem(c, kiln_set_str(&rf.config->restart_policy, "Never"));
        if (restart && r != KILN_ROLE_MASTER)
            nomem(c, kiln_set_str(&rf.config->restart_policy, "OnFailure"));
    }
    if (noretry) {
        ti->has_run_policy = true;
        ti->run_policy.has_backoff_limit = true;
        ti->run_policy.backoff_limit = 0;
    }
}

static void job_spec(vctx *c, const json_t *js)
{
    static const char *const keys[] = {"workerPoolSpecs",      "scheduling",
                                       "baseOutputDirectory",  "serviceAccount",
                                       "persistentResourceId", NULL};
    kiln_training_input *ti = &c->job->training_input;
    if (!json_is_object(js)) {
        kiln_diag_add(c->d, "jobSpec", "is required: a CustomJobSpec with workerPoolSpecs");
        return;
    }
    check_keys(c, js, "jobSpec", keys);
    json_t *pools = json_object_get(js, "workerPoolSpecs"), *wp;
    size_t k;
    if (!json_is_array(pools) || json_array_size(pools) == 0) {
        kiln_diag_add(c->d, "jobSpec.workerPoolSpecs", "is required: one to four WorkerPoolSpecs");
    } else if (json_array_size(pools) > MAX_POOLS) {
        kiln_diag_add(c->d, "jobSpec.workerPoolSpecs",
                      "has %zu pools; a CustomJob has at most 4 (chief, workers, parameter "
                      "servers, evaluators)",
                      json_array_size(pools));
    } else {
        json_array_foreach(pools, k, wp) worker_pool(c, wp, k);
    }
    scheduling(c, json_object_get(js, "scheduling"));
    const char *sa = opt_str(c, js, "serviceAccount", "jobSpec.serviceAccount");
    if (sa && *sa) nomem(c, kiln_set_str(&ti->service_account, sa));
    const char *pr = opt_str(c, js, "persistentResourceId", "jobSpec.persistentResourceId");
    if (pr && *pr) nomem(c, kiln_set_str(&ti->vertex.persistent_resource_id, pr));
    json_t *bod = json_object_get(js, "baseOutputDirectory");
    if (bod && !is_default(bod)) {
        static const char *const bkeys[] = {"outputUriPrefix", NULL};
        if (!json_is_object(bod)) {
            kiln_diag_add(c->d, "jobSpec.baseOutputDirectory", "must be {outputUriPrefix}");
        } else {
            check_keys(c, bod, "jobSpec.baseOutputDirectory", bkeys);
            const char *u =
                opt_str(c, bod, "outputUriPrefix", "jobSpec.baseOutputDirectory.outputUriPrefix");
            if (u && strncmp(u, "gs://", 5) != 0 && u[0] != '/')
                kiln_diag_add(c->d, "jobSpec.baseOutputDirectory.outputUriPrefix",
                              "'%.128s' is not a gs://BUCKET/PATH URI (or an absolute path on "
                              "kilnd's machine)",
                              u);
            else if (u && strstr(u, ".."))
                kiln_diag_add(c->d, "jobSpec.baseOutputDirectory.outputUriPrefix",
                              "'%.128s' may not hold '..'", u);
            else
                nomem(c, kiln_set_str(&ti->vertex.base_output_directory, u));
        }
    }
}

kiln_err kiln_job_from_custom_job(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    static const char *const keys[] = {"displayName", "jobSpec", "labels", NULL};
    static const char *const output_only[] = {"name",    "state",      "createTime", "startTime",
                                              "endTime", "updateTime", "error",      NULL};
    size_t n0 = d->n;
    vctx c = {.d = d};
    kiln_err err;

    *out = NULL;
    json_t *root = vertex_begin(&c, buf, len, "CustomJob", &err);
    if (!root) return err;
    top_keys(d, root, keys, output_only,
             "not a CustomJob field kiln acts on (encryptionSpec and the others are refused "
             "rather than ignored; docs/vertex.md)");
    display_name(&c, root);
    job_spec(&c, json_object_get(root, "jobSpec"));
    job_labels(&c, json_object_get(root, "labels"));
    return vertex_end(&c, root, n0, out);
}

/* ---- back: the Job model as a CustomJobSpec ---- */

static json_t *strv_json(const kiln_strv *v)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < v->n; i++)
        json_array_append_new(a, json_string(v->v[i]));
    return a;
}

static json_t *env_json(const kiln_map *m)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < m->n; i++)
        json_array_append_new(a, json_pack("{s:s,s:s}", "name", m->keys[i], "value", m->vals[i]));
    return a;
}

static bool is_python_pool(const kiln_replica_config *rc)
{
    return rc->container_command.n == 3 && strcmp(rc->container_command.v[0], "python3") == 0 &&
           strcmp(rc->container_command.v[1], "-m") == 0;
}

static json_t *pool_json(const kiln_job *job, kiln_role r)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, r);
    const char *type = kiln_job_role_type(job, r);
    const kiln_training_input *ti = &job->training_input;
    char cnt[32];
    if (!rc && !(type && *type)) return json_object();
    json_t *o = json_object(), *ms = json_object();
    if (!o || !ms) {
        json_decref(o);
        json_decref(ms);
        return NULL;
    }
    if (type && *type) json_object_set_new(ms, "machineType", json_string(type));
    if (rc && rc->has_accelerator_config && rc->accelerator_config.type) {
        json_object_set_new(ms, "acceleratorType", json_string(rc->accelerator_config.type));
        json_object_set_new(ms, "acceleratorCount",
                            json_integer((json_int_t)rc->accelerator_config.count));
    }
    json_object_set_new(o, "machineSpec", ms);
    snprintf(cnt, sizeof cnt, "%lld", (long long)kiln_job_role_count(job, r));
    json_object_set_new(o, "replicaCount", json_string(cnt));
    if (!rc) return o;
    if (rc->has_disk_config) {
        json_t *ds = json_object();
        if (ds && rc->disk_config.boot_disk_type)
            json_object_set_new(ds, "bootDiskType", json_string(rc->disk_config.boot_disk_type));
        if (ds && rc->disk_config.boot_disk_size_gb)
            json_object_set_new(ds, "bootDiskSizeGb",
                                json_integer((json_int_t)rc->disk_config.boot_disk_size_gb));
        json_object_set_new(o, "diskSpec", ds);
    }
    json_t *spec = json_object();
    if (!spec) {
        json_decref(o);
        return NULL;
    }
    if (is_python_pool(rc) && ti->package_uris.n) {
        json_object_set_new(spec, "executorImageUri",
                            json_string(rc->image_uri ? rc->image_uri : ""));
        json_object_set_new(spec, "packageUris", strv_json(&ti->package_uris));
        json_object_set_new(spec, "pythonModule", json_string(rc->container_command.v[2]));
        if (rc->container_args.n) json_object_set_new(spec, "args", strv_json(&rc->container_args));
        if (rc->env.n) json_object_set_new(spec, "env", env_json(&rc->env));
        json_object_set_new(o, "pythonPackageSpec", spec);
    } else {
        if (rc->image_uri) json_object_set_new(spec, "imageUri", json_string(rc->image_uri));
        if (rc->container_command.n)
            json_object_set_new(spec, "command", strv_json(&rc->container_command));
        if (rc->container_args.n) json_object_set_new(spec, "args", strv_json(&rc->container_args));
        if (rc->env.n) json_object_set_new(spec, "env", env_json(&rc->env));
        json_object_set_new(o, "containerSpec", spec);
    }
    return o;
}

void *kiln_job_custom_job_spec(const kiln_job *job)
{
    const kiln_training_input *ti = &job->training_input;
    json_t *js = json_object(), *pools = json_array();
    if (!js || !pools) goto fail;
    /* trailing empty pools are left out, as the clients send them */
    int last = 0;
    for (int r = 1; r < KILN_ROLE_COUNT; r++)
        if (kiln_job_role_count(job, (kiln_role)r) > 0) last = r;
    for (int r = 0; r <= last; r++) {
        json_t *p = kiln_job_role_count(job, (kiln_role)r) > 0 || r == 0
                        ? pool_json(job, (kiln_role)r)
                        : json_object();
        if (!p || json_array_append_new(pools, p) < 0) goto fail;
    }
    json_object_set_new(js, "workerPoolSpecs", pools);
    pools = NULL;
    json_t *sch = json_object();
    if (!sch) goto fail;
    if (ti->has_scheduling && ti->scheduling.has_max_running_time) {
        char b[48];
        if (ti->scheduling.max_running_time.nanos)
            snprintf(b, sizeof b, "%lld.%09ds", (long long)ti->scheduling.max_running_time.seconds,
                     (int)ti->scheduling.max_running_time.nanos);
        else
            snprintf(b, sizeof b, "%llds", (long long)ti->scheduling.max_running_time.seconds);
        json_object_set_new(sch, "timeout", json_string(b));
    }
    bool restart = false; /* OnFailure on any of pools 1-3 */
    for (int r = KILN_ROLE_WORKER; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        restart |= rc && rc->restart_policy && strcmp(rc->restart_policy, "OnFailure") == 0;
    }
    if (restart) json_object_set_new(sch, "restartJobOnWorkerRestart", json_true());
    if (ti->has_run_policy && ti->run_policy.has_backoff_limit && ti->run_policy.backoff_limit == 0)
        json_object_set_new(sch, "disableRetries", json_true());
    if (json_object_size(sch))
        json_object_set_new(js, "scheduling", sch);
    else
        json_decref(sch);
    if (ti->vertex.base_output_directory && *ti->vertex.base_output_directory)
        json_object_set_new(
            js, "baseOutputDirectory",
            json_pack("{s:s}", "outputUriPrefix", ti->vertex.base_output_directory));
    if (ti->service_account && *ti->service_account)
        json_object_set_new(js, "serviceAccount", json_string(ti->service_account));
    if (ti->vertex.persistent_resource_id && *ti->vertex.persistent_resource_id)
        json_object_set_new(js, "persistentResourceId",
                            json_string(ti->vertex.persistent_resource_id));
    return js;
fail:
    json_decref(js);
    json_decref(pools);
    return NULL;
}

void kiln_job_custom_job_field(const char *f, char *out, size_t cap)
{
    static const char *const roles[KILN_ROLE_COUNT] = {"master", "worker", "parameterServer",
                                                       "evaluator"};
    static const struct {
        const char *ml, *vx;
    } fixed[] = {
        {"trainingInput.scheduling.maxRunningTime", "jobSpec.scheduling.timeout"},
        {"trainingInput.packageUris", "jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris"},
        {"trainingInput.vertex.baseOutputDirectory", "jobSpec.baseOutputDirectory.outputUriPrefix"},
        {"trainingInput.vertex.displayName", "displayName"},
        {"trainingInput.serviceAccount", "jobSpec.serviceAccount"},
        {"trainingInput.vertex.persistentResourceId", "jobSpec.persistentResourceId"},
        {"trainingInput.scaleTier", "jobSpec.workerPoolSpecs"},
        {"trainingInput.hyperparameters.maxTrials", "maxTrialCount"},
        {"trainingInput.hyperparameters.maxParallelTrials", "parallelTrialCount"},
        {"trainingInput.hyperparameters.maxFailedTrials", "maxFailedTrialCount"},
        {"trainingInput.hyperparameters.params", "studySpec.parameters"},
        {"trainingInput.hyperparameters.goal", "studySpec.metrics[0].goal"},
        {"trainingInput.hyperparameters.hyperparameterMetricTag", "studySpec.metrics[0].metricId"},
        {"trainingInput.hyperparameters.algorithm", "studySpec.algorithm"},
        {"trainingInput.hyperparameters", "studySpec"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        size_t n = strlen(fixed[i].ml);
        if (strncmp(f, fixed[i].ml, n) == 0) {
            snprintf(out, cap, "%s%s", fixed[i].vx, f + n);
            return;
        }
    }
    if (strncmp(f, "trainingInput.", 14) == 0) {
        const char *t = f + 14;
        for (int r = 0; r < KILN_ROLE_COUNT; r++) {
            size_t n = strlen(roles[r]);
            if (strncmp(t, roles[r], n) != 0) continue;
            const char *rest = t + n;
            const char *to = NULL;
            if (strcmp(rest, "Type") == 0)
                to = ".machineSpec.machineType";
            else if (strcmp(rest, "Count") == 0)
                to = ".replicaCount";
            else if (strncmp(rest, "Config.acceleratorConfig.type", 29) == 0)
                to = ".machineSpec.acceleratorType";
            else if (strncmp(rest, "Config.acceleratorConfig.count", 30) == 0)
                to = ".machineSpec.acceleratorCount";
            else if (strncmp(rest, "Config.acceleratorConfig", 24) == 0)
                to = ".machineSpec";
            else if (strncmp(rest, "Config.imageUri", 15) == 0)
                to = ".containerSpec.imageUri";
            else if (strncmp(rest, "Config.env", 10) == 0)
                to = ".containerSpec.env";
            else if (strncmp(rest, "Config.diskConfig.bootDiskSizeGb", 32) == 0)
                to = ".diskSpec.bootDiskSizeGb";
            else if (strncmp(rest, "Config.diskConfig", 17) == 0)
                to = ".diskSpec";
            else if (strncmp(rest, "Config", 6) == 0)
                to = "";
            if (to) {
                snprintf(out, cap, "jobSpec.workerPoolSpecs[%d]%s", r, to);
                return;
            }
        }
    }
    snprintf(out, cap, "%s", f);
}

/* ---- HyperparameterTuningJob ----
 *   studySpec.metrics[0] {metricId, goal}  -> hyperparameterMetricTag, goal
 *   studySpec.parameters[]                 -> params (double/integer/categorical/
 *                                             discrete value specs, scaleType)
 *   ...conditionalParameterSpecs[]         -> params after their parent, with
 *                                             parentParameterName and its values
 *   studySpec.algorithm                    -> algorithm (GRID_SEARCH, RANDOM_SEARCH;
 *                                             unspecified: kiln's default search)
 *   studySpec.medianAutomatedStoppingSpec  -> enableTrialEarlyStopping (MEDIAN)
 *   studySpec.decayCurveStoppingSpec       -> enableTrialEarlyStopping,
 *                                             earlyStoppingRule DECAY_CURVE
 *   studySpec.measurementSelectionType     -> measurementSelectionType (kiln
 *                                             extension: LAST or BEST_MEASUREMENT)
 *   maxTrialCount, parallelTrialCount, maxFailedTrialCount -> maxTrials,
 *                                             maxParallelTrials, maxFailedTrials
 *   trialJobSpec                           -> as a CustomJob's jobSpec
 * useElapsedDuration: true and the rest are refused. */

static const char *enum_of(vctx *c, const json_t *v, const char *path, const char *const *names,
                           size_t n)
{
    if (!v || json_is_null(v)) return NULL;
    if (json_is_integer(v)) {
        json_int_t k = json_integer_value(v);
        if (k >= 0 && (size_t)k < n && names[k]) return names[k];
    } else if (json_is_string(v)) {
        for (size_t i = 0; i < n; i++)
            if (names[i] && strcmp(names[i], json_string_value(v)) == 0) return names[i];
    }
    kiln_diag_add(c->d, path, "not a value of this enum");
    return NULL;
}

static double num_of(vctx *c, const json_t *o, const char *key, const char *path, bool *ok)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0; /* proto3: an omitted double is 0 */
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_string(v)) { /* int64 travels as a string */
        char *end;
        double d = strtod(json_string_value(v), &end);
        if (*json_string_value(v) && !*end) return d;
    }
    kiln_diag_add(c->d, path, "%s must be a number (or a decimal string)", key);
    *ok = false;
    return 0;
}

/* Vertex's conditionalParameterSpecs, flattened into kiln's params parent
 * first (kiln_parameter_spec.parent_parameter). kiln's caps: how deep a
 * conditional parameter sits under top-level ones, and how many
 * ParameterSpecs a study holds in all, conditional ones included (a study
 * of more than KILN_TUNE_MAX_PARAMS is then refused by kiln_tune_check). */
#define VX_COND_MAX_DEPTH 8
#define VX_MAX_PARAMS     100

/* How many ParameterSpecs `p` is with those under it, to VX_COND_MAX_DEPTH
 * (deeper ones are refused where they are met). */
static size_t count_params(const json_t *p, int depth)
{
    json_t *cs = json_object_get(p, "conditionalParameterSpecs"), *e;
    size_t n = 1, k;
    if (depth >= VX_COND_MAX_DEPTH || !json_is_array(cs)) return n;
    json_array_foreach(cs, k, e) n += count_params(json_object_get(e, "parameterSpec"), depth + 1);
    return n;
}

static void study_param(vctx *c, const json_t *p, const char *path, kiln_hyperparameter_spec *hp,
                        int depth);

/* The values of a parent's condition ({values: [...]}, numbers or decimal
 * strings) into ps->parent_values; each must be one the parent takes. */
static void cond_numbers(vctx *c, const json_t *cv, const char *path,
                         const kiln_parameter_spec *parent, kiln_parameter_spec *ps)
{
    static const char *const vkeys[] = {"values", NULL};
    bool integer = strcmp(parent->type, "INTEGER") == 0;
    char f[512];
    check_keys(c, cv, path, vkeys);
    json_t *a = json_object_get(cv, "values"), *e;
    size_t k;
    snprintf(f, sizeof f, "%.420s.values", path);
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 1000) {
        kiln_diag_add(c->d, f, "must be a list of 1 to 1000 values of the parent");
        return;
    }
    ps->parent_values = calloc(json_array_size(a), sizeof(double));
    if (!ps->parent_values) {
        c->nomem = true;
        return;
    }
    json_array_foreach(a, k, e)
    {
        char *end = NULL;
        double v = NAN;
        if (json_is_number(e))
            v = json_number_value(e);
        else if (json_is_string(e) && *json_string_value(e) &&
                 ((v = strtod(json_string_value(e), &end)), *end))
            v = NAN; /* int64 and doubles may travel as strings in proto3 JSON */
        bool takes = false;
        if (integer) takes = v == floor(v) && v >= parent->min_value && v <= parent->max_value;
        for (size_t d = 0; !integer && d < parent->n_discrete_values; d++)
            takes = takes || parent->discrete_values[d] == v;
        if (!takes)
            kiln_diag_add(c->d, f, "item %zu is not a value parameter '%.64s' takes", k,
                          parent->parameter_name ? parent->parameter_name : "");
        ps->parent_values[k] = v;
    }
    ps->n_parent_values = json_array_size(a);
}

/* params[pi]'s conditionalParameterSpecs: each child follows its parent
 * (and its own children follow it) in hp->params. */
static void study_conditions(vctx *c, const json_t *cs, const char *path,
                             kiln_hyperparameter_spec *hp, size_t pi, int depth)
{
    static const char *const keys[] = {"parameterSpec", "parentDiscreteValues", "parentIntValues",
                                       "parentCategoricalValues", NULL};
    static const struct {
        const char *type, *key;
    } conds[] = {{"DISCRETE", "parentDiscreteValues"},
                 {"INTEGER", "parentIntValues"},
                 {"CATEGORICAL", "parentCategoricalValues"}};
    char f[512], g[512];
    json_t *e;
    size_t k;
    const kiln_parameter_spec *parent = &hp->params[pi]; /* hp->params is not moved */
    if (!parent->type) return;                           /* its own refusal said why */
    if (strcmp(parent->type, "DOUBLE") == 0) {
        kiln_diag_add(c->d, path,
                      "a DOUBLE parameter cannot be a parent (Vertex refuses it too): its "
                      "children would hang on single points of a continuous range; give the "
                      "parent as a discreteValueSpec");
        return;
    }
    if (!json_is_array(cs)) {
        kiln_diag_add(c->d, path, "must be a list of ConditionalParameterSpecs");
        return;
    }
    if (depth + 1 >= VX_COND_MAX_DEPTH) {
        kiln_diag_add(c->d, path,
                      "conditional parameters nest at most %d deep in kiln (here: one more)",
                      VX_COND_MAX_DEPTH - 1);
        return;
    }
    json_array_foreach(cs, k, e)
    {
        snprintf(f, sizeof f, "%.420s[%zu]", path, k);
        if (!json_is_object(e)) {
            kiln_diag_add(c->d, f, "must be a ConditionalParameterSpec object");
            continue;
        }
        check_keys(c, e, f, keys);
        const char *want = NULL;
        int given = 0;
        for (int n = 0; n < 3; n++) {
            if (strcmp(parent->type, conds[n].type) == 0) want = conds[n].key;
            given += !is_default(json_object_get(e, conds[n].key));
        }
        const json_t *cv = want ? json_object_get(e, want) : NULL;
        if (given != 1 || is_default(cv)) {
            kiln_diag_add(c->d, f, "give %s (the parent '%.64s' is %s), and only it",
                          want ? want : "?", parent->parameter_name ? parent->parameter_name : "",
                          parent->type);
            continue;
        }
        size_t ci = hp->n_params;
        snprintf(g, sizeof g, "%.440s.parameterSpec", f);
        study_param(c, json_object_get(e, "parameterSpec"), g, hp, depth + 1);
        if (hp->n_params == ci) continue; /* not decoded (refused) */
        parent = &hp->params[pi];
        kiln_parameter_spec *ps = &hp->params[ci];
        nomem(c, kiln_set_str(&ps->parent_parameter, parent->parameter_name));
        snprintf(g, sizeof g, "%.440s.%s", f, want);
        if (strcmp(parent->type, "CATEGORICAL") == 0) {
            static const char *const vkeys[] = {"values", NULL};
            check_keys(c, cv, g, vkeys);
            snprintf(g, sizeof g, "%.440s.%s.values", f, want);
            str_list(c, cv, "values", g, &ps->parent_categorical_values);
            if (ps->parent_categorical_values.n == 0)
                kiln_diag_add(c->d, g, "must list at least one of the parent's values");
            for (size_t v = 0; v < ps->parent_categorical_values.n; v++) {
                bool takes = false;
                for (size_t w = 0; w < parent->categorical_values.n; w++)
                    takes = takes || strcmp(parent->categorical_values.v[w],
                                            ps->parent_categorical_values.v[v]) == 0;
                if (!takes)
                    kiln_diag_add(c->d, g, "'%.64s' is not a value parameter '%.64s' takes",
                                  ps->parent_categorical_values.v[v],
                                  parent->parameter_name ? parent->parameter_name : "");
            }
        } else {
            cond_numbers(c, cv, g, parent, ps);
        }
    }
}

/* Decodes ParameterSpec `p` into hp->params[hp->n_params] (room is made
 * for count_params of every top-level one) and its conditional ones after
 * it; `depth`: how many parents it has. */
static void study_param(vctx *c, const json_t *p, const char *path, kiln_hyperparameter_spec *hp,
                        int depth)
{
    static const char *const keys[] = {
        "parameterId",       "doubleValueSpec", "integerValueSpec",          "categoricalValueSpec",
        "discreteValueSpec", "scaleType",       "conditionalParameterSpecs", NULL};
    static const char *const scales[] = {"SCALE_TYPE_UNSPECIFIED", "UNIT_LINEAR_SCALE",
                                         "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"};
    char f[512];
    if (!json_is_object(p)) {
        kiln_diag_add(c->d, path, "must be a ParameterSpec object");
        return;
    }
    size_t pi = hp->n_params++;
    kiln_parameter_spec *ps = &hp->params[pi];
    check_keys(c, p, path, keys);
    snprintf(f, sizeof f, "%.420s.parameterId", path);
    const char *id = opt_str(c, p, "parameterId", f);
    if (!id || !*id) kiln_diag_add(c->d, f, "is required");
    for (size_t k = 0; id && *id && k < pi; k++)
        if (hp->params[k].parameter_name && strcmp(hp->params[k].parameter_name, id) == 0) {
            kiln_diag_add(c->d, f,
                          "'%.64s' names another parameter of this study too: names are unique "
                          "across the whole study, conditional parameters included",
                          id);
            break;
        }
    nomem(c, kiln_set_str(&ps->parameter_name, id));
    snprintf(f, sizeof f, "%.420s.scaleType", path);
    const char *sc = enum_of(c, json_object_get(p, "scaleType"), f, scales, 4);
    if (sc && strcmp(sc, "SCALE_TYPE_UNSPECIFIED") != 0)
        nomem(c, kiln_set_str(&ps->scale_type, sc));
    const json_t *dv = json_object_get(p, "doubleValueSpec");
    const json_t *iv = json_object_get(p, "integerValueSpec");
    const json_t *cv = json_object_get(p, "categoricalValueSpec");
    const json_t *sv = json_object_get(p, "discreteValueSpec");
    int kinds = !!dv + !!iv + !!cv + !!sv;
    if (kinds != 1) {
        kiln_diag_add(c->d, path,
                      "give exactly one of doubleValueSpec, integerValueSpec, "
                      "categoricalValueSpec, discreteValueSpec");
        return;
    }
    bool ok = true;
    if (dv || iv) {
        const json_t *v = dv ? dv : iv;
        static const char *const vkeys[] = {"minValue", "maxValue", NULL};
        snprintf(f, sizeof f, "%.420s.%s", path, dv ? "doubleValueSpec" : "integerValueSpec");
        check_keys(c, v, f, vkeys);
        nomem(c, kiln_set_str(&ps->type, dv ? "DOUBLE" : "INTEGER"));
        ps->min_value = num_of(c, v, "minValue", f, &ok);
        ps->max_value = num_of(c, v, "maxValue", f, &ok);
    } else if (cv) {
        static const char *const vkeys[] = {"values", NULL};
        snprintf(f, sizeof f, "%.420s.categoricalValueSpec", path);
        check_keys(c, cv, f, vkeys);
        nomem(c, kiln_set_str(&ps->type, "CATEGORICAL"));
        snprintf(f, sizeof f, "%.420s.categoricalValueSpec.values", path);
        str_list(c, cv, "values", f, &ps->categorical_values);
    } else {
        static const char *const vkeys[] = {"values", NULL};
        snprintf(f, sizeof f, "%.420s.discreteValueSpec", path);
        check_keys(c, sv, f, vkeys);
        nomem(c, kiln_set_str(&ps->type, "DISCRETE"));
        json_t *a = json_object_get(sv, "values"), *e;
        size_t k;
        snprintf(f, sizeof f, "%.420s.discreteValueSpec.values", path);
        if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 1000) {
            kiln_diag_add(c->d, f, "must be a list of 1 to 1000 numbers");
            return;
        }
        ps->discrete_values = calloc(json_array_size(a), sizeof(double));
        if (!ps->discrete_values) {
            c->nomem = true;
            return;
        }
        json_array_foreach(a, k, e)
        {
            char *end = NULL;
            if (json_is_number(e))
                ps->discrete_values[k] = json_number_value(e);
            else if (json_is_string(e) && *json_string_value(e) &&
                     (ps->discrete_values[k] = strtod(json_string_value(e), &end), !*end))
                ; /* a double may travel as a string in proto3 JSON */
            else
                kiln_diag_add(c->d, f, "item %zu must be a number", k);
        }
        ps->n_discrete_values = json_array_size(a);
    }
    json_t *cs = json_object_get(p, "conditionalParameterSpecs");
    snprintf(f, sizeof f, "%.420s.conditionalParameterSpecs", path);
    if (!is_default(cs)) study_conditions(c, cs, f, hp, pi, depth);
}

static void study_spec(vctx *c, const json_t *ss)
{
    static const char *const keys[] = {"metrics",
                                       "parameters",
                                       "algorithm",
                                       "medianAutomatedStoppingSpec",
                                       "decayCurveStoppingSpec",
                                       "measurementSelectionType",
                                       NULL};
    static const char *const goals[] = {"GOAL_TYPE_UNSPECIFIED", "MAXIMIZE", "MINIMIZE"};
    static const char *const algos[] = {"ALGORITHM_UNSPECIFIED", NULL, "GRID_SEARCH",
                                        "RANDOM_SEARCH"};
    static const char *const msel[] = {"MEASUREMENT_SELECTION_TYPE_UNSPECIFIED", "LAST_MEASUREMENT",
                                       "BEST_MEASUREMENT"};
    kiln_hyperparameter_spec *hp = &c->job->training_input.hyperparameters;
    if (!json_is_object(ss)) {
        kiln_diag_add(c->d, "studySpec", "is required: {metrics, parameters, ...}");
        return;
    }
    check_keys(c, ss, "studySpec", keys);
    json_t *ms = json_object_get(ss, "metrics");
    if (!json_is_array(ms) || json_array_size(ms) != 1) {
        kiln_diag_add(c->d, "studySpec.metrics",
                      "must hold exactly one metric: kiln's studies have one objective");
    } else {
        static const char *const mkeys[] = {"metricId", "goal", NULL};
        json_t *m = json_array_get(ms, 0);
        check_keys(c, m, "studySpec.metrics[0]", mkeys);
        const char *id = opt_str(c, m, "metricId", "studySpec.metrics[0].metricId");
        if (!id || !*id) kiln_diag_add(c->d, "studySpec.metrics[0].metricId", "is required");
        nomem(c, kiln_set_str(&hp->hyperparameter_metric_tag, id));
        const char *g =
            enum_of(c, json_object_get(m, "goal"), "studySpec.metrics[0].goal", goals, 3);
        if (!g || strcmp(g, "GOAL_TYPE_UNSPECIFIED") == 0)
            kiln_diag_add(c->d, "studySpec.metrics[0].goal", "is required: MAXIMIZE or MINIMIZE");
        else
            nomem(c, kiln_set_str(&hp->goal, g));
    }
    json_t *ps = json_object_get(ss, "parameters"), *p;
    size_t i;
    if (!json_is_array(ps) || json_array_size(ps) == 0 || json_array_size(ps) > 100) {
        kiln_diag_add(c->d, "studySpec.parameters", "must hold 1 to 100 ParameterSpecs");
    } else {
        size_t n = 0;
        json_array_foreach(ps, i, p) n += count_params(p, 0);
        if (n > VX_MAX_PARAMS) {
            kiln_diag_add(c->d, "studySpec.parameters",
                          "holds %zu ParameterSpecs with the conditional ones: at most %d", n,
                          VX_MAX_PARAMS);
            return;
        }
        hp->params = calloc(n, sizeof *hp->params);
        if (!hp->params) {
            c->nomem = true;
            return;
        }
        json_array_foreach(ps, i, p)
        {
            char path[64];
            snprintf(path, sizeof path, "studySpec.parameters[%zu]", i);
            study_param(c, p, path, hp, 0);
        }
    }
    const char *a = enum_of(c, json_object_get(ss, "algorithm"), "studySpec.algorithm", algos, 4);
    if (a && strcmp(a, "ALGORITHM_UNSPECIFIED") != 0) nomem(c, kiln_set_str(&hp->algorithm, a));
    const char *sel = enum_of(c, json_object_get(ss, "measurementSelectionType"),
                              "studySpec.measurementSelectionType", msel, 3);
    /* unspecified is Vertex's LAST_MEASUREMENT, as AI Platform's rule */
    if (sel && strcmp(sel, "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED") != 0)
        nomem(c, kiln_set_str(&hp->measurement_selection, sel));
    /* the automated stopping spec, a oneof: the median rule or the decay
     * curve (kiln's rule: kiln_study_should_stop) */
    static const char *const stops[] = {"medianAutomatedStoppingSpec", "decayCurveStoppingSpec"};
    for (int k = 0; k < 2; k++) {
        json_t *sp = json_object_get(ss, stops[k]);
        char f[96];
        snprintf(f, sizeof f, "studySpec.%s", stops[k]);
        if (!sp || json_is_null(sp)) continue;
        static const char *const mkeys[] = {"useElapsedDuration", NULL};
        if (!json_is_object(sp)) {
            kiln_diag_add(c->d, f, "must be an object");
            continue;
        }
        if (hp->enable_trial_early_stopping) {
            kiln_diag_add(c->d, f,
                          "give one of medianAutomatedStoppingSpec, "
                          "decayCurveStoppingSpec");
            continue;
        }
        check_keys(c, sp, f, mkeys);
        snprintf(f, sizeof f, "studySpec.%s.useElapsedDuration", stops[k]);
        if (opt_bool(c, sp, "useElapsedDuration", f))
            kiln_diag_add(c->d, f, "kiln compares trials at training steps, not elapsed time");
        hp->enable_trial_early_stopping = true;
        if (k == 1) nomem(c, kiln_set_str(&hp->early_stopping_rule, "DECAY_CURVE"));
    }
}

static void int_field(vctx *c, const json_t *root, const char *key, int64_t *out)
{
    int64_t v = 0;
    if (opt_int(c, root, key, key, &v) && (v < 0 || v > 1000000))
        kiln_diag_add(c->d, key, "%lld is out of range", (long long)v);
    else
        *out = v;
}

/* The violations from `from` on named under `to` instead of jobSpec. */
static void reprefix(kiln_diag *d, size_t from, const char *to)
{
    for (size_t i = from; i < d->n; i++) {
        char f[600];
        const char *old = d->v[i].field ? d->v[i].field : "";
        if (strncmp(old, "jobSpec", 7) != 0) continue;
        snprintf(f, sizeof f, "%s%s", to, old + 7);
        char *nf = strdup(f);
        if (!nf) continue;
        free(d->v[i].field);
        d->v[i].field = nf;
    }
}

kiln_err kiln_job_from_hp_tuning_job(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    static const char *const keys[] = {
        "displayName",         "studySpec",    "maxTrialCount", "parallelTrialCount",
        "maxFailedTrialCount", "trialJobSpec", "labels",        NULL};
    static const char *const output_only[] = {"name",      "state",   "createTime",
                                              "startTime", "endTime", "updateTime",
                                              "error",     "trials",  NULL};
    size_t n0 = d->n;
    vctx c = {.d = d};
    kiln_err err;

    *out = NULL;
    json_t *root = vertex_begin(&c, buf, len, "HyperparameterTuningJob", &err);
    if (!root) return err;
    top_keys(d, root, keys, output_only,
             "not a HyperparameterTuningJob field kiln acts on (docs/vertex.md)");
    kiln_training_input *ti = &c.job->training_input;
    ti->has_hyperparameters = true;
    display_name(&c, root);
    study_spec(&c, json_object_get(root, "studySpec"));
    int_field(&c, root, "maxTrialCount", &ti->hyperparameters.max_trials);
    int_field(&c, root, "parallelTrialCount", &ti->hyperparameters.max_parallel_trials);
    int_field(&c, root, "maxFailedTrialCount", &ti->hyperparameters.max_failed_trials);
    /* the trial's job: a CustomJobSpec, its violations under trialJobSpec */
    size_t before = d->n;
    job_spec(&c, json_object_get(root, "trialJobSpec"));
    reprefix(d, before, "trialJobSpec");
    job_labels(&c, json_object_get(root, "labels"));
    return vertex_end(&c, root, n0, out);
}

/* A Model as a client sends it: a pipeline's modelToUpload (path
 * "modelToUpload") or models:upload's model (path "model", where
 * artifactUri is read too: an uploaded Model's files are wherever the
 * client put them, a pipeline's are its baseOutputDirectory/model/). Kept
 * as sent and shown on the Model; kiln serves no model, so the serving
 * fields are metadata (docs/vertex.md says so). Returns the Model as
 * compact JSON (the caller's), or NULL with the violations in c->d. */
static char *model_check(vctx *c, const json_t *m, const char *path, bool upload)
{
    /* an upload's fields; a pipeline's without the first */
    static const char *const keys[] = {"artifactUri",        "displayName",     "description",
                                       "containerSpec",      "labels",          "versionAliases",
                                       "versionDescription", "predictSchemata", NULL};
    char f[64];
    size_t n0 = c->d->n;
    if (!json_is_object(m)) {
        kiln_diag_add(c->d, path, "must be a Model object");
        return NULL;
    }
    check_keys(c, m, path, upload ? keys : keys + 1);
    snprintf(f, sizeof f, "%s.displayName", path);
    const char *dn = opt_str(c, m, "displayName", f);
    if (!dn || !*dn || strlen(dn) > 128)
        kiln_diag_add(c->d, f, "is required (at most 128 characters)");
    const json_t *cs = json_object_get(m, "containerSpec");
    snprintf(f, sizeof f, "%s.containerSpec", path);
    if (cs && !json_is_object(cs)) kiln_diag_add(c->d, f, "must be a ModelContainerSpec");
    snprintf(f, sizeof f, "%s.artifactUri", path);
    const char *au = upload ? opt_str(c, m, "artifactUri", f) : NULL;
    if (au && *au && (strncmp(au, "gs://", 5) != 0 || strlen(au) > 1024))
        kiln_diag_add(c->d, f,
                      "'%.160s': must be a gs:// URI (at most 1024 bytes) in kilnd's staging "
                      "store",
                      au);
    char *s = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
    if (!s || strlen(s) > 16384) {
        if (s) kiln_diag_add(c->d, path, "is larger than 16384 bytes");
        c->nomem |= !s;
        free(s);
        return NULL;
    }
    if (c->d->n != n0) {
        free(s);
        return NULL;
    }
    return s;
}

/* modelToUpload: the Model a pipeline's success makes (its artifactUri,
 * baseOutputDirectory/model/, is where the job wrote its model). */
static void model_to_upload(vctx *c, const json_t *m)
{
    if (!m || is_default(m)) return;
    char *s = model_check(c, m, "modelToUpload", false);
    if (s) nomem(c, kiln_set_str(&c->job->training_input.vertex.model_to_upload, s));
    free(s);
}

/* Vertex's modelId rule: 1-63 of [a-z0-9_-], the first a letter (so that
 * it never reads as the number of a pipeline's Model). */
bool kiln_vertex_model_id_valid(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !(s[0] >= 'a' && s[0] <= 'z')) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
              s[i] == '-'))
            return false;
    return true;
}

void kiln_vertex_upload_clear(kiln_vertex_upload *u)
{
    free(u->model);
    free(u->model_id);
    free(u->artifact_uri);
    *u = (kiln_vertex_upload){0};
}

/* ---- UploadModelRequest (models:upload) ----
 *   model       -> the Model (model_check, artifactUri read)
 *   modelId     -> its id
 * parentModel (versions) and serviceAccount are refused by name. */
kiln_err kiln_vertex_upload_parse(const char *buf, size_t len, kiln_vertex_upload *out,
                                  kiln_diag *d)
{
    static const char *const keys[] = {"model", "modelId", NULL};
    static const char *const none[] = {NULL};
    size_t n0 = d->n;
    vctx c = {.d = d};
    json_error_t je;
    json_t *root = NULL;
    kiln_err err = KILN_EINVAL;

    *out = (kiln_vertex_upload){0};
    if (len > KILN_SPEC_MAX_BYTES) {
        kiln_diag_add(d, NULL, "the UploadModelRequest is larger than %u bytes",
                      KILN_SPEC_MAX_BYTES);
        err = KILN_ELIMIT;
        goto out;
    }
    root = load_proto3(buf, len, &je, d);
    if (!root) {
        kiln_diag_add(d, NULL, "not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        goto out;
    }
    if (!json_is_object(root)) {
        kiln_diag_add(d, NULL, "an UploadModelRequest is a JSON object");
        goto out;
    }
    if (!is_default(json_object_get(root, "parentModel")))
        kiln_diag_add(d, "parentModel",
                      "kilnd keeps one version of a Model: upload a new Model (a new modelId) "
                      "instead of a version");
    if (!is_default(json_object_get(root, "serviceAccount")))
        kiln_diag_add(d, "serviceAccount", "kilnd reads the staging store as itself");
    json_object_del(root, "parentModel");
    json_object_del(root, "serviceAccount");
    top_keys(d, root, keys, none, "not an UploadModelRequest field kiln acts on (docs/vertex.md)");
    const json_t *m = json_object_get(root, "model");
    if (is_default(m))
        kiln_diag_add(d, "model", "is required");
    else if ((out->model = model_check(&c, m, "model", true)) != NULL) {
        const char *au = json_string_value(json_object_get(m, "artifactUri"));
        if (au && *au) nomem(&c, kiln_set_str(&out->artifact_uri, au));
    }
    const char *id = opt_str(&c, root, "modelId", "modelId");
    if (id && *id) {
        if (!kiln_vertex_model_id_valid(id, strlen(id)))
            kiln_diag_add(d, "modelId",
                          "'%.80s': 1-63 of [a-z0-9_-], the first a letter (Vertex's rule)", id);
        else
            nomem(&c, kiln_set_str(&out->model_id, id));
    }
    if (c.nomem)
        err = KILN_ENOMEM;
    else if (d->n == n0 && !d->dropped)
        err = KILN_OK;
out:
    json_decref(root);
    if (err != KILN_OK) kiln_vertex_upload_clear(out);
    return err;
}

/* ---- TrainingPipeline ----
 *   displayName, labels        -> as a CustomJob's
 *   trainingTaskDefinition     -> must be KILN_VERTEX_CUSTOM_TASK
 *   trainingTaskInputs         -> a CustomJob's jobSpec (a Struct: the SDK's keys
 *                                 are mostly snake_case, its numbers doubles)
 *   modelToUpload              -> vertex.modelToUpload (the Model of its success)
 * inputDataConfig (managed datasets) and the rest are refused by name. */
kiln_err kiln_job_from_training_pipeline(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    static const char *const keys[] = {"displayName", "trainingTaskDefinition",
                                       "trainingTaskInputs", "labels", NULL};
    static const char *const output_only[] = {
        "name",       "state", "createTime",           "startTime", "endTime",
        "updateTime", "error", "trainingTaskMetadata", NULL};
    size_t n0 = d->n;
    vctx c = {.d = d};
    kiln_err err;

    *out = NULL;
    json_t *root = vertex_begin(&c, buf, len, "TrainingPipeline", &err);
    if (!root) return err;
    model_to_upload(&c, json_object_get(root, "modelToUpload"));
    if (!is_default(json_object_get(root, "inputDataConfig")))
        kiln_diag_add(d, "inputDataConfig",
                      "kilnd has no managed datasets: read the data from the staging store in "
                      "the training code");
    json_object_del(root, "modelToUpload");
    json_object_del(root, "inputDataConfig");
    top_keys(d, root, keys, output_only,
             "not a TrainingPipeline field kiln acts on (docs/vertex.md)");
    kiln_training_input *ti = &c.job->training_input;
    display_name(&c, root);
    const char *def = opt_str(&c, root, "trainingTaskDefinition", "trainingTaskDefinition");
    if (!def || strcmp(def, KILN_VERTEX_CUSTOM_TASK) != 0)
        kiln_diag_add(d, "trainingTaskDefinition",
                      "'%.160s': kiln runs the custom task only (" KILN_VERTEX_CUSTOM_TASK
                      ", what CustomTrainingJob and its siblings send); AutoML tasks are not "
                      "served",
                      def ? def : "");
    size_t before = d->n;
    job_spec(&c, json_object_get(root, "trainingTaskInputs"));
    reprefix(d, before, "trainingTaskInputs");
    if (ti->vertex.model_to_upload && !ti->vertex.base_output_directory)
        kiln_diag_add(d, "trainingTaskInputs.baseOutputDirectory",
                      "is required with modelToUpload: the Model's artifactUri is its model/");
    job_labels(&c, json_object_get(root, "labels"));
    return vertex_end(&c, root, n0, out);
}

/* Whether params[c] hangs under params[p] (listed before it): its
 * parentParameterName names p (names are unique: kiln_tune_check). */
static bool child_of(const kiln_hyperparameter_spec *hp, size_t c, size_t p)
{
    const char *pn = hp->params[c].parent_parameter, *n = hp->params[p].parameter_name;
    return c > p && pn && n && strcmp(pn, n) == 0;
}

/* params[i] as a Vertex ParameterSpec, with the parameters under it as its
 * conditionalParameterSpecs (the flattened tree folded back). */
static json_t *param_spec_json(const kiln_hyperparameter_spec *hp, size_t i)
{
    const kiln_parameter_spec *p = &hp->params[i];
    json_t *o = json_pack("{s:s}", "parameterId", p->parameter_name ? p->parameter_name : "");
    const char *t = p->type ? p->type : "";
    if (!o) return NULL;
    if (strcmp(t, "DOUBLE") == 0)
        json_object_set_new(
            o, "doubleValueSpec",
            json_pack("{s:f,s:f}", "minValue", p->min_value, "maxValue", p->max_value));
    else if (strcmp(t, "INTEGER") == 0) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%lld", (long long)p->min_value);
        snprintf(hi, sizeof hi, "%lld", (long long)p->max_value);
        json_object_set_new(o, "integerValueSpec",
                            json_pack("{s:s,s:s}", "minValue", lo, "maxValue", hi));
    } else if (strcmp(t, "CATEGORICAL") == 0) {
        json_object_set_new(o, "categoricalValueSpec",
                            json_pack("{s:o}", "values", strv_json(&p->categorical_values)));
    } else {
        json_t *a = json_array();
        for (size_t k = 0; a && k < p->n_discrete_values; k++)
            json_array_append_new(a, json_real(p->discrete_values[k]));
        json_object_set_new(o, "discreteValueSpec", json_pack("{s:o}", "values", a));
    }
    if (p->scale_type && strcmp(p->scale_type, "NONE") != 0)
        json_object_set_new(o, "scaleType", json_string(p->scale_type));
    json_t *cs = json_array();
    for (size_t c = i + 1; cs && c < hp->n_params; c++) {
        const kiln_parameter_spec *ch = &hp->params[c];
        if (!child_of(hp, c, i)) continue;
        json_t *vals = json_array(), *cond;
        const char *key = strcmp(t, "CATEGORICAL") == 0 ? "parentCategoricalValues"
                          : strcmp(t, "INTEGER") == 0   ? "parentIntValues"
                                                        : "parentDiscreteValues";
        if (strcmp(t, "CATEGORICAL") == 0) {
            json_decref(vals);
            vals = strv_json(&ch->parent_categorical_values);
        }
        for (size_t k = 0; vals && strcmp(t, "CATEGORICAL") != 0 && k < ch->n_parent_values; k++) {
            char iv[32]; /* int64 travels as a string */
            snprintf(iv, sizeof iv, "%lld", (long long)ch->parent_values[k]);
            json_array_append_new(vals, strcmp(t, "INTEGER") == 0
                                            ? json_string(iv)
                                            : json_real(ch->parent_values[k]));
        }
        cond = json_pack("{s:o,s:{s:o}}", "parameterSpec", param_spec_json(hp, c), key, "values",
                         vals ? vals : json_array());
        if (cond) json_array_append_new(cs, cond);
    }
    if (cs && json_array_size(cs))
        json_object_set_new(o, "conditionalParameterSpecs", cs);
    else
        json_decref(cs);
    return o;
}

void *kiln_job_study_spec(const kiln_job *job)
{
    const kiln_hyperparameter_spec *hp = &job->training_input.hyperparameters;
    json_t *ss = json_object(), *ps = json_array();
    if (!ss || !ps) {
        json_decref(ss);
        json_decref(ps);
        return NULL;
    }
    json_object_set_new(
        ss, "metrics",
        json_pack("[{s:s,s:s}]", "metricId",
                  hp->hyperparameter_metric_tag ? hp->hyperparameter_metric_tag : "", "goal",
                  hp->goal ? hp->goal : "GOAL_TYPE_UNSPECIFIED"));
    for (size_t i = 0; i < hp->n_params; i++) {
        const char *pn = hp->params[i].parent_parameter;
        if (pn && *pn) continue; /* under its parent */
        json_t *o = param_spec_json(hp, i);
        if (o) json_array_append_new(ps, o);
    }
    json_object_set_new(ss, "parameters", ps);
    if (hp->algorithm && strcmp(hp->algorithm, "ALGORITHM_UNSPECIFIED") != 0)
        json_object_set_new(ss, "algorithm", json_string(hp->algorithm));
    if (hp->enable_trial_early_stopping)
        json_object_set_new(ss,
                            hp->early_stopping_rule &&
                                    strcmp(hp->early_stopping_rule, "DECAY_CURVE") == 0
                                ? "decayCurveStoppingSpec"
                                : "medianAutomatedStoppingSpec",
                            json_object());
    if (hp->measurement_selection)
        json_object_set_new(ss, "measurementSelectionType", json_string(hp->measurement_selection));
    return ss;
}
