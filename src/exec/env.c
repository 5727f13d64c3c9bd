/* src/exec/env.c - a replica's program and environment (kiln/exec.h). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/envvar.h"
#include "exec/kfenv.h"
#include "kiln/exec.h"
#include "kiln/submit.h"

void kiln_exec_task_name(kiln_role role, int index, char buf[48])
{
    snprintf(buf, 48, "%s-replica-%d", kiln_role_name(role), index);
}

static const char *tf_type(const kiln_job *job, kiln_role r)
{
    /* Vertex AI names the first pool's replica "chief" in TF_CONFIG */
    if (r == KILN_ROLE_MASTER)
        return job->training_input.use_chief_in_tf_config || job->training_input.has_vertex
                   ? "chief"
                   : "master";
    return kiln_role_name(r); /* worker, ps, evaluator */
}

char *kiln_exec_tf_config(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self)
{
    json_t *root = NULL, *ti = NULL, *cluster = json_object();
    char *job_json = NULL, *out = NULL;

    if (!cluster) goto out;
    /* cluster: master/chief, worker, ps in that order; evaluators stay outside */
    for (int r = KILN_ROLE_MASTER; r <= KILN_ROLE_PARAMETER_SERVER; r++) {
        json_t *list = NULL;
        for (size_t i = 0; i < n; i++) {
            if (tasks[i].role != (kiln_role)r) continue;
            if (!list && (!(list = json_array()) ||
                          json_object_set_new(cluster, tf_type(job, (kiln_role)r), list) < 0))
                goto out;
            char addr[300];
            snprintf(addr, sizeof addr, "%s:%d", tasks[i].host, tasks[i].port);
            if (json_array_append_new(list, json_string(addr)) < 0) goto out;
        }
    }
    /* "job": the trainingInput as the API shows it (a CustomJob's jobSpec) */
    if (job->training_input.has_vertex) {
        if (!(ti = kiln_job_custom_job_spec(job))) goto out;
    } else {
        if (!(job_json = kiln_job_to_json(job, KILN_ENC_COMPACT))) goto out;
        json_t *whole = json_loads(job_json, 0, NULL);
        if (!whole) goto out;
        ti = json_incref(json_object_get(whole, "trainingInput"));
        json_decref(whole);
        if (!ti && !(ti = json_object())) goto out;
    }
    root = json_pack("{s:O,s:{s:s,s:i},s:O,s:s}", "cluster", cluster, "task", "type",
                     tf_type(job, tasks[self].role), "index", tasks[self].index, "job", ti,
                     "environment", "cloud");
    if (!root) goto out;
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
    json_decref(cluster);
    json_decref(ti);
    json_decref(root);
    free(job_json);
    return out;
}

char *kiln_exec_vertex_cluster_spec(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                                    size_t self)
{
    json_t *root = NULL, *cluster = json_object(), *spec = NULL;
    char *out = NULL, pool[24];

    if (!cluster) goto out;
    /* every pool, evaluators included, by its index in workerPoolSpecs */
    for (int r = KILN_ROLE_MASTER; r < KILN_ROLE_COUNT; r++) {
        json_t *list = NULL;
        snprintf(pool, sizeof pool, "workerpool%d", r);
        for (size_t i = 0; i < n; i++) {
            if (tasks[i].role != (kiln_role)r) continue;
            if (!list && (!(list = json_array()) || json_object_set_new(cluster, pool, list) < 0))
                goto out;
            char addr[300];
            snprintf(addr, sizeof addr, "%s:%d", tasks[i].host, tasks[i].port);
            if (json_array_append_new(list, json_string(addr)) < 0) goto out;
        }
    }
    if (!(spec = kiln_job_custom_job_spec(job))) goto out;
    snprintf(pool, sizeof pool, "workerpool%d", (int)tasks[self].role);
    root = json_pack("{s:O,s:s,s:{s:s,s:i},s:O}", "cluster", cluster, "environment", "cloud",
                     "task", "type", pool, "index", tasks[self].index, "job", spec);
    if (!root) goto out;
    out = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
out:
    json_decref(cluster);
    json_decref(spec);
    json_decref(root);
    return out;
}

void kiln_exec_coll_key(const char *project, const char *job_id, long instance, int attempt,
                        char out[64])
{
    /* FNV-1a over "project/jobId": job ids may be long, the key may not */
    uint64_t h = 0xcbf29ce484222325ull;
    const char *parts[] = {project ? project : "", "/", job_id ? job_id : ""};
    for (int k = 0; k < 3; k++)
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++)
            h = (h ^ *p) * 0x100000001b3ull;
    snprintf(out, 64, "kiln-%016llx-%ld-a%d", (unsigned long long)h, instance, attempt);
}

kiln_err kiln__env_put(kiln_strv *env, const char *name, const char *value)
{
    char *s;
    if (asprintf(&s, "%s=%s", name, value) < 0) return KILN_ENOMEM;
    kiln_err err = kiln_strv_push(env, s);
    free(s);
    return err;
}

kiln_err kiln__env_put_int(kiln_strv *env, const char *name, long long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return kiln__env_put(env, name, buf);
}

/* nprocPerNode as a count: auto, cpu and gpu are decided by torchrun on the
 * node, so they count as 1 (what the operator does for WORLD_SIZE). */
static long nproc_count(const char *v)
{
    char *end = NULL;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    return n >= 1 && end && *end == '\0' ? n : 1;
}

/* The node rank: master 0, worker i is i + 1; -1 for the other roles. */
static int node_rank(const kiln_exec_task *t)
{
    if (t->role == KILN_ROLE_MASTER) return 0;
    return t->role == KILN_ROLE_WORKER ? t->index + 1 : -1;
}

/* Worker 0's task: the rendezvous host of an elastic job (kiln's master when
 * the PyTorchJob has Workers only). */
static const kiln_exec_task *worker0(const kiln_job *job, const kiln_exec_task *tasks, size_t n)
{
    kiln_role r =
        job->training_input.pytorch_job.workers_only ? KILN_ROLE_MASTER : KILN_ROLE_WORKER;
    for (size_t i = 0; i < n; i++)
        if (tasks[i].role == r && tasks[i].index == 0) return &tasks[i];
    return NULL;
}

/* torchrun's rendezvous (PET_ variables are its flags): the endpoint is worker
 * 0's address unless rdzvHost/rdzvPort say otherwise. With kiln's own endpoint
 * and c10d, is_host says which agent serves the store, so that it is worker
 * 0's (the address in the endpoint) rather than whichever agent binds first. */
static kiln_err elastic_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self,
                            kiln_strv *env)
{
    const kiln_pytorch_job *pt = &job->training_input.pytorch_job;
    const kiln_elastic_policy *ep = &pt->elastic_policy;
    const kiln_exec_task *w0 = worker0(job, tasks, n);
    const char *backend = ep->rdzv_backend && *ep->rdzv_backend ? ep->rdzv_backend : "c10d";
    char buf[512];
    size_t len = 0;
    kiln_err err;

    snprintf(buf, sizeof buf, "%lld:%lld", (long long)ep->min_replicas,
             (long long)ep->max_replicas);
    if ((err = kiln__env_put(env, "PET_NNODES", buf)) != KILN_OK) return err;
    snprintf(buf, sizeof buf, "%s:%lld",
             ep->rdzv_host && *ep->rdzv_host ? ep->rdzv_host : (w0 ? w0->host : "127.0.0.1"),
             ep->rdzv_port ? (long long)ep->rdzv_port : (long long)(w0 ? w0->port : 29400));
    if ((err = kiln__env_put(env, "PET_RDZV_ENDPOINT", buf)) != KILN_OK) return err;
    if ((err = kiln__env_put(env, "PET_RDZV_BACKEND", backend)) != KILN_OK) return err;
    const char *id = ep->rdzv_id && *ep->rdzv_id ? ep->rdzv_id : job->job_id;
    if ((err = kiln__env_put(env, "PET_RDZV_ID", id ? id : "kiln")) != KILN_OK) return err;
    buf[0] = '\0';
    for (size_t i = 0; i < ep->rdzv_conf.n && len < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s=%s", i ? "," : "",
                                ep->rdzv_conf.keys[i], ep->rdzv_conf.vals[i]);
    bool own = !(ep->rdzv_host && *ep->rdzv_host) && !ep->rdzv_port &&
               strcmp(backend, "c10d") == 0 && !kiln_map_get(&ep->rdzv_conf, "is_host");
    if (own && len < sizeof buf)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%sis_host=%s", len ? "," : "",
                                &tasks[self] == w0 ? "true" : "false");
    if (len && (err = kiln__env_put(env, "PET_RDZV_CONF", buf)) != KILN_OK) return err;
    if (ep->has_max_restarts &&
        (err = kiln__env_put_int(env, "PET_MAX_RESTARTS", (long long)ep->max_restarts)) != KILN_OK)
        return err;
    if (ep->standalone && (err = kiln__env_put(env, "PET_STANDALONE", "1")) != KILN_OK) return err;
    if (ep->n_proc_per_node && *ep->n_proc_per_node)
        return kiln__env_put(env, "PET_NPROC_PER_NODE", ep->n_proc_per_node);
    return KILN_OK;
}

/* What the training operator gives every replica of a PyTorchJob
 * (docs/job-model.md, "What a PyTorchJob replica sees"). */
static kiln_err pytorch_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n, size_t self,
                            kiln_strv *env)
{
    const kiln_pytorch_job *pt = &job->training_input.pytorch_job;
    const kiln_exec_task *me = &tasks[self], *master = NULL;
    long long nodes = 0;
    kiln_err err;

    if ((err = kiln__env_put(env, "PYTHONUNBUFFERED", "1")) != KILN_OK) return err;
    for (size_t i = 0; i < n; i++) {
        if (tasks[i].role == KILN_ROLE_MASTER && !master) master = &tasks[i];
        if (node_rank(&tasks[i]) >= 0) nodes++;
    }
    /* the Master's variables only where the PyTorchJob has a Master */
    if (master && !pt->workers_only && node_rank(me) >= 0) {
        const char *np = pt->nproc_per_node;
        if ((err = kiln__env_put(env, "MASTER_ADDR", master->host)) != KILN_OK ||
            (err = kiln__env_put(env, "PET_MASTER_ADDR", master->host)) != KILN_OK ||
            (err = kiln__env_put_int(env, "MASTER_PORT", master->port)) != KILN_OK ||
            (err = kiln__env_put_int(env, "PET_MASTER_PORT", master->port)) != KILN_OK ||
            (err = kiln__env_put_int(env, "WORLD_SIZE", nodes * nproc_count(np))) != KILN_OK ||
            (err = kiln__env_put_int(env, "RANK", node_rank(me))) != KILN_OK ||
            (err = kiln__env_put_int(env, "PET_NODE_RANK", node_rank(me))) != KILN_OK)
            return err;
        if (np && *np && (err = kiln__env_put(env, "PET_NPROC_PER_NODE", np)) != KILN_OK)
            return err;
        if (!pt->has_elastic_policy &&
            (err = kiln__env_put_int(env, "PET_NNODES", nodes)) != KILN_OK)
            return err;
    } else if (pt->nproc_per_node && *pt->nproc_per_node) {
        if ((err = kiln__env_put(env, "PET_NPROC_PER_NODE", pt->nproc_per_node)) != KILN_OK)
            return err;
    }
    if (pt->has_elastic_policy && node_rank(me) >= 0) return elastic_env(job, tasks, n, self, env);
    return KILN_OK;
}

kiln_err kiln_exec_replica_env(const kiln_job *job, const kiln_exec_task *tasks, size_t n,
                               size_t self, const char *const *gpus, size_t n_gpus, bool simulated,
                               kiln_strv *env)
{
    kiln_err err = KILN_ENOMEM;
    char *tf = NULL, *cuda = NULL, buf[64], task[48];
    size_t cl = 0, need = 1;

    kiln_strv_clear(env);
    if (!(tf = kiln_exec_tf_config(job, tasks, n, self))) goto out;
    if ((err = kiln__env_put(env, "TF_CONFIG", tf)) != KILN_OK) goto out;
    if (job->training_input.has_vertex) {
        /* Vertex AI's own cluster document, and its job variables */
        err = KILN_ENOMEM;
        free(tf);
        if (!(tf = kiln_exec_vertex_cluster_spec(job, tasks, n, self))) goto out;
        if ((err = kiln__env_put(env, "CLUSTER_SPEC", tf)) != KILN_OK) goto out;
        /* Vertex's number: the kiln job customjob_N is CustomJob N */
        const char *id = job->job_id ? job->job_id : "";
        if (strncmp(id, "customjob_", 10) == 0) id += 10;
        if (strncmp(id, "hptuningjob_", 12) == 0) id += 12;
        if ((err = kiln__env_put(env, "CLOUD_ML_JOB_ID", id)) != KILN_OK) goto out;
    } else if ((err = kiln__env_put(env, "CLUSTER_SPEC", tf)) != KILN_OK) {
        goto out;
    }

    /* PyTorchJob convention: the master and the workers form the world */
    const kiln_exec_task *me = &tasks[self], *master = NULL;
    int world = 0;
    for (size_t i = 0; i < n; i++) {
        if (tasks[i].role == KILN_ROLE_MASTER && !master) master = &tasks[i];
        if (tasks[i].role == KILN_ROLE_MASTER || tasks[i].role == KILN_ROLE_WORKER) world++;
    }
    if (job->training_input.has_pytorch_job) {
        if ((err = pytorch_env(job, tasks, n, self, env)) != KILN_OK) goto out;
    } else if (job->training_input.has_kubeflow_job) {
        /* JAXJob, PaddleJob, XGBoostJob: their operator's variables only */
        if ((err = kiln__exec_kubeflow_env(job, tasks, n, self, env)) != KILN_OK) goto out;
    } else if (master && (me->role == KILN_ROLE_MASTER || me->role == KILN_ROLE_WORKER)) {
        if ((err = kiln__env_put(env, "MASTER_ADDR", master->host)) != KILN_OK) goto out;
        snprintf(buf, sizeof buf, "%d", master->port);
        if ((err = kiln__env_put(env, "MASTER_PORT", buf)) != KILN_OK) goto out;
        snprintf(buf, sizeof buf, "%d", world);
        if ((err = kiln__env_put(env, "WORLD_SIZE", buf)) != KILN_OK) goto out;
        snprintf(buf, sizeof buf, "%d", me->role == KILN_ROLE_MASTER ? 0 : me->index + 1);
        if ((err = kiln__env_put(env, "RANK", buf)) != KILN_OK) goto out;
    }

    err = KILN_ENOMEM;
    for (size_t i = 0; i < n_gpus; i++)
        need += strlen(gpus[i]) + 1;
    if (!(cuda = calloc(need, 1))) goto out;
    for (size_t i = 0; i < n_gpus; i++)
        cl += (size_t)snprintf(cuda + cl, need - cl, "%s%s", i ? "," : "", gpus[i]);
    if ((err = kiln__env_put(env, "CUDA_VISIBLE_DEVICES", cuda)) != KILN_OK) goto out;
    /* simulated GPUs are indices; for real ones the UUIDs name the same
     * GPUs in any order CUDA counts, and the order is still set so that
     * /gpu:N follows PCI bus order (NVML's) among them */
    if ((err = kiln__env_put(env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID")) != KILN_OK) goto out;
    /* NVIDIA's container runtime hook reads this from the container's
     * environment (an image's own ENV often says "all"): exactly the
     * replica's GPUs, "void" for none */
    if ((err = kiln__env_put(env, "NVIDIA_VISIBLE_DEVICES",
                             n_gpus && !simulated ? cuda : "void")) != KILN_OK)
        goto out;
    if (n_gpus && simulated && (err = kiln__env_put(env, "KILN_SIMULATED_DEVICES", "1")) != KILN_OK)
        goto out;
    kiln_exec_task_name(me->role, me->index, task);
    if ((err = kiln__env_put(env, "KILN_TASK_NAME", task)) != KILN_OK) goto out;
    err = kiln__env_put(env, "KILN_JOB_ID", job->job_id ? job->job_id : "");
out:
    free(tf);
    free(cuda);
    if (err != KILN_OK) kiln_strv_clear(env);
    return err;
}

/* The image a replica of `role` names (its own imageUri, else the master's,
 * as AI Platform defaults it), or NULL. A runtimeVersion's image comes from
 * the catalog, which the caller asks (the supervisor's image_of). */
const char *kiln_exec_image(const kiln_job *job, kiln_role role)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    if (rc && rc->image_uri && *rc->image_uri) return rc->image_uri;
    if (mc && mc->image_uri && *mc->image_uri) return mc->image_uri;
    return NULL;
}

/* A container's ENTRYPOINT override (containerCommand) and CMD override
 * (containerArgs, then the program args: user args after `--` and
 * --job-dir), each the role's, else the master's. */
kiln_err kiln_exec_container_program(const kiln_job *job, kiln_role role, kiln_strv *cmd,
                                     kiln_strv *args)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    kiln_strv pargs = {0};
    if (!rc || (rc->container_command.n == 0 && rc->container_args.n == 0)) rc = mc;
    kiln_err err = kiln_job_program_args(job, &pargs);
    /* a runtime version's image runs the job's module, as AI Platform ran
     * it on that runtime (validated: a runtimeVersion job has a module or a
     * containerCommand) */
    const kiln_training_input *ti = &job->training_input;
    if (err == KILN_OK && ti->runtime_version && *ti->runtime_version && ti->python_module &&
        *ti->python_module && (!rc || (rc->container_command.n == 0 && rc->container_args.n == 0)))
        if ((err = kiln_strv_push(cmd, "python3")) == KILN_OK &&
            (err = kiln_strv_push(cmd, "-m")) == KILN_OK)
            err = kiln_strv_push(cmd, ti->python_module);
    for (size_t i = 0; err == KILN_OK && rc && i < rc->container_command.n; i++)
        err = kiln_strv_push(cmd, rc->container_command.v[i]);
    for (size_t i = 0; err == KILN_OK && rc && i < rc->container_args.n; i++)
        err = kiln_strv_push(args, rc->container_args.v[i]);
    for (size_t i = 0; err == KILN_OK && i < pargs.n; i++)
        err = kiln_strv_push(args, pargs.v[i]);
    kiln_strv_clear(&pargs);
    return err;
}

void kiln_exec_container_name(const char *project, const char *job_id, const char *task, char *buf,
                              size_t len)
{
    snprintf(buf, len, "kiln-%s-%s-%s", project, job_id, task);
}

kiln_err kiln_exec_vertex_dirs(const kiln_job *job, int trial, kiln_strv *env)
{
    static const char *const vars[3][2] = {{"AIP_MODEL_DIR", "model/"},
                                           {"AIP_CHECKPOINT_DIR", "checkpoints/"},
                                           {"AIP_TENSORBOARD_LOG_DIR", "logs/"}};
    const char *base = job->training_input.vertex.base_output_directory;
    char val[4096], t[24] = "";
    if (!job->training_input.has_vertex || !base || !*base) return KILN_OK;
    size_t bl = strlen(base);
    bool slash = bl && base[bl - 1] == '/';
    if (trial > 0) snprintf(t, sizeof t, "%d/", trial);
    for (int k = 0; k < 3; k++) {
        snprintf(val, sizeof val, "%s%s%s%s", base, slash ? "" : "/", t, vars[k][1]);
        kiln_err err = kiln__env_put(env, vars[k][0], val);
        if (err != KILN_OK) return err;
    }
    return KILN_OK;
}

kiln_err kiln_exec_user_env(const kiln_job *job, kiln_role role, kiln_strv *env)
{
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    kiln_err err = KILN_OK;
    for (size_t k = 0; rc && k < rc->env.n && err == KILN_OK; k++)
        err = kiln__env_put(env, rc->env.keys[k], rc->env.vals[k]);
    return err;
}

kiln_err kiln_exec_program(const kiln_job *job, kiln_role role, const kiln_exec_paths *paths,
                           kiln_strv *argv, char *why, size_t whylen)
{
    const kiln_training_input *ti = &job->training_input;
    const kiln_replica_config *rc = kiln_job_role_config(job, role);
    const kiln_replica_config *mc = kiln_job_role_config(job, KILN_ROLE_MASTER);
    kiln_strv pargs = {0};
    kiln_err err = KILN_ENOMEM;

    kiln_strv_clear(argv);
    if (!rc || (rc->container_command.n == 0 && rc->container_args.n == 0)) rc = mc;
    if (rc && rc->container_command.n > 0) {
        /* containerCommand/containerArgs: a plain process (no container runtime) */
        for (size_t i = 0; i < rc->container_command.n; i++)
            if (kiln_strv_push(argv, rc->container_command.v[i]) != KILN_OK) goto out;
        for (size_t i = 0; i < rc->container_args.n; i++)
            if (kiln_strv_push(argv, rc->container_args.v[i]) != KILN_OK) goto out;
        err = KILN_OK;
        goto out;
    }
    if ((!ti->python_module || !*ti->python_module) && rc && rc->image_uri && *rc->image_uri) {
        snprintf(why, whylen,
                 "the %s replica runs the image %s by its entrypoint, and this kilnd has no "
                 "container runtime: give a containerCommand to run it as a plain process",
                 kiln_role_name(role), rc->image_uri);
        err = KILN_EINVAL;
        goto out;
    }
    if (!ti->python_module || !*ti->python_module) {
        snprintf(why, whylen,
                 "nothing to run: the job names no pythonModule and the %s has no "
                 "containerCommand (kiln runs no container images without a container runtime)",
                 kiln_role_name(role));
        err = KILN_EINVAL;
        goto out;
    }
    if (strncmp(ti->python_module, "kiln.", 5) == 0) {
        if (!paths->kiln_train) {
            snprintf(why, whylen, "module %s needs kiln-train, which this kilnd cannot find",
                     ti->python_module);
            err = KILN_EINVAL;
            goto out;
        }
        if (kiln_strv_push(argv, paths->kiln_train) != KILN_OK ||
            kiln_strv_push(argv, ti->python_module + 5) != KILN_OK)
            goto out;
    } else {
        if (kiln_strv_push(argv, paths->python ? paths->python : "python3") != KILN_OK ||
            kiln_strv_push(argv, "-m") != KILN_OK ||
            kiln_strv_push(argv, ti->python_module) != KILN_OK)
            goto out;
    }
    if ((err = kiln_job_program_args(job, &pargs)) != KILN_OK) goto out;
    err = KILN_ENOMEM;
    for (size_t i = 0; i < pargs.n; i++)
        if (kiln_strv_push(argv, pargs.v[i]) != KILN_OK) goto out;
    err = KILN_OK;
out:
    kiln_strv_clear(&pargs);
    if (err != KILN_OK) kiln_strv_clear(argv);
    return err;
}
