/* src/api/api_jobs.c - the ml API's projects.jobs resource. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kiln/queues.h"
#include "api/api_int.h"
#include "exec/slurm/slurm.h"
#include "exec/supervisor/qwait.h"
#include "util/base64.h"
#include "kiln/tune.h"
#include "util/utf8.h"

#define LOG_CHUNK   (256u * 1024u)
#define CACHE_SLOTS 4096

/* Rendered GET responses keyed by (project/job, seq, version): a job's
 * version changes with every write to it, so an entry is either exact or
 * skipped. Only finished jobs are cached: a QUEUED job's jobPosition and a
 * running job's consumedMLUnits move without a write to them (a cached
 * running job showed the units of its first render until its next write). */
typedef struct centry {
    char *key;
    int64_t seq, version;
    char *body;
    size_t len;
} centry;

struct kiln_api_cache {
    pthread_mutex_t mu;
    centry slot[CACHE_SLOTS];
};

static size_t cache_slot(const char *project, const char *id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = project; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ '/') * 1099511628211ull;
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (size_t)(h % CACHE_SLOTS);
}

/* ---------- the Job resource as the API shows it ---------- */

/* The etag is a `bytes` field in the ml v1 API: on the wire it is base64, and
 * gcloud (apitools) decodes it, failing on kiln's raw "seq-version". The
 * bytes are that string; the encoding is base64url with padding, what
 * apitools writes back and what Google's JSON mapping accepts. */
static void etag_encode(const char *raw, char *out, size_t cap)
{
    size_t n = strlen(raw);
    if (kiln_b64_len(n, KILN_B64_URL) < cap)
        kiln_b64_encode(raw, n, KILN_B64_URL, out);
    else if (cap)
        out[0] = '\0'; /* never: etags are "seq-version", under 48 bytes */
}

/* Whether a client's etag names this version: the base64 form (standard or
 * url-safe alphabet), or the raw "seq-version" that kiln sent before it
 * encoded etags, still accepted so that older `kiln` clients keep working. */
static bool etag_matches(const char *sent, const char *raw)
{
    char enc[96], norm[96];
    if (strcmp(sent, raw) == 0) return true;
    etag_encode(raw, enc, sizeof enc);
    size_t n = strlen(sent);
    if (n >= sizeof norm) return false;
    for (size_t i = 0; i <= n; i++)
        norm[i] = sent[i] == '+' ? '-' : sent[i] == '/' ? '_' : sent[i];
    return strcmp(norm, enc) == 0;
}

/* trainingOutput as AI Platform shows it, from the runtime record `rt`
 * (may be NULL). consumedMLUnits is kiln's own measure (docs/service.md):
 * every replica counts 1 unit per hour, plus 1 per accelerator it holds,
 * from the job's startTime to its endTime (or now), over the replicas of its
 * current placement. For a job that reports training metrics, kiln's
 * extension `metrics` holds the last report (src/exec/supervisor/trainmetrics.h). */
static json_t *training_output(const kiln_job_record *r, json_t *rt)
{
    const kiln_training_input *ti = &r->job->training_input;
    bool tuning = r->job->has_training_input && ti->has_hyperparameters;
    double units = 0.0;
    json_t *reps = json_object_get(rt, "replicas"), *rep;
    size_t i;

    if (r->start_ns) {
        int64_t end = r->end_ns ? r->end_ns : kiln_now_ns();
        double hours = end > r->start_ns ? (double)(end - r->start_ns) / 3.6e12 : 0.0;
        json_array_foreach(reps, i, rep)
        {
            units += hours * (1.0 + (double)json_array_size(json_object_get(rep, "gpus")));
        }
    }
    json_t *o = json_object();
    if (!o) return NULL;
    /* round to what a person reads; the API's 1e-6 keeps short jobs non-zero */
    json_object_set_new(o, "consumedMLUnits", json_real((double)(int64_t)(units * 1e6) / 1e6));
    json_object_set_new(o, "isHyperparameterTuningJob", json_boolean(tuning));
    if (tuning) {
        /* the study kilnd keeps in the runtime record (src/exec/supervisor/trials.c) */
        kiln_study *st = kiln_study_from_json(&ti->hyperparameters, json_object_get(rt, "study"));
        char done[24];
        snprintf(done, sizeof done, "%zu", st ? kiln_study_count(st, KILN_TRIAL_SUCCEEDED) : 0);
        json_object_set_new(o, "completedTrialCount", json_string(done));
        json_object_set_new(o, "trials", st ? kiln_study_output_trials(st) : json_array());
        kiln_study_free(st);
        json_object_set_new(o, "hyperparameterMetricTag",
                            json_string(kiln_tune_metric_tag(&ti->hyperparameters)));
    }
    json_t *m = json_object_get(rt, "metrics");
    if (json_is_object(m)) json_object_set(o, "metrics", m);
    /* kiln's extension: GPU time its replicas held GPUs (every run), and
     * their mean utilisation over the GPU watch's samples (this machine's
     * GPUs only; src/exec/supervisor/gpus.c) */
    json_t *gu = json_object_get(rt, "gpuUsage");
    double gs = json_number_value(json_object_get(gu, "gpuSeconds"));
    json_int_t un = json_integer_value(json_object_get(gu, "utilizationSamples"));
    if (gs > 0)
        json_object_set_new(o, "gpuHours", json_real((double)(int64_t)(gs / 3.6e3 * 1e6) / 1e6));
    if (un > 0)
        json_object_set_new(
            o, "meanGpuUtilization",
            json_real((double)(int64_t)(json_number_value(json_object_get(gu, "utilizationSum")) /
                                        (double)un * 10.0) /
                      10.0));
    return o;
}

/* With --queues: why a QUEUED job waits (or a RUNNING tuning job's next
 * trial), as the supervisor's last
 * admission pass said (src/exec/supervisor/admit.c); NULL before its first
 * pass over the job. */
static json_t *queue_status(kilnd *d, const char *project, const char *job_id)
{
    json_t *o = NULL;
    kilnd_qwait key = {.project = (char *)project, .job_id = (char *)job_id};
    pthread_mutex_lock(&d->queues_mu);
    size_t lo = 0, hi = d->n_qwait;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const kilnd_qwait *w = &d->qwait[mid];
        int c = strcmp(w->project, key.project);
        if (!c) c = strcmp(w->job_id, key.job_id);
        if (c == 0) {
            o = json_object();
            if (w->local_queue) json_object_set_new(o, "localQueue", json_string(w->local_queue));
            if (w->cluster_queue)
                json_object_set_new(o, "clusterQueue", json_string(w->cluster_queue));
            if (w->position > 0)
                json_object_set_new(o, "positionInClusterQueue", json_integer(w->position));
            if (w->trial) json_object_set_new(o, "waitingFor", json_string("nextTrial"));
            json_object_set_new(o, "reason", json_string(w->why));
            break;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    pthread_mutex_unlock(&d->queues_mu);
    return o;
}

static json_t *job_json(kilnd *d, const kiln_job_record *r)
{
    char *s = kiln_job_to_json(r->job, KILN_ENC_COMPACT);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    if (!o) return NULL;
    if (r->job->etag) {
        char enc[96];
        etag_encode(r->job->etag, enc, sizeof enc);
        json_object_set_new(o, "etag", json_string(enc));
    }
    json_t *rt = r->runtime ? json_loads(r->runtime, 0, NULL) : NULL;
    if (r->job->state == KILN_STATE_QUEUED) {
        /* Slurm's place for a job whose allocation it holds PENDING (the
         * whole partition's queue, kiln's jobs or not), else kiln's own
         * queue's */
        int64_t pos = kilnd_spos_get(d, r->project, r->job->job_id);
        char b[32];
        if ((pos > 0 || kiln_store_job_position(d->store, r, &pos) == KILN_OK) && pos > 0) {
            snprintf(b, sizeof b, "%lld", (long long)pos);
            json_object_set_new(o, "jobPosition", json_string(b));
        }
    }
    /* kiln's own status: restarts and where the replicas are */
    json_t *ks = json_pack("{s:i,s:i}", "restarts", r->restarts, "failures", r->failures);
    json_t *to = training_output(r, rt);
    if (to) json_object_set_new(o, "trainingOutput", to);
    if (ks && rt) {
        json_t *reps = json_object_get(rt, "replicas");
        if (reps) json_object_set(ks, "replicas", reps);
        /* elastic PyTorchJobs: workers running now, and wanted (maxReplicas) */
        json_t *ew = json_object_get(rt, "elasticWorkers");
        if (ew) json_object_set(ks, "elasticWorkers", ew);
        /* elasticPolicy.metrics: the autoscaler's last look (kubectl get hpa) */
        json_t *as = json_object_get(rt, "autoscaler");
        if (as) json_object_set(ks, "autoscaler", as);
        /* --queues: a preempted job waiting again: Kueue's Preempted condition */
        json_t *pc = json_object_get(rt, "preempted");
        if (json_is_object(pc) && r->job->state == KILN_STATE_QUEUED)
            json_object_set_new(ks, "conditions", json_pack("[O]", pc));
    }
    json_decref(rt);
    /* a TrainJob: its status conditions as Trainer reports them */
    json_t *tc = kiln_trainjob_conditions(r->job);
    if (ks && tc) {
        json_t *st = json_pack("{s:o}", "conditions", tc);
        tc = NULL;
        if (st) json_object_set_new(ks, "trainJobStatus", st);
    }
    json_decref(tc);
    /* a QUEUED job: why it waits; a RUNNING tuning job: why its next
     * trial waits (each trial is its own workload) */
    if (ks && d->queues_path &&
        (r->job->state == KILN_STATE_QUEUED ||
         (r->job->state == KILN_STATE_RUNNING && r->job->training_input.has_hyperparameters))) {
        json_t *qs = queue_status(d, r->project, r->job->job_id);
        if (qs) json_object_set_new(ks, "queue", qs);
    }
    if (ks) json_object_set_new(o, "kilnStatus", ks);
    return o;
}

/* ---------- jobs ---------- */

/* Does a node of this kilnd declare a device of type `type`? */
static bool node_has_type(const kilnd *d, const char *type)
{
    for (size_t n = 0; n < d->cluster.n; n++)
        for (size_t k = 0; k < d->cluster.nodes[n].n_devs; k++)
            if (strcmp(d->cluster.nodes[n].devs[k].type, type) == 0) return true;
    return false;
}

/* A TPU job (a cloud_tpu worker, a TPU accelerator type, tpuTfVersion) is
 * refused at its fields unless a node declares the TPU type its plan asks
 * for (a node config's {type, count}; no kiln node discovers TPUs), so it
 * is never queued to fail at placement. */
/* diskConfig.bootDiskSizeGb, a replica's scratch space: its working
 * directory is under kilnd's data dir, so a size that file system can
 * never give (more than its whole size) is refused now. Under Slurm the
 * replica's disk is the Slurm node's, which kiln does not ask for yet. */
static void check_disks(kilnd *d, const kiln_job *job, kiln_diag *dg)
{
    struct statvfs vs;
    bool have = statvfs(d->data_dir, &vs) == 0;
    double total_gb = have ? (double)vs.f_blocks * (double)vs.f_frsize / (1024.0 * 1024 * 1024) : 0;
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        char f[160];
        if (!rc || !rc->has_disk_config || rc->disk_config.boot_disk_size_gb <= 0) continue;
        snprintf(f, sizeof f, "trainingInput.%sConfig.diskConfig.bootDiskSizeGb",
                 kiln_role_field((kiln_role)r));
        if (d->slurm.on)
            kiln_diag_add(dg, f,
                          "under --executor slurm a replica's scratch space is its Slurm node's "
                          "disk, which kiln does not ask Slurm for (leave it out)");
        else if (have && (double)rc->disk_config.boot_disk_size_gb > total_gb)
            kiln_diag_add(dg, f,
                          "%lld GB of scratch space: no node can give it (a replica's working "
                          "directory is on the file system of kilnd's data dir, %.0f GB in all)",
                          (long long)rc->disk_config.boot_disk_size_gb, total_gb);
    }
}

static void check_tpus(kilnd *d, const kiln_job *job, kiln_diag *dg)
{
    kiln_replica_plan plans[KILN_ROLE_COUNT];
    const char *want = NULL; /* the TPU type of the plan */
    bool tpu = false;
    size_t np = kiln_catalog_plan(d->catalog, job, plans);
    for (size_t p = 0; p < np; p++) {
        const char *at = plans[p].accelerator_type;
        const kiln_accelerator_type *a = at ? kiln_catalog_accelerator(d->catalog, at) : NULL;
        const kiln_machine_type *m =
            plans[p].machine_type ? kiln_catalog_machine(d->catalog, plans[p].machine_type) : NULL;
        if ((a && a->is_tpu) || (m && m->is_tpu_worker)) {
            tpu = true;
            if (a && a->is_tpu && !want) want = at;
        }
    }
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        tpu |= rc && rc->tpu_tf_version && *rc->tpu_tf_version;
    }
    if (!tpu || (want && node_has_type(d, want))) return;
    char why[512];
    snprintf(why, sizeof why,
             "this job needs TPU accelerators (%s) and no node of this kilnd declares that type "
             "(TPUs are never discovered: a site that has them declares them as devices of that "
             "type in its node config); run it on GPUs or CPUs",
             want ? want : "no TPU type given");
    const kiln_training_input *ti = &job->training_input;
    bool said = false;
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
        char f[128];
        const char *role = kiln_role_field((kiln_role)r);
        if (rc && rc->accelerator_config.type && *rc->accelerator_config.type) {
            const kiln_accelerator_type *a =
                kiln_catalog_accelerator(d->catalog, rc->accelerator_config.type);
            if (a && a->is_tpu) {
                snprintf(f, sizeof f, "trainingInput.%sConfig.acceleratorConfig.type", role);
                kiln_diag_add(dg, f, "%s", why);
                said = true;
            }
        }
        if (rc && rc->tpu_tf_version && *rc->tpu_tf_version) {
            snprintf(f, sizeof f, "trainingInput.%sConfig.tpuTfVersion", role);
            kiln_diag_add(dg, f, "%s", why);
            said = true;
        }
    }
    const kiln_machine_type *w = ti->worker_type && *ti->worker_type
                                     ? kiln_catalog_machine(d->catalog, ti->worker_type)
                                     : NULL;
    if (w && w->is_tpu_worker) {
        kiln_diag_add(dg, "trainingInput.workerType", "%s", why);
        said = true;
    }
    if (!said) kiln_diag_add(dg, "trainingInput.scaleTier", "%s", why);
}

/* A body that is not a Job (kiln_job_from_json failed with `err`): the
 * message names the first problem's field and rule as every other refusal
 * does ("Field: F Error: WHAT"), and the fieldViolations list them all. A
 * body that does not parse at all, or is not a JSON object, has no field:
 * the message says what the body itself is. */
static enum MHD_Result send_body_error(struct MHD_Connection *c, const kiln_api_req *rq,
                                       const kiln_diag *dg, kiln_err err)
{
    if (rq->len == 0)
        return send_error(c, 400, NULL, "The request body is empty: send a Job as JSON");
    if (dg->n && dg->v[0].field[0])
        return send_error(c, 400, dg, "Field: %s Error: %s", dg->v[0].field, dg->v[0].description);
    return send_error(c, 400, dg, "The request body is not a valid Job: %s",
                      dg->n ? dg->v[0].description : kiln_err_str(err));
}

/* A body with apiVersion and kind (a Job has neither) is a Kubeflow job. */
static bool kubeflow_body(const kiln_api_req *rq)
{
    if (!rq->body || rq->len == 0) return false;
    json_t *o = json_loadb(rq->body, rq->len, 0, NULL);
    bool kf = json_is_object(o) && json_is_string(json_object_get(o, "apiVersion")) &&
              json_is_string(json_object_get(o, "kind"));
    json_decref(o);
    return kf;
}

static void refuse(kiln_api_refusal *r, unsigned code, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(kiln_api_refusal *r, unsigned code, const char *status, const char *fmt, ...)
{
    va_list ap;
    r->code = code;
    r->status = status;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

/* A job that asks for a topology level: whether its gang could ever fit one
 * domain of it, on an idle cluster, under some flavor of its ClusterQueue
 * whose Topology has the level (that flavor's labels joined to each role's
 * nodeSelector, its tolerations added): Kueue would keep it pending for
 * ever; kiln refuses it at submit, saying why. True for a job that asks
 * none. The caller holds queues_mu. */
static bool topology_ever_fits(kilnd *d, const char *project, const kiln_job *job,
                               const kiln_replica_plan *plans, size_t np, char *why, size_t whylen)
{
    kiln_sched_rules base;
    kiln_sched_rules_of(job, &base);
    bool asks = false;
    for (int r = 0; r < KILN_ROLE_COUNT; r++)
        asks |= base.has_topo[r];
    if (!asks) return true;
    const kiln_queues *q = d->queues;
    char lw[300];
    long lq = kiln_queues_route(q, project, &job->labels, lw, sizeof lw);
    if (lq < 0) return true; /* kiln_queues_check_job said so already */
    const kiln_qcq *cq = &q->cqs[q->lqs[lq].cq];
    kiln_sched *idle = kiln_sched_new(&d->cluster);
    bool fits = idle == NULL, tried = false; /* out of memory: admission decides */
    for (size_t g = 0; idle && !fits && g < cq->ngroups; g++)
        for (size_t i = 0; !fits && i < cq->groups[g].n; i++) {
            size_t f = cq->groups[g].flavors[i].flavor;
            const kiln_qflavor *fl = &q->flavors[f];
            if (!kiln_queues_flavor_topology_ok(q, f, job)) continue;
            kiln_sched_rules ru = base;
            kiln_map sel[KILN_ROLE_COUNT] = {{0}};
            for (int r = 0; r < KILN_ROLE_COUNT; r++) {
                const kiln_replica_config *rc = kiln_job_role_config(job, (kiln_role)r);
                for (size_t k = 0; rc && k < rc->node_selector.n; k++)
                    kiln_map_set(&sel[r], rc->node_selector.keys[k], rc->node_selector.vals[k]);
                for (size_t k = 0; k < fl->node_labels.n; k++)
                    kiln_map_set(&sel[r], fl->node_labels.keys[k], fl->node_labels.vals[k]);
                ru.selector[r] = sel[r].n ? &sel[r] : NULL;
            }
            ru.extra = fl->tolerations;
            ru.n_extra = fl->n_tolerations;
            const kiln_qtopology *t = &q->topologies[fl->topology];
            ru.topology = t->name;
            ru.levels = (const char *const *)t->levels.v;
            ru.n_levels = t->levels.n;
            kiln_placement pl = {0};
            char w[400] = "";
            kiln_err e = kiln_sched_place_rules(idle, plans, np, &ru, &pl, w, sizeof w);
            if (e == KILN_OK) kiln_sched_release(idle, &pl);
            kiln_placement_free(&pl);
            fits = e != KILN_EINVAL && e != KILN_ELIMIT;
            if (!fits && !tried)
                snprintf(why, whylen, "ClusterQueue %s, flavor %s: %s", cq->name, fl->name, w);
            tried = true;
            for (int r = 0; r < KILN_ROLE_COUNT; r++)
                kiln_map_clear(&sel[r]);
        }
    kiln_sched_free(idle);
    return fits || !tried;
}

kiln_job_record *kiln__api_job_admit(kilnd *d, const char *project, kiln_job *job, kiln_diag *dg,
                                     kiln_api_refusal *why_)
{
    kiln_job_record *rec = NULL;
    char why[256];
    kiln_err err;

    err = kiln_catalog_validate(d->catalog, job, dg);
    /* and what this kiln would not act on: refused now, not ignored later */
    if (err == KILN_OK) err = kiln_catalog_check_honoured(d->catalog, job, dg);
    if (err != KILN_OK) {
        refuse(why_, 400, NULL, "Field: %s Error: %s", dg->n ? dg->v[0].field : "",
               dg->n ? dg->v[0].description : "invalid job");
        goto out;
    }
    /* --executor slurm: what Slurm has no meaning for (docs/slurm.md) */
    char sfield[128];
    if (d->slurm.on && !kiln_slurm_check_job(&d->slurm_cfg, project, job, sfield, sizeof sfield,
                                             why, sizeof why)) {
        refuse(why_, 400, NULL, "Field: %s Error: %s", sfield, why);
        goto out;
    }
    /* gs:// URIs must name what this kilnd's staging store holds (storage.c) */
    kiln__api_storage_check_job(d, project, job, dg);
    if (dg->n) {
        refuse(why_, 400, NULL, "Field: %s Error: %s", dg->v[0].field, dg->v[0].description);
        goto out;
    }
    /* resumePreviousJobId: a finished tuning job of this project (src/tune/resume.c) */
    const char *resume = job->has_training_input && job->training_input.has_hyperparameters
                             ? job->training_input.hyperparameters.resume_previous_job_id
                             : NULL;
    if (resume && *resume) {
        kiln_job_record *prev = NULL;
        kiln_store_job_get(d->store, project, resume, &prev);
        kiln_tune_check_resume(&job->training_input.hyperparameters, resume,
                               prev ? prev->job : NULL, prev ? prev->runtime : NULL, dg);
        kiln_job_record_free(prev);
        if (dg->n) {
            refuse(why_, 400, NULL, "Field: %s Error: %s", dg->v[0].field, dg->v[0].description);
            goto out;
        }
    }
    /* a job that can never run is refused now, not failed after queueing:
     * an image with no container runtime on any node */
    if (!d->exec.container_runtime) {
        static const char *const fields[KILN_ROLE_COUNT] = {
            "trainingInput.masterConfig.imageUri", "trainingInput.workerConfig.imageUri",
            "trainingInput.parameterServerConfig.imageUri",
            "trainingInput.evaluatorConfig.imageUri"};
        for (int r = 0; r < KILN_ROLE_COUNT; r++) {
            const kiln_replica_config *rc_ = kiln_job_role_config(job, (kiln_role)r);
            if (rc_ && rc_->image_uri && *rc_->image_uri)
                kiln_diag_add(dg, fields[r],
                              "the image %s cannot run: no node of this kilnd has a container "
                              "runtime (install podman, or start kilnd with --container-runtime "
                              "PATH)",
                              rc_->image_uri);
        }
        const char *rv = job->training_input.runtime_version;
        if (rv && *rv)
            kiln_diag_add(dg, "trainingInput.runtimeVersion",
                          "'%.32s' runs in a container image (kiln catalog list "
                          "runtime-versions), and no node of this kilnd has a container runtime "
                          "(install podman, or start kilnd with --container-runtime PATH)",
                          rv);
    }
    /* persistentVolumeClaim volumes: claims the node config defines */
    if (kiln_claims_check_job(&d->claims, job, d->cluster.n, dg) == KILN_ENOMEM)
        kiln_diag_add(dg, "", "out of memory");
    /* TPUs: only where a node declares the TPU type the job asks for */
    check_tpus(d, job, dg);
    check_disks(d, job, dg);
    if (dg->n) {
        refuse(why_, 400, NULL, "Field: %s Error: %s", dg->v[0].field, dg->v[0].description);
        goto out;
    }
    /* who its replicas would run as: kilnd as root with no user for the
     * project (or user root), or a user a kilnd not root cannot switch to,
     * would fail every placement; refused now, naming what to change. Not a
     * field of the job but kilnd's set-up, hence FAILED_PRECONDITION. */
    {
        long uid, gid;
        char uwhy[768];
        if (kiln_users_job(d->users, project, job->training_input.service_account, &uid, &gid, uwhy,
                           sizeof uwhy) != KILN_OK) {
            refuse(why_, 400, "FAILED_PRECONDITION", "%s", uwhy);
            goto out;
        }
        /* securityContext runAsUser, runAsGroup, runAsNonRoot: true only of
         * that user (-1: kilnd's own, which a process runs as and podman is
         * not told) */
        char who[256];
        kiln_users_who(uid, gid, who, sizeof who);
        if (kiln_catalog_check_run_as(d->catalog, job, uid >= 0 ? uid : (long)geteuid(),
                                      gid >= 0 ? gid : (long)getegid(), uid >= 0, who,
                                      dg) != KILN_OK) {
            refuse(why_, 400, NULL, "Field: %s Error: %s", dg->v[0].field, dg->v[0].description);
            goto out;
        }
    }
    /* a topology request means a Topology, which only --queues brings */
    for (int r = 0; !d->queues_path && r < KILN_ROLE_COUNT; r++) {
        kiln_topology_request t;
        if (!kiln_job_topology(job, (kiln_role)r, &t)) continue;
        char tf[64];
        snprintf(tf, sizeof tf, "trainingInput.%sConfig.topology", kiln_role_name((kiln_role)r));
        kiln_diag_add(dg, tf,
                      "topology-aware placement (%s) follows the Topology of a Kueue "
                      "ResourceFlavor: this kilnd runs without --queues, so no level can be "
                      "honoured; remove the request or give kilnd a queues file with a Topology "
                      "(docs/queues.md)",
                      t.required    ? t.required
                      : t.preferred ? t.preferred
                                    : "unconstrained");
        refuse(why_, 400, NULL, "Field: %s Error: %s", tf, dg->v[dg->n - 1].description);
        goto out;
    }
    /* a Vertex persistent resource: the ClusterQueue declared as it, by
     * the project's LocalQueue for it (which the job's queue label then
     * names: admission routes by that label, as for any job) */
    const char *prid = job->training_input.vertex.persistent_resource_id;
    if (prid && *prid) {
        char pw[512];
        const char *f = "trainingInput.vertex.persistentResourceId";
        if (!d->queues_path) {
            kiln_diag_add(dg, f,
                          "'%s': a persistent resource is a ClusterQueue of kilnd's --queues "
                          "(label " KILN_PERSISTENT_RESOURCE_LABEL
                          "), and this kilnd runs without --queues",
                          prid);
            refuse(why_, 400, NULL, "Field: %s Error: %s", f, dg->v[dg->n - 1].description);
            goto out;
        }
        pthread_mutex_lock(&d->queues_mu);
        long plq = kiln_queues_persistent_lq(d->queues, project, prid, pw, sizeof pw);
        const char *want = plq >= 0 ? d->queues->lqs[plq].name : NULL;
        const char *has = kiln_map_get(&job->labels, KILN_QUEUE_LABEL);
        kiln_err le = KILN_OK;
        if (plq >= 0 && has && strcmp(has, want) != 0)
            snprintf(pw, sizeof pw,
                     "'%s' is LocalQueue %s of project %s, but the job's label " KILN_QUEUE_LABEL
                     " names %s: leave the label out, or name that queue",
                     prid, want, project, has);
        else if (plq >= 0)
            le = kiln_map_set(&job->labels, KILN_QUEUE_LABEL, want);
        bool pok = plq >= 0 && (!has || strcmp(has, want) == 0);
        pthread_mutex_unlock(&d->queues_mu);
        if (le != KILN_OK) {
            refuse(why_, 500, NULL, "out of memory");
            goto out;
        }
        if (!pok) {
            kiln_diag_add(dg, f, "%s", pw);
            refuse(why_, 400, NULL, "Field: %s Error: %s", f, pw);
            goto out;
        }
    }
    /* --queues: the job's LocalQueue (its label or the project's default),
     * its WorkloadPriorityClass, and quota it could ever be admitted under */
    if (d->queues_path) {
        kiln_replica_plan plans[KILN_ROLE_COUNT];
        size_t np = kiln_catalog_plan(d->catalog, job, plans);
        char qwhy[768];
        pthread_mutex_lock(&d->queues_mu);
        bool ok = kiln_queues_check_job(d->queues, project, job, plans, np, qwhy, sizeof qwhy);
        if (ok) ok = topology_ever_fits(d, project, job, plans, np, qwhy, sizeof qwhy);
        pthread_mutex_unlock(&d->queues_mu);
        if (!ok) {
            refuse(why_, 400, NULL, "Field: labels Error: %s", qwhy);
            goto out;
        }
    }
    if (kiln_catalog_normalise(d->catalog, job) != KILN_OK) {
        refuse(why_, 500, NULL, "cannot normalise the job");
        goto out;
    }
    /* the TTL's marker first: a crash after the insert must not lose it */
    bool ttl = job->training_input.has_run_policy &&
               job->training_input.run_policy.has_ttl_seconds_after_finished;
    int marked = ttl ? kiln_jobfiles_ttl_mark(d->jobfiles, project, job->job_id) : 0;
    if (marked < 0) {
        if (kiln__api_disk_low(d, why, sizeof why))
            refuse(why_, 503, NULL, "%s", why);
        else
            refuse(why_, 500, NULL, "cannot record the job's ttlSecondsAfterFinished: %s",
                   strerror(errno));
        goto out;
    }
    err = kiln_store_job_create(d->store, project, job, kiln_now_ns(), &rec);
    if (err != KILN_OK && marked == 1) kiln_jobfiles_ttl_unmark(d->jobfiles, project, job->job_id);
    if (err == KILN_EEXIST) {
        refuse(why_, 409, NULL, "Resource projects/%s/jobs/%s already exists", project,
               job->job_id);
        goto out;
    }
    if (err != KILN_OK && kiln__api_disk_low(d, why, sizeof why)) {
        refuse(why_, 503, NULL, "%s", why); /* filled up between the check and the write */
        goto out;
    }
    if (err != KILN_OK) {
        refuse(why_, 500, NULL, "cannot store the job: %s", kiln_err_str(err));
        goto out;
    }
    kiln__api_note_created(job->job_id);
    kiln_jobfiles_event(d->jobfiles, project, job->job_id, "INFO", "Job QUEUED (created)");
    if (ttl) kiln_jobfiles_ttl_created(d->jobfiles, project, job->job_id);
    kiln_doorbell_ring(&d->wake);
out:
    return rec;
}

static enum MHD_Result job_create(kilnd *d, struct MHD_Connection *c, const char *project,
                                  const kiln_api_req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *rec = NULL;
    kiln_api_refusal why_ = {0};
    enum MHD_Result rc;
    char why[256];
    kiln_err err;

    /* nothing accepted that could not be kept: refuse before the store */
    if (kiln__api_disk_low(d, why, sizeof why)) {
        rc = send_error(c, 503, NULL, "%s", why);
        goto out;
    }
    /* a Kubeflow job as JSON (apiVersion + kind: a TFJob ... a TrainJob, its
     * runtime from --runtimes-dir), else a Job */
    if (kubeflow_body(rq)) {
        err = kiln_job_from_kubeflow_in(rq->body, rq->len, &job, &dg, NULL, d->runtimes_dir);
        /* a Kubeflow job names no region (unless kiln.dev/region): the
         * catalog's default, as `kiln jobs submit --kubeflow-job` gives it */
        const char *def = kiln_catalog_default_region(d->catalog);
        if (err == KILN_OK && !(job->training_input.region && *job->training_input.region))
            err = kiln_set_str(&job->training_input.region, def ? def : "us-central1");
        if (err == KILN_ENOMEM) kiln_diag_add(&dg, "", "out of memory");
    } else
        err = kiln_job_from_json(rq->body ? rq->body : "", rq->len, &job, &dg);
    if (err != KILN_OK) {
        rc = send_body_error(c, rq, &dg, err);
        goto out;
    }
    /* output-only fields are the service's to set (the store sets the times,
     * errorMessage and etag; trainingOutput is rendered from the run) */
    job->state = KILN_STATE_UNSPECIFIED;
    kiln_set_str(&job->training_output.hyperparameter_metric_tag, NULL);
    memset(&job->training_output, 0, sizeof job->training_output);
    job->has_training_output = false;
    rec = kiln__api_job_admit(d, project, job, &dg, &why_);
    if (!rec) {
        rc = send_error_st(c, why_.code, why_.status ? why_.status : kiln__api_status_of(why_.code),
                           &dg, "%s", why_.msg);
        goto out;
    }
    rc = send_json(c, 200, job_json(d, rec));
out:
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return rc;
}

static bool finished(kiln_job_state s)
{
    return s == KILN_STATE_SUCCEEDED || s == KILN_STATE_FAILED || s == KILN_STATE_CANCELLED;
}

/* A cached response for the job at this version, or NULL. */
static struct MHD_Response *cache_get(kilnd *d, const char *key, size_t slot, int64_t seq,
                                      int64_t version)
{
    struct kiln_api_cache *c = d->cache;
    struct MHD_Response *r = NULL;
    if (!c) return NULL;
    pthread_mutex_lock(&c->mu);
    centry *e = &c->slot[slot];
    if (e->key && e->seq == seq && e->version == version && strcmp(e->key, key) == 0)
        r = MHD_create_response_from_buffer(e->len, e->body, MHD_RESPMEM_MUST_COPY);
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void cache_put(kilnd *d, const char *key, size_t slot, int64_t seq, int64_t version,
                      const char *body)
{
    struct kiln_api_cache *c = d->cache;
    if (!c) return;
    char *k = strdup(key), *b = strdup(body);
    if (!k || !b) {
        free(k);
        free(b);
        return;
    }
    pthread_mutex_lock(&c->mu);
    centry *e = &c->slot[slot];
    free(e->key);
    free(e->body);
    *e = (centry){.key = k, .seq = seq, .version = version, .body = b, .len = strlen(b)};
    pthread_mutex_unlock(&c->mu);
}

static enum MHD_Result job_get(kilnd *d, struct MHD_Connection *c, const char *project,
                               const char *id)
{
    kiln_job_record *rec = NULL;
    int64_t seq = 0, version = 0;
    kiln_job_state state = KILN_STATE_UNSPECIFIED;
    char key[256];
    size_t slot = cache_slot(project, id);

    snprintf(key, sizeof key, "%s/%s", project, id);
    kiln_err err = kiln_store_job_version(d->store, project, id, &seq, &version, &state);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err == KILN_OK && finished(state)) {
        struct MHD_Response *r = cache_get(d, key, slot, seq, version);
        if (r) {
            MHD_add_response_header(r, "Content-Type", "application/json");
            return kiln__api_queue(c, 200, r);
        }
    }
    err = kiln_store_job_get(d->store, project, id, &rec);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    json_t *o = job_json(d, rec);
    char *body = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (body && finished(rec->job->state)) cache_put(d, key, slot, rec->seq, rec->version, body);
    kiln_job_record_free(rec);
    return send_text(c, 200, body);
}

static enum MHD_Result job_list(kilnd *d, struct MHD_Connection *c, const char *project)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job_filter *f = NULL;
    kiln_job_record **v = NULL;
    size_t n = 0;
    int64_t after = 0, next = 0, size = 20;
    enum MHD_Result rc;
    char *end;

    const char *ps = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageSize");
    const char *pt = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pageToken");
    const char *ft = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "filter");
    if (ps && *ps) {
        errno = 0;
        size = strtoll(ps, &end, 10);
        if (errno || *end || size < 0)
            kiln_diag_add(&dg, "pageSize", "'%.32s' is not a page size (0 to 100)", ps);
        if (size == 0) size = 20;
        if (size > 100) size = 100; /* the documented maximum */
    }
    /* keyset paging: the token says where the last page ended (signed by the
     * store, bound to this project and filter), so a page never re-reads the
     * pages before it */
    if (pt && *pt && kiln_store_page_after(d->store, project, ft, pt, &after) != KILN_OK)
        kiln_diag_add(&dg, "pageToken",
                      "not a page token this server returned for this project and filter");
    if (ft && *ft) kiln_job_filter_parse(ft, &f, &dg);
    if (dg.n) {
        rc = send_error(c, 400, &dg, "Invalid list request: %s", dg.v[0].description);
        goto out;
    }
    kiln_err err = kiln_store_job_list(d->store, project, f, after, (size_t)size, &v, &n, &next);
    if (err != KILN_OK) {
        rc = send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
        goto out;
    }
    json_t *o = json_object(), *jobs = json_array();
    for (size_t i = 0; o && jobs && i < n; i++) {
        json_t *jj = job_json(d, v[i]);
        if (jj) json_array_append_new(jobs, jj);
    }
    if (o && jobs && json_array_size(jobs)) json_object_set(o, "jobs", jobs);
    json_decref(jobs);
    if (o && next) {
        char tok[KILN_STORE_TOKEN_LEN];
        kiln_store_page_token(d->store, project, ft, next, tok);
        json_object_set_new(o, "nextPageToken", json_string(tok));
    }
    rc = send_json(c, 200, o);
out:
    kiln_job_records_free(v, n);
    kiln_job_filter_free(f);
    kiln_diag_free(&dg);
    return rc;
}

kiln_err kiln__api_job_cancel(kilnd *d, const char *project, const char *id, kiln_job_state *was)
{
    int64_t now = kiln_now_ns();
    kiln_err err = kiln_store_job_transition(d->store, project, id, KILN_STATE_MASK(QUEUED),
                                             KILN_STATE_CANCELLED, NULL, now, was);
    if (err == KILN_OK) {
        kiln_jobfiles_event(d->jobfiles, project, id, "INFO", "Job CANCELLED while queued");
    } else if (err == KILN_ECONFLICT) {
        err = kiln_store_job_transition(d->store, project, id,
                                        KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING) |
                                            KILN_STATE_MASK(CANCELLING),
                                        KILN_STATE_CANCELLING, NULL, now, was);
        if (err == KILN_OK)
            kiln_jobfiles_event(d->jobfiles, project, id, "INFO", "Job CANCELLING (requested)");
    }
    if (err == KILN_OK) kiln_doorbell_ring(&d->wake);
    return err;
}

static enum MHD_Result job_cancel(kilnd *d, struct MHD_Connection *c, const char *project,
                                  const char *id)
{
    kiln_job_state was = KILN_STATE_UNSPECIFIED;
    kiln_err err = kiln__api_job_cancel(d, project, id, &was);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err == KILN_ECONFLICT)
        return send_error_st(c, 400, "FAILED_PRECONDITION", NULL,
                             "Job projects/%s/jobs/%s is already %s and cannot be cancelled",
                             project, id, kiln_job_state_name(was));
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    kiln_doorbell_ring(&d->wake);
    return send_json(c, 200, json_object());
}

static enum MHD_Result job_patch(kilnd *d, struct MHD_Connection *c, const char *project,
                                 const char *id, const kiln_api_req *rq)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *cur = NULL, *rec = NULL;
    enum MHD_Result rc;

    const char *mask = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "updateMask");
    if (!mask || strcmp(mask, "labels") != 0) {
        kiln_diag_add(&dg, "updateMask", "only 'labels' can be updated (got '%.64s')",
                      mask ? mask : "");
        rc = send_error(c, 400, &dg, "Field: updateMask Error: %s", dg.v[0].description);
        goto out;
    }
    kiln_err err = kiln_job_from_json(rq->body ? rq->body : "", rq->len, &job, &dg);
    if (err != KILN_OK) {
        rc = send_body_error(c, rq, &dg, err);
        goto out;
    }
    err = kiln_store_job_get(d->store, project, id, &cur);
    if (err == KILN_ENOTFOUND) {
        rc = send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
        goto out;
    }
    if (err == KILN_OK && job->etag && *job->etag &&
        !etag_matches(job->etag, cur->job->etag ? cur->job->etag : "")) {
        rc = send_error_st(c, 409, "ABORTED", NULL,
                           "etag mismatch: the job changed since it was read");
        goto out;
    }
    /* --queues: the queue and priority class labels move a job between
     * queues; as in Kueue, only while it waits (an admitted job's quota
     * stays where it was admitted) */
    if (d->queues_path) {
        static const char *const qlabels[] = {KILN_QUEUE_LABEL, KILN_PRIORITY_CLASS_LABEL};
        for (size_t k = 0; k < 2; k++) {
            const char *was = kiln_map_get(&cur->job->labels, qlabels[k]);
            const char *now = kiln_map_get(&job->labels, qlabels[k]);
            bool same = (!was && !now) || (was && now && strcmp(was, now) == 0);
            if (!same && cur->job->state != KILN_STATE_QUEUED) {
                rc = send_error(c, 400, NULL,
                                "Field: labels Error: %s can change only while the job is QUEUED "
                                "(it was admitted to its queue)",
                                qlabels[k]);
                goto out;
            }
        }
    }
    /* the labels are checked by the same rules as on create */
    kiln_map_clear(&cur->job->labels);
    for (size_t i = 0; i < job->labels.n; i++)
        kiln_map_set(&cur->job->labels, job->labels.keys[i], job->labels.vals[i]);
    if (kiln_catalog_validate(d->catalog, cur->job, &dg) != KILN_OK) {
        rc = send_error(c, 400, &dg, "Field: %s Error: %s", dg.n ? dg.v[0].field : "labels",
                        dg.n ? dg.v[0].description : "invalid labels");
        goto out;
    }
    if (d->queues_path && cur->job->state == KILN_STATE_QUEUED) {
        kiln_replica_plan plans[KILN_ROLE_COUNT];
        size_t np = kiln_catalog_plan(d->catalog, cur->job, plans);
        char qwhy[768];
        pthread_mutex_lock(&d->queues_mu);
        bool ok = kiln_queues_check_job(d->queues, project, cur->job, plans, np, qwhy, sizeof qwhy);
        pthread_mutex_unlock(&d->queues_mu);
        if (!ok) {
            rc = send_error(c, 400, NULL, "Field: labels Error: %s", qwhy);
            goto out;
        }
    }
    err = kiln_store_job_set_labels(d->store, project, id, &job->labels, &rec);
    if (err != KILN_OK) {
        rc = send_error(c, err == KILN_ENOTFOUND ? 404 : 500, NULL, "cannot update labels: %s",
                        kiln_err_str(err));
        goto out;
    }
    rc = send_json(c, 200, job_json(d, rec));
out:
    kiln_job_record_free(cur);
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return rc;
}

/* Log lines from byte `offset` of the job's log: whole lines only. */
static enum MHD_Result job_logs(kilnd *d, struct MHD_Connection *c, const char *project,
                                const char *id)
{
    kiln_job_record *rec = NULL;
    char dir[PATH_MAX], path[PATH_MAX + 16], *buf = NULL, *end;
    enum MHD_Result rc;
    int fd = -1;

    kiln_err err = kiln_store_job_get(d->store, project, id, &rec);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    const char *os = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset");
    const char *task = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "taskName");
    long long off = 0;
    if (os && *os) {
        errno = 0;
        off = strtoll(os, &end, 10);
        if (errno || *end || off < 0) {
            rc = send_error(c, 400, NULL, "offset must be a byte offset from nextOffset");
            goto out;
        }
    }
    kiln_jobfiles_dir(d->jobfiles, project, id, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    json_t *o = json_object(), *entries = json_array();
    long long next = off;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    buf = malloc(LOG_CHUNK + 1);
    if (fd >= 0 && buf) {
        ssize_t n = pread(fd, buf, LOG_CHUNK, (off_t)off);
        size_t used = 0;
        for (ssize_t i = 0; n > 0 && i < n; i++) {
            if (buf[i] != '\n') continue;
            buf[i] = '\0';
            char *line = buf + used, *f[4] = {0}, *save = NULL;
            used = (size_t)i + 1;
            f[0] = strtok_r(line, "\t", &save);
            f[1] = f[0] ? strtok_r(NULL, "\t", &save) : NULL;
            f[2] = f[1] ? strtok_r(NULL, "\t", &save) : NULL;
            f[3] = f[2] ? strtok_r(NULL, "", &save) : NULL;
            if (!f[2]) continue;
            if (task && *task && strcmp(task, f[2]) != 0) continue;
            /* programs print what they like, JSON strings must be UTF-8 */
            kiln__utf8_scrub(f[2]);
            if (f[3]) kiln__utf8_scrub(f[3]);
            json_t *e = json_pack("{s:s,s:s,s:s,s:s}", "severity", f[0], "timestamp", f[1],
                                  "taskName", f[2], "message", f[3] ? f[3] : "");
            if (e) json_array_append_new(entries, e);
        }
        next = off + (long long)used;
    }
    char nb[32];
    snprintf(nb, sizeof nb, "%lld", next);
    json_object_set_new(o, "entries", entries);
    json_object_set_new(o, "nextOffset", json_string(nb));
    json_object_set_new(o, "jobState", json_string(kiln_job_state_name(rec->job->state)));
    rc = send_json(c, 200, o);
out:
    if (fd >= 0) close(fd);
    free(buf);
    kiln_job_record_free(rec);
    return rc;
}

/* The job's training metrics reports (metrics.jsonl, written by the
 * supervisor: see src/exec/supervisor/trainmetrics.h), oldest first: the history the
 * dashboard's chart draws. At most the last METRICS_MAX bytes are read. */
#define METRICS_MAX (1024u * 1024u)
static enum MHD_Result job_metrics(kilnd *d, struct MHD_Connection *c, const char *project,
                                   const char *id)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], *buf = NULL;
    json_t *points = NULL;
    enum MHD_Result rc;
    int fd = -1;
    int64_t seq, version;
    kiln_job_state state;

    kiln_err err = kiln_store_job_version(d->store, project, id, &seq, &version, &state);
    if (err == KILN_ENOTFOUND)
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%s not found", project, id);
    if (err != KILN_OK) return send_error(c, 500, NULL, "store: %s", kiln_err_str(err));
    kiln_jobfiles_dir(d->jobfiles, project, id, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    points = json_array();
    buf = malloc(METRICS_MAX + 1);
    if (!points || !buf) {
        rc = send_error(c, 500, NULL, "out of memory");
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        off_t size = lseek(fd, 0, SEEK_END);
        off_t from = size > (off_t)METRICS_MAX ? size - (off_t)METRICS_MAX : 0;
        ssize_t n = size > 0 ? pread(fd, buf, (size_t)(size - from), from) : 0;
        size_t start = 0;
        if (from > 0) /* began mid-line: skip to the next whole one */
            while (n > 0 && start < (size_t)n && buf[start++] != '\n') {
            }
        for (ssize_t i = (ssize_t)start; n > 0 && i < n; i++) {
            if (buf[i] != '\n') continue;
            json_t *p = json_loadb(buf + start, (size_t)i - start, 0, NULL);
            if (json_is_object(p)) json_array_append(points, p);
            json_decref(p);
            start = (size_t)i + 1;
        }
    }
    rc = send_json(
        c, 200, json_pack("{s:O,s:s}", "points", points, "jobState", kiln_job_state_name(state)));
out:
    if (fd >= 0) close(fd);
    free(buf);
    json_decref(points);
    return rc;
}

/* ---------- dispatch ---------- */

enum MHD_Result kiln__api_jobs(kilnd *d, struct MHD_Connection *c, const char *method,
                               const char *project, const char *rest, const kiln_api_req *rq,
                               const kiln_api_auth *a)
{
    char id[160];
    bool write = strcmp(method, "GET") != 0;
    if (write && a->role != KILN_AUTH_EDITOR)
        return send_error(c, 403, NULL, "Permission denied: a viewer token cannot change jobs");
    const char *j = rest;
    if (!*j || strcmp(j, "/") == 0) {
        if (strcmp(method, "POST") == 0) return job_create(d, c, project, rq);
        if (strcmp(method, "GET") == 0) return job_list(d, c, project);
        return send_error(c, 405, NULL, "use GET or POST on a job collection");
    }
    j++;
    const char *colon = strchr(j, ':');
    size_t il = colon ? (size_t)(colon - j) : strlen(j);
    if (il >= sizeof id || !kiln__api_valid_name(j, il))
        return send_error(c, 404, NULL, "Job projects/%s/jobs/%.*s not found", project,
                          (int)(il > 128 ? 128 : il), j);
    memcpy(id, j, il);
    id[il] = '\0';
    if (!colon) {
        if (strcmp(method, "GET") == 0) return job_get(d, c, project, id);
        if (strcmp(method, "PATCH") == 0) return job_patch(d, c, project, id, rq);
        return send_error(c, 405, NULL, "use GET or PATCH on a job");
    }
    if (strcmp(colon, ":cancel") == 0 && strcmp(method, "POST") == 0)
        return job_cancel(d, c, project, id);
    if (strcmp(colon, ":logs") == 0 && strcmp(method, "GET") == 0)
        return job_logs(d, c, project, id);
    if (strcmp(colon, ":metrics") == 0 && strcmp(method, "GET") == 0)
        return job_metrics(d, c, project, id);
    return send_error(c, 404, NULL, "unknown job method '%.40s' for %s", colon, method);
}

void kiln__api_jobs_cache_init(kilnd *d)
{
    d->cache = calloc(1, sizeof *d->cache);
    if (d->cache) pthread_mutex_init(&d->cache->mu, NULL);
}

void kiln__api_jobs_cache_free(kilnd *d)
{
    if (!d->cache) return;
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        free(d->cache->slot[i].key);
        free(d->cache->slot[i].body);
    }
    pthread_mutex_destroy(&d->cache->mu);
    free(d->cache);
    d->cache = NULL;
}
