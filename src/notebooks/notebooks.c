/* src/notebooks/notebooks.c - notebook instances as kiln jobs (notebooks.h).
 *
 * Why a job: a running instance needs exactly what a replica gets - a
 * placement by the scheduler on GPUs it holds alone, the project's Unix
 * user, CUDA_VISIBLE_DEVICES, a kiln-monitor that outlives kilnd and is
 * adopted by the next one, a log, GPU time. Making it a job (one master
 * replica whose command runs JupyterLab) gives all of that with no second
 * path through the scheduler and supervisor; the instance's own document
 * keeps what outlives one run (its spec, home, wanted state). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "notebooks/notebooks_int.h"
#include "kiln/auth.h"
#include "kiln/catalog.h"
#include "kiln/job.h"
#include "kiln/objects.h"
#include "kiln/store.h"
#include "util/atomic.h"

#define KIND    "notebook"
#define OP_KIND "nbop"
#define EVENTS  20 /* kept per instance */

kiln_notebooks *kiln_notebooks_new(const kiln_notebooks_config *cfg)
{
    kiln_notebooks *nb = calloc(1, sizeof *nb);
    if (!nb) return NULL;
    if (pthread_mutex_init(&nb->mu, NULL) != 0) {
        free(nb);
        return NULL;
    }
    nb->data_dir = cfg->data_dir;
    nb->store = cfg->store;
    nb->catalog = cfg->catalog;
    nb->objects = cfg->objects;
    nb->users = cfg->users;
    nb->jobfiles = cfg->jobfiles;
    nb->python = cfg->python;
    nb->env = cfg->env;
    nb->env_n = cfg->env_n;
    nb->stop = cfg->stop;
    nb->wake = cfg->wake;
    return nb;
}

void kiln_notebooks_free(kiln_notebooks *nb)
{
    if (!nb) return;
    pthread_mutex_destroy(&nb->mu);
    free(nb);
}

void kiln_nb_home(const kiln_notebooks *nb, const char *project, const char *name, char *buf,
                  size_t len)
{
    snprintf(buf, len, "%s/notebooks/%s/%s", nb->data_dir, project, name);
}

kiln_err kiln_nb_script(kiln_notebooks *nb, const char *project, const char *uri, char *path,
                        size_t len, char *why, size_t whylen)
{
    char bucket[64];
    const char *proj = NULL, *slash = strncmp(uri, "gs://", 5) == 0 ? strchr(uri + 5, '/') : NULL;
    const char *name = slash ? slash + 1 : NULL, *bad = NULL;
    kiln_object_meta m = {0};
    if (!slash || (size_t)(slash - uri - 5) >= sizeof bucket || !*name) {
        snprintf(why, whylen, "'%.200s': kiln takes a gs://BUCKET/OBJECT of its staging store",
                 uri);
        return KILN_EINVAL;
    }
    snprintf(bucket, sizeof bucket, "%.*s", (int)(slash - uri - 5), uri + 5);
    if (!kiln_objects_valid_name(name, strlen(name), &bad) ||
        !kiln_objects_holds(nb->objects, bucket, &proj) || (proj && strcmp(proj, project) != 0)) {
        snprintf(why, whylen,
                 "'%.200s': kilnd does not hold that bucket for project %s (kilnd --bucket "
                 "NAME[:PROJECT])",
                 uri, project);
        return KILN_EINVAL;
    }
    kiln_err err = kiln_objects_stat(nb->objects, bucket, name, &m);
    kiln_object_meta_clear(&m);
    if (err == KILN_OK) err = kiln_objects_path(nb->objects, bucket, name, path, len);
    if (err != KILN_OK)
        snprintf(why, whylen, "'%.200s': no such object in kilnd's staging store", uri);
    return err;
}

/* The instance's post-startup script, copied for this run where its
 * Jupyter's user can read it (DATA/notebooks/P/.NAME.post-startup.sh), or
 * "" when it has none. -1 with why. */
static int stage_script(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                        char *out, size_t len, char *why, size_t whylen)
{
    const char *uri = json_string_value(json_object_get(doc, "postStartupScript"));
    char src[4096];
    out[0] = '\0';
    if (!uri) return 0;
    if (kiln_nb_script(nb, project, uri, src, sizeof src, why, whylen) != KILN_OK) return -1;
    FILE *f = fopen(src, "rb");
    char *buf = malloc(1 << 20);
    size_t n = f && buf ? fread(buf, 1, 1 << 20, f) : 0;
    bool whole = f && buf && feof(f);
    if (f) fclose(f);
    snprintf(out, len, "%s/notebooks/%s/.%s.post-startup.sh", nb->data_dir, project, name);
    int rc = whole ? kiln__write_atomic(out, buf, n, 0644) : -1;
    free(buf);
    if (rc < 0) snprintf(why, whylen, "cannot stage the postStartupScript %s (at most 1 MiB)", uri);
    return rc < 0 ? -1 : 0;
}

/* ---------- environments ---------- */

/* The Deep Learning VM families kiln knows: common-*, tf-*, tf2-*,
 * pytorch-*, with an optional -notebooks suffix (what Workbench lists). */
static bool known_family(const char *f)
{
    static const char *const pre[] = {"common-", "tf-", "tf2-", "pytorch-"};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
        if (strncmp(f, pre[i], strlen(pre[i])) == 0 && f[strlen(pre[i])]) return true;
    return false;
}

const char *kiln_nb_python(const kiln_notebooks *nb, const char *family, const char *image,
                           char *why, size_t whylen)
{
    const char *key = family ? family : image;
    for (size_t i = 0; key && i < nb->env_n; i++) {
        const char *eq = strchr(nb->env[i], '=');
        if (eq && strlen(key) == (size_t)(eq - nb->env[i]) &&
            strncmp(nb->env[i], key, strlen(key)) == 0)
            return eq + 1;
    }
    if (family && known_family(family)) {
        if (nb->python && access(nb->python, X_OK) == 0) return nb->python;
        snprintf(why, whylen,
                 "this kilnd has no notebook environment: the Python with JupyterLab "
                 "(--notebook-python, default ~/.cache/kiln/notebook-venv/bin/python, made by "
                 "scripts/bootstrap) is not there%s%s",
                 nb->python ? ": " : "", nb->python ? nb->python : "");
        return NULL;
    }
    snprintf(why, whylen,
             "no notebook environment for %s '%s': kiln knows the families common-*, tf-*, "
             "tf2-*, pytorch-*; others need kilnd --notebook-env %s=PYTHON",
             family ? "vmImage.imageFamily" : "vmImage.imageName", key ? key : "", key ? key : "");
    return NULL;
}

/* ---------- documents ---------- */

static json_t *load(kiln_notebooks *nb, const char *kind, const char *project, const char *name)
{
    char *s = NULL;
    if (kiln_store_doc_get(nb->store, kind, project, name, &s) != KILN_OK) return NULL;
    json_t *v = json_loads(s, 0, NULL);
    free(s);
    return v;
}

static kiln_err save(kiln_notebooks *nb, const char *kind, const char *project, const char *name,
                     json_t *v)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (v && !s) return KILN_ENOMEM;
    kiln_err err = kiln_store_doc_put(nb->store, kind, project, name, s);
    free(s);
    return err;
}

static json_t *kiln_part(json_t *doc)
{
    json_t *k = json_object_get(doc, "kiln");
    if (!json_is_object(k)) {
        k = json_object();
        json_object_set_new(doc, "kiln", k);
    }
    return k;
}

static const char *kstr(json_t *doc, const char *key)
{
    return json_string_value(json_object_get(json_object_get(doc, "kiln"), key));
}

static void now_text(char buf[32])
{
    kiln_format_time(kiln_now_ns(), buf);
}

/* An event on the instance (the last EVENTS are kept) and on its job's log. */
static void event(kiln_notebooks *nb, json_t *doc, const char *project, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void event(kiln_notebooks *nb, json_t *doc, const char *project, const char *fmt, ...)
{
    char msg[512], t[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    now_text(t);
    json_t *k = kiln_part(doc), *ev = json_object_get(k, "events");
    if (!json_is_array(ev)) {
        ev = json_array();
        json_object_set_new(k, "events", ev);
    }
    json_array_append_new(ev, json_pack("{s:s,s:s}", "time", t, "message", msg));
    while (json_array_size(ev) > EVENTS)
        json_array_remove(ev, 0);
    const char *job = kstr(doc, "job");
    if (job) kiln_jobfiles_event(nb->jobfiles, project, job, "INFO", "notebook: %s", msg);
}

static void set_state(json_t *doc, const char *state)
{
    const char *was = json_string_value(json_object_get(doc, "state"));
    if (was && strcmp(was, state) == 0) return;
    char t[32];
    now_text(t);
    json_object_set_new(doc, "state", json_string(state));
    json_object_set_new(doc, "updateTime", json_string(t));
}

kiln_err kiln_nb_create(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                        char *why, size_t whylen)
{
    char home[4096], t[32];
    kiln_err err;
    long uid = -1, gid = -1;

    if ((err = kiln_users_project(nb->users, project, &uid, &gid, why, whylen)) != KILN_OK)
        return err;
    pthread_mutex_lock(&nb->mu);
    json_t *old = load(nb, KIND, project, name);
    if (old) {
        json_decref(old);
        err = KILN_EEXIST;
        goto out;
    }
    kiln_nb_home(nb, project, name, home, sizeof home);
    if (kilnd_mkdirs(home) < 0) {
        snprintf(why, whylen, "cannot make the instance's home %s: %s", home, strerror(errno));
        err = KILN_EIO;
        goto out;
    }
    if (uid >= 0 && chown(home, (uid_t)uid, (gid_t)gid) < 0) {
        snprintf(why, whylen, "cannot give the instance's home %s to uid %ld: %s", home, uid,
                 strerror(errno));
        err = KILN_EIO;
        goto out;
    }
    now_text(t);
    json_object_set_new(doc, "createTime", json_string(t));
    json_object_set_new(doc, "updateTime", json_string(t));
    json_object_set_new(doc, "state", json_string("PROVISIONING"));
    json_t *k = kiln_part(doc);
    json_object_set_new(k, "want", json_string("ACTIVE"));
    json_object_set_new(k, "gen", json_integer(0));
    event(nb, doc, project, "created");
    err = save(nb, KIND, project, name, doc);
    if (err != KILN_OK) snprintf(why, whylen, "cannot store the instance: %s", kiln_err_str(err));
out:
    pthread_mutex_unlock(&nb->mu);
    return err;
}

json_t *kiln_nb_get(kiln_notebooks *nb, const char *project, const char *name)
{
    pthread_mutex_lock(&nb->mu);
    json_t *v = load(nb, KIND, project, name);
    pthread_mutex_unlock(&nb->mu);
    return v;
}

json_t *kiln_nb_list(kiln_notebooks *nb, const char *project)
{
    kiln_store_doc *v = NULL;
    size_t n = 0;
    json_t *out = json_array();
    if (kiln_store_doc_list(nb->store, KIND, project, &v, &n) != KILN_OK) {
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; out && i < n; i++) {
        json_t *doc = json_loads(v[i].json, 0, NULL);
        if (doc) json_array_append_new(out, doc);
    }
    kiln_store_docs_free(v, n);
    return out;
}

kiln_err kiln_nb_want(kiln_notebooks *nb, const char *project, const char *name, const char *want,
                      char *why, size_t whylen)
{
    kiln_err err = KILN_OK;
    pthread_mutex_lock(&nb->mu);
    json_t *doc = load(nb, KIND, project, name);
    if (!doc) {
        err = KILN_ENOTFOUND;
        goto out;
    }
    const char *was = kstr(doc, "want"), *state = json_string_value(json_object_get(doc, "state"));
    if (was && strcmp(was, "DELETED") == 0) {
        snprintf(why, whylen, "the instance is being deleted");
        err = KILN_ECONFLICT;
        goto out;
    }
    /* reset restarts a running instance: a stopped one has nothing to reset */
    if (strcmp(want, "RESET") == 0 && state && strcmp(state, "STOPPED") == 0) {
        snprintf(why, whylen, "the instance is STOPPED: start it instead of resetting it");
        err = KILN_ECONFLICT;
        goto out;
    }
    json_object_set_new(kiln_part(doc), "want", json_string(want));
    event(nb, doc, project, "%s requested",
          strcmp(want, "ACTIVE") == 0    ? "start"
          : strcmp(want, "STOPPED") == 0 ? "stop"
          : strcmp(want, "RESET") == 0   ? "reset"
                                         : "delete");
    err = save(nb, KIND, project, name, doc);
    if (err != KILN_OK) snprintf(why, whylen, "cannot store the instance: %s", kiln_err_str(err));
out:
    json_decref(doc);
    pthread_mutex_unlock(&nb->mu);
    return err;
}

kiln_err kiln_nb_update(kiln_notebooks *nb, const char *project, const char *name, json_t *set,
                        char *why, size_t whylen)
{
    kiln_err err = KILN_OK;
    pthread_mutex_lock(&nb->mu);
    json_t *doc = load(nb, KIND, project, name);
    if (!doc) {
        err = KILN_ENOTFOUND;
        goto out;
    }
    const char *state = json_string_value(json_object_get(doc, "state"));
    const char *want = kstr(doc, "want");
    bool stopped = state && strcmp(state, "STOPPED") == 0 && want && strcmp(want, "STOPPED") == 0;
    const char *key;
    json_t *v;
    json_object_foreach(set, key, v)
    {
        if (strcmp(key, "labels") != 0 && !stopped) {
            snprintf(why, whylen,
                     "%s changes only while the instance is STOPPED (it is %s): stop it first", key,
                     state ? state : "?");
            err = KILN_ECONFLICT;
            goto out;
        }
    }
    json_object_foreach(set, key, v)
    {
        if (json_is_null(v))
            json_object_del(doc, key);
        else
            json_object_set(doc, key, v);
    }
    char t[32];
    now_text(t);
    json_object_set_new(doc, "updateTime", json_string(t));
    event(nb, doc, project, "updated");
    err = save(nb, KIND, project, name, doc);
    if (err != KILN_OK) snprintf(why, whylen, "cannot store the instance: %s", kiln_err_str(err));
out:
    json_decref(doc);
    pthread_mutex_unlock(&nb->mu);
    return err;
}

kiln_err kiln_nb_upstream(kiln_notebooks *nb, const char *project, const char *name, int *port,
                          char *why, size_t whylen)
{
    json_t *doc = kiln_nb_get(nb, project, name);
    if (!doc) return KILN_ENOTFOUND;
    const char *state = json_string_value(json_object_get(doc, "state"));
    json_int_t p = json_integer_value(json_object_get(json_object_get(doc, "kiln"), "port"));
    kiln_err err = KILN_OK;
    if (!state || strcmp(state, "ACTIVE") != 0 || p <= 0) {
        snprintf(why, whylen, "the instance is %s, not ACTIVE", state ? state : "unknown");
        err = KILN_ECONFLICT;
    }
    *port = (int)p;
    json_decref(doc);
    return err;
}

/* ---------- operations ---------- */

static unsigned long long op_counter;

json_t *kiln_nb_op_new(kiln_notebooks *nb, const char *project, const char *location,
                       const char *name, const char *verb, const char *until, int after_gen)
{
    char id[64], t[32], full[512], target[400];
    unsigned long long n = __atomic_add_fetch(&op_counter, 1, __ATOMIC_RELAXED);
    snprintf(id, sizeof id, "operation-%lld-%llu", (long long)(kiln_now_ns() / 1000000), n);
    snprintf(full, sizeof full, "projects/%s/locations/%s/operations/%s", project, location, id);
    snprintf(target, sizeof target, "projects/%s/locations/%s/instances/%s", project, location,
             name);
    now_text(t);
    json_t *op =
        json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:s},s:b,s:{s:s,s:s,s:s*}}", "name", full, "metadata",
                  "@type", "type.googleapis.com/google.cloud.notebooks.v1.OperationMetadata",
                  "createTime", t, "target", target, "verb", verb, "apiVersion", "v1", "done",
                  until == NULL, "kiln", "project", project, "instance", name, "until", until);
    if (!op) return NULL;
    json_object_set_new(json_object_get(op, "kiln"), "afterGen", json_integer(after_gen));
    if (!until) {
        json_object_set_new(op, "response",
                            json_pack("{s:s,s:s}", "@type",
                                      "type.googleapis.com/google.cloud.notebooks.v1.Instance",
                                      "name", target));
        json_object_set_new(json_object_get(op, "metadata"), "endTime", json_string(t));
    }
    if (save(nb, OP_KIND, project, id, op) != KILN_OK) {
        json_decref(op);
        return NULL;
    }
    return op;
}

json_t *kiln_nb_op_get(kiln_notebooks *nb, const char *project, const char *op_id)
{
    return load(nb, OP_KIND, project, op_id);
}

/* Finishes the operations whose instance got where they wait for; drops
 * finished ones after an hour. */
static void ops_tick(kiln_notebooks *nb)
{
    kiln_store_doc *v = NULL;
    size_t n = 0;
    if (kiln_store_doc_list(nb->store, OP_KIND, NULL, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n; i++) {
        json_t *op = json_loads(v[i].json, 0, NULL), *inst = NULL;
        if (!op) continue;
        json_t *md = json_object_get(op, "metadata");
        if (json_is_true(json_object_get(op, "done"))) {
            struct tm tm = {0};
            const char *end = json_string_value(json_object_get(md, "endTime"));
            if (end && strptime(end, "%Y-%m-%dT%H:%M:%S", &tm) && time(NULL) - timegm(&tm) > 3600)
                kiln_store_doc_put(nb->store, OP_KIND, v[i].project, v[i].name, NULL);
            json_decref(op);
            continue;
        }
        const char *until = kstr(op, "until"), *name = kstr(op, "instance");
        inst = name ? kiln_nb_get(nb, v[i].project, name) : NULL;
        const char *state = json_string_value(json_object_get(inst, "state"));
        const char *want = kstr(inst, "want");
        bool done = false;
        json_t *error = NULL;
        if (strcmp(until, "GONE") == 0) {
            done = !inst;
        } else if (!inst) {
            done = true;
            error = json_pack("{s:i,s:s}", "code", 5, "message", "the instance was deleted");
        } else if (state && strcmp(state, until) == 0 &&
                   (strcmp(until, "ACTIVE") != 0 ||
                    json_integer_value(json_object_get(json_object_get(inst, "kiln"), "gen")) >
                        json_integer_value(
                            json_object_get(json_object_get(op, "kiln"), "afterGen")))) {
            /* ACTIVE counts from a run after the one of the request (reset) */
            done = true;
        } else if (strcmp(until, "ACTIVE") == 0 && state && strcmp(state, "STOPPED") == 0 && want &&
                   strcmp(want, "STOPPED") == 0) {
            /* it was to start and stopped instead: say why (its last event) */
            json_t *ev = json_object_get(json_object_get(inst, "kiln"), "events");
            const char *last = json_string_value(
                json_object_get(json_array_get(ev, json_array_size(ev) - 1), "message"));
            done = true;
            error = json_pack("{s:i,s:s}", "code", 9, "message",
                              last ? last : "the instance stopped before it was ACTIVE");
        }
        if (done) {
            char t[32];
            now_text(t);
            json_object_set_new(op, "done", json_true());
            json_object_set_new(md, "endTime", json_string(t));
            if (error)
                json_object_set_new(op, "error", error);
            else if (strcmp(until, "GONE") == 0)
                json_object_set_new(
                    op, "response",
                    json_pack("{s:s}", "@type", "type.googleapis.com/google.protobuf.Empty"));
            else
                json_object_set_new(
                    op, "response",
                    json_pack("{s:s,s:s}", "@type",
                              "type.googleapis.com/google.cloud.notebooks.v1.Instance", "name",
                              json_string_value(json_object_get(md, "target"))));
            save(nb, OP_KIND, v[i].project, v[i].name, op);
        }
        json_decref(inst);
        json_decref(op);
    }
    kiln_store_docs_free(v, n);
}

/* ---------- the instance's job ---------- */

/* What the replica runs: JupyterLab on the replica's port (MASTER_PORT, the
 * port kilnd gave it), behind kilnd's proxy (base_url, no token of its own:
 * kilnd is the door), in the instance's home; without what a training
 * replica's cluster variables say (TF_CONFIG: a notebook is no cluster).
 * allow_remote_access: the Host header is kilnd's public name (kept, so
 * that Jupyter's WebSocket origin check sees Origin and Host agree); Jupyter
 * still listens on loopback only. */
static const char nb_script[] =
    "unset TF_CONFIG CLUSTER_SPEC MASTER_ADDR WORLD_SIZE RANK\n"
    "port=$MASTER_PORT; unset MASTER_PORT\n"
    /* the environment's python and jupyter first on PATH (terminals, exec) */
    "export HOME=\"$3\" KILN_NOTEBOOK=\"$4\" PATH=\"$(dirname \"$1\"):$PATH\"\n"
    "cd \"$HOME\" || exit 1\n"
    /* root only where the site allowed root replicas (--allow-root-replicas) */
    "if [ -n \"$5\" ]; then echo \"kiln: postStartupScript\"; /bin/bash \"$5\" ||"
    " echo \"kiln: postStartupScript failed (exit $?); JupyterLab starts anyway\"; fi\n"
    "root=; [ \"$(id -u)\" -eq 0 ] && root=--ServerApp.allow_root=True\n"
    "exec \"$1\" -m jupyterlab $root --no-browser --ip=127.0.0.1 --port=\"$port\" "
    "--ServerApp.port_retries=0 --ServerApp.base_url=\"$2\" --IdentityProvider.token= "
    "--ServerApp.password= --ServerApp.disable_check_xsrf=True "
    "--ServerApp.allow_remote_access=True "
    "--ServerApp.root_dir=\"$HOME\" --ServerApp.terminado_settings='{\"shell_command\": "
    "[\"/bin/bash\"]}'\n";

/* The instance's location is a zone (us-west1-b) or a region: the job's
 * region is the region. */
static void region_of(const char *location, char *out, size_t len)
{
    snprintf(out, len, "%s", location);
    char *dash = strrchr(out, '-');
    /* a zone ends in -LETTER */
    if (dash && strlen(dash) == 2 && dash[1] >= 'a' && dash[1] <= 'z') *dash = '\0';
}

/* projects/P/locations/L/instances/N: L */
static void location_of(json_t *doc, char *out, size_t len)
{
    const char *full = json_string_value(json_object_get(doc, "name"));
    const char *l = full ? strstr(full, "/locations/") : NULL;
    out[0] = '\0';
    if (!l) return;
    l += 11;
    const char *e = strchr(l, '/');
    snprintf(out, len, "%.*s", (int)(e ? e - l : (long)strlen(l)), l);
}

static json_t *nb_job_json(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                           int gen, const char *script, char *why, size_t whylen)
{
    char id[160], base[300], home[4096], loc[128], region[128];
    json_t *vm = json_object_get(doc, "vmImage");
    const char *py =
        kiln_nb_python(nb, json_string_value(json_object_get(vm, "imageFamily")),
                       json_string_value(json_object_get(vm, "imageName")), why, whylen);
    if (!py) return NULL;
    snprintf(id, sizeof id, "notebook_%s_%d", name, gen);
    for (char *p = id; *p; p++)
        if (*p == '-') *p = '_';
    snprintf(base, sizeof base, "/notebooks/%s/%s/", project, name);
    kiln_nb_home(nb, project, name, home, sizeof home);
    location_of(doc, loc, sizeof loc);
    region_of(loc, region, sizeof region);
    json_t *mc = json_pack("{s:[s,s,s,s,s,s,s,s,s]}", "containerCommand", "/bin/sh", "-c",
                           nb_script, "kiln-notebook", py, base, home, name, script);
    json_t *acc = json_object_get(doc, "acceleratorConfig");
    if (acc && json_object_get(acc, "coreCount")) {
        json_t *c = json_object_get(acc, "coreCount");
        char count[32];
        snprintf(count, sizeof count, "%lld",
                 json_is_string(c) ? atoll(json_string_value(c))
                                   : (long long)json_integer_value(c));
        json_object_set_new(
            mc, "acceleratorConfig",
            json_pack("{s:O,s:s}", "type", json_object_get(acc, "type"), "count", count));
    }
    const char *mt = json_string_value(json_object_get(doc, "machineType"));
    /* gcloud's default n1-standard-1 (and n1-standard-2) are not in the
     * catalog (AI Platform never trained on them): placed as the smallest
     * n1-standard type it has (docs/notebooks.md) */
    if (mt && (strcmp(mt, "n1-standard-1") == 0 || strcmp(mt, "n1-standard-2") == 0))
        mt = "n1-standard-4";
    json_t *job = json_pack("{s:s,s:{s:s},s:{s:s,s:s,s:s,s:o,s:{s:s}}}", "jobId", id, "labels",
                            "kiln-notebook", name, "trainingInput", "scaleTier", "CUSTOM",
                            "masterType", mt ? mt : "n1-standard-4", "region", region,
                            "masterConfig", mc, "scheduling", "maxRunningTime", "3153600000s");
    if (!job) snprintf(why, whylen, "out of memory");
    return job;
}

/* The job's error in the instance's terms. */
static const char *field_of(const char *jf)
{
    if (strcmp(jf, "trainingInput.masterType") == 0) return "machineType";
    if (strncmp(jf, "trainingInput.masterConfig.acceleratorConfig", 44) == 0)
        return "acceleratorConfig";
    if (strcmp(jf, "trainingInput.region") == 0) return "location";
    return jf;
}

kiln_err kiln_nb_check_job(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                           char *field, size_t flen, char *why, size_t whylen)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_err err = KILN_EINVAL;
    char path[4096], *s = NULL;
    const char *uri = json_string_value(json_object_get(doc, "postStartupScript"));
    snprintf(field, flen, "postStartupScript");
    if (uri && kiln_nb_script(nb, project, uri, path, sizeof path, why, whylen) != KILN_OK)
        goto out;
    snprintf(field, flen, "vmImage");
    json_t *jj = nb_job_json(nb, project, name, doc, 0, "", why, whylen);
    s = jj ? json_dumps(jj, JSON_COMPACT) : NULL;
    json_decref(jj);
    if (!s) goto out;
    err = kiln_job_from_json(s, strlen(s), &job, &dg);
    if (err == KILN_OK) err = kiln_catalog_validate(nb->catalog, job, &dg);
    if (err == KILN_OK) err = kiln_catalog_check_honoured(nb->catalog, job, &dg);
    if (err != KILN_OK) {
        snprintf(field, flen, "%s", dg.n ? field_of(dg.v[0].field) : "");
        snprintf(why, whylen, "%s", dg.n ? dg.v[0].description : kiln_err_str(err));
    }
out:
    free(s);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return err;
}

/* Creates the instance's next job; its id into doc's kiln.job. */
static kiln_err start_job(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                          char *why, size_t whylen)
{
    kiln_diag dg = KILN_DIAG_INIT;
    kiln_job *job = NULL;
    kiln_job_record *rec = NULL;
    kiln_err err = KILN_EINVAL;
    json_t *k = kiln_part(doc);
    int gen = (int)json_integer_value(json_object_get(k, "gen")) + 1;
    char script[4096], *s = NULL;
    if (stage_script(nb, project, name, doc, script, sizeof script, why, whylen) < 0) goto out;
    json_t *jj = nb_job_json(nb, project, name, doc, gen, script, why, whylen);
    s = jj ? json_dumps(jj, JSON_COMPACT) : NULL;
    json_decref(jj);
    if (!s) goto out;
    err = kiln_job_from_json(s, strlen(s), &job, &dg);
    if (err == KILN_OK) err = kiln_catalog_validate(nb->catalog, job, &dg);
    if (err == KILN_OK) err = kiln_catalog_check_honoured(nb->catalog, job, &dg);
    if (err == KILN_OK) err = kiln_catalog_normalise(nb->catalog, job);
    if (err != KILN_OK) {
        snprintf(why, whylen, "%s: %s", dg.n ? field_of(dg.v[0].field) : "job",
                 dg.n ? dg.v[0].description : kiln_err_str(err));
        goto out;
    }
    err = kiln_store_job_create(nb->store, project, job, kiln_now_ns(), &rec);
    if (err == KILN_EEXIST) { /* a crash between the job and the document: take it */
        err = KILN_OK;
    } else if (err != KILN_OK) {
        snprintf(why, whylen, "cannot store the instance's job: %s", kiln_err_str(err));
        goto out;
    } else {
        kiln_jobfiles_event(nb->jobfiles, project, job->job_id, "INFO",
                            "Job QUEUED (notebook instance %s)", name);
    }
    json_object_set_new(k, "gen", json_integer(gen));
    json_object_set_new(k, "job", json_string(job->job_id));
    kiln_doorbell_ring(nb->wake);
out:
    free(s);
    kiln_job_record_free(rec);
    kiln_job_free(job);
    kiln_diag_free(&dg);
    return err;
}

static void cancel_job(kiln_notebooks *nb, const char *project, const char *id)
{
    int64_t now = kiln_now_ns();
    kiln_job_state was;
    if (kiln_store_job_transition(nb->store, project, id, KILN_STATE_MASK(QUEUED),
                                  KILN_STATE_CANCELLED, NULL, now, &was) == KILN_OK) {
        kiln_jobfiles_event(nb->jobfiles, project, id, "INFO",
                            "Job CANCELLED while queued (notebook stopped)");
    } else if (kiln_store_job_transition(nb->store, project, id,
                                         KILN_STATE_MASK(PREPARING) | KILN_STATE_MASK(RUNNING),
                                         KILN_STATE_CANCELLING, NULL, now, &was) == KILN_OK) {
        kiln_jobfiles_event(nb->jobfiles, project, id, "INFO", "Job CANCELLING (notebook stopped)");
    }
    kiln_doorbell_ring(nb->wake);
}

/* ---------- Jupyter's status ---------- */

/* GET base + path from Jupyter on 127.0.0.1:port (2 s at most): the JSON
 * body of a 200, or NULL. */
static json_t *jupyter_get(int port, const char *base, const char *path)
{
    enum { CAP = 256 * 1024 };
    char req[512], *buf = malloc(CAP);
    size_t got = 0;
    json_t *v = NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {.tv_sec = 2};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || !buf) goto out;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) goto out;
    int n = snprintf(req, sizeof req, "GET %s%s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", base, path);
    if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) goto out;
    for (ssize_t k; got < CAP - 1 && (k = read(fd, buf + got, CAP - 1 - got)) > 0;)
        got += (size_t)k;
    buf[got] = '\0';
    if (strncmp(buf, "HTTP/1.1 200", 12) != 0 && strncmp(buf, "HTTP/1.0 200", 12) != 0) goto out;
    char *body = strstr(buf, "\r\n\r\n");
    if (body) v = json_loads(body + 4, 0, NULL);
out:
    if (fd >= 0) close(fd);
    free(buf);
    return v;
}

/* Whether Jupyter answers; its last_activity (seconds since the epoch)
 * into *last and, when asked (busy not NULL), whether a kernel is busy
 * (a long silent cell is activity too; unknown counts as busy). The
 * polls carry no_track_activity, so they are no activity themselves. */
static int probe(int port, const char *base, double *last, bool *busy)
{
    json_t *st = jupyter_get(port, base, "api/status?no_track_activity=1");
    if (!st) return -1;
    const char *la = json_string_value(json_object_get(st, "last_activity"));
    struct tm tm = {0};
    *last = la && strptime(la, "%Y-%m-%dT%H:%M:%S", &tm) ? (double)timegm(&tm) : (double)time(NULL);
    json_decref(st);
    if (busy) {
        json_t *ks = jupyter_get(port, base, "api/kernels?no_track_activity=1"), *k;
        size_t i;
        *busy = !json_is_array(ks);
        json_array_foreach(ks, i, k)
        {
            const char *es = json_string_value(json_object_get(k, "execution_state"));
            if (es && strcmp(es, "idle") != 0 && strcmp(es, "dead") != 0) *busy = true;
        }
        json_decref(ks);
    }
    return 0;
}

/* ---------- the thread ---------- */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p) < 0 && errno != ENOENT ? -1 : 0;
}

/* How long an ACTIVE instance's JupyterLab may miss its probes before the
 * instance is PROVISIONING again (its API answers 503 then). */
#define PROBE_GRACE_S 10

static bool ist_active(json_t *doc)
{
    const char *st = json_string_value(json_object_get(doc, "state"));
    return st && strcmp(st, "ACTIVE") == 0;
}

/* Moves one instance a step towards what was asked. Returns true when doc
 * changed (to be saved); *gone when it is deleted. */
/* What Jupyter answered on `port` this tick (asked before the lock, so
 * that a slow Jupyter never holds up the API's reads of instances). */
typedef struct probed {
    int port; /* 0: not asked */
    bool ok, busy;
    double last;
} probed;

/* The port of the RUNNING replica of a job, or 0. */
static int job_port(kiln_notebooks *nb, const char *project, const char *jid)
{
    kiln_job_record *r = NULL;
    int port = 0;
    if (jid && kiln_store_job_get(nb->store, project, jid, &r) == KILN_OK &&
        r->job->state == KILN_STATE_RUNNING && r->runtime) {
        json_t *rt = json_loads(r->runtime, 0, NULL);
        port = (int)json_integer_value(
            json_object_get(json_array_get(json_object_get(rt, "replicas"), 0), "port"));
        json_decref(rt);
    }
    kiln_job_record_free(r);
    return port;
}

static bool step(kiln_notebooks *nb, const char *project, const char *name, json_t *doc,
                 const probed *pr, bool *gone)
{
    json_t *k = kiln_part(doc);
    char *before = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS), why[1024];
    const char *want = kstr(doc, "want") ? kstr(doc, "want") : "STOPPED";
    const char *jid = kstr(doc, "job");
    kiln_job_record *r = NULL;
    if (jid) kiln_store_job_get(nb->store, project, jid, &r);
    kiln_job_state js = r ? r->job->state : KILN_STATE_UNSPECIFIED;
    bool alive = r && (KILN_STATE_MASK(QUEUED) | KILN_STATE_MASK(PREPARING) |
                       KILN_STATE_MASK(RUNNING) | KILN_STATE_MASK(CANCELLING)) &
                          (1u << js);
    *gone = false;
    if (alive) {
        if (strcmp(want, "ACTIVE") != 0 || js == KILN_STATE_CANCELLING) {
            if (js != KILN_STATE_CANCELLING) cancel_job(nb, project, jid);
            set_state(doc, "STOPPING");
            json_object_set_new(k, "port", json_integer(0));
        } else if (js != KILN_STATE_RUNNING) {
            set_state(doc, "PROVISIONING");
        } else {
            json_t *rt = r->runtime ? json_loads(r->runtime, 0, NULL) : NULL;
            json_t *rep = json_array_get(json_object_get(rt, "replicas"), 0);
            int port = (int)json_integer_value(json_object_get(rep, "port"));
            json_t *gpus = json_object_get(rep, "gpus");
            double last = pr->last;
            bool busy = pr->busy;
            const char *ist = json_string_value(
                json_object_get(json_object_get(doc, "metadata"), "idle-shutdown-timeout"));
            if (port > 0 && pr->port == port && pr->ok) {
                json_object_del(k, "probeFailSince");
                const char *was = json_string_value(json_object_get(doc, "state"));
                if (!was || strcmp(was, "ACTIVE") != 0) {
                    json_object_set_new(k, "activeSince", json_integer(time(NULL)));
                    event(nb, doc, project, "ACTIVE: JupyterLab answers (job %s)", jid);
                }
                set_state(doc, "ACTIVE");
                json_object_set_new(k, "port", json_integer(port));
                json_object_set(k, "gpus", gpus ? gpus : json_array());
                json_object_set_new(k, "node", json_incref(json_object_get(rep, "node")));
                /* idle shutdown: Jupyter's own last activity, never before
                 * the instance became ACTIVE nor while a kernel was busy
                 * (noted to 10 s, so that a long cell costs a write per 10 s) */
                if (busy) {
                    json_int_t now10 = (json_int_t)time(NULL) / 10 * 10;
                    if (json_integer_value(json_object_get(k, "busySeen")) != now10)
                        json_object_set_new(k, "busySeen", json_integer(now10));
                }
                double since = (double)json_integer_value(json_object_get(k, "activeSince"));
                double seen = (double)json_integer_value(json_object_get(k, "busySeen"));
                if (last < since) last = since;
                if (last < seen) last = seen;
                if (ist && atof(ist) > 0 && !busy && time(NULL) - last > atof(ist) * 60) {
                    event(nb, doc, project,
                          "idle for %s minutes (idle-shutdown-timeout): stopping, its GPUs go back",
                          ist);
                    json_object_set_new(k, "want", json_string("STOPPED"));
                    json_object_set_new(k, "idleStopped", json_true());
                    cancel_job(nb, project, jid);
                    set_state(doc, "STOPPING");
                }
            } else if (ist_active(doc) && port > 0 && pr->port == port &&
                       json_integer_value(json_object_get(k, "port")) == port) {
                /* ACTIVE, and JupyterLab on the same port missed a probe: a
                 * busy machine more often than a lost JupyterLab (seen under
                 * a loaded CI's sanitizer build): it stays ACTIVE until it
                 * has not answered for PROBE_GRACE_S */
                json_int_t now = (json_int_t)time(NULL);
                json_t *fs = json_object_get(k, "probeFailSince");
                if (!fs)
                    json_object_set_new(k, "probeFailSince", json_integer(now));
                else if (now - json_integer_value(fs) >= PROBE_GRACE_S) {
                    event(nb, doc, project, "JupyterLab has not answered for %d s (job %s)",
                          PROBE_GRACE_S, jid);
                    json_object_del(k, "probeFailSince");
                    set_state(doc, "PROVISIONING");
                }
            } else {
                json_object_del(k, "probeFailSince");
                set_state(doc, "PROVISIONING");
            }
            json_decref(rt);
        }
    } else {
        if (jid) {
            if (strcmp(want, "ACTIVE") == 0) {
                /* it ended by itself: the instance stops, saying why */
                event(nb, doc, project, "job %s ended %s%s%s: the instance stopped", jid,
                      r ? kiln_job_state_name(js) : "(gone)",
                      r && r->job->error_message ? ": " : "",
                      r && r->job->error_message ? r->job->error_message : "");
                json_object_set_new(k, "want", json_string("STOPPED"));
                want = "STOPPED";
            }
            json_object_del(k, "job");
            json_object_set_new(k, "port", json_integer(0));
            json_object_set_new(k, "gpus", json_array());
        }
        if (strcmp(want, "RESET") == 0) {
            json_object_set_new(k, "want", json_string("ACTIVE"));
            want = "ACTIVE";
        }
        if (strcmp(want, "ACTIVE") == 0) {
            if (start_job(nb, project, name, doc, why, sizeof why) == KILN_OK) {
                set_state(doc, "PROVISIONING");
                json_object_del(k, "idleStopped");
            } else {
                event(nb, doc, project, "cannot start: %s", why);
                json_object_set_new(k, "want", json_string("STOPPED"));
                set_state(doc, "STOPPED");
            }
        } else if (strcmp(want, "DELETED") == 0) {
            char home[4096];
            kiln_nb_home(nb, project, name, home, sizeof home);
            if (!json_is_true(json_object_get(doc, "noRemoveDataDisk")))
                nftw(home, rm_one, 16, FTW_DEPTH | FTW_PHYS);
            *gone = true;
        } else {
            if (json_string_value(json_object_get(doc, "state")) &&
                strcmp(json_string_value(json_object_get(doc, "state")), "STOPPED") != 0)
                event(nb, doc, project, "STOPPED");
            set_state(doc, "STOPPED");
        }
    }
    kiln_job_record_free(r);
    char *after = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    bool changed = *gone || !before || !after || strcmp(before, after) != 0;
    free(before);
    free(after);
    return changed;
}

static void tick(kiln_notebooks *nb)
{
    kiln_store_doc *v = NULL;
    size_t n = 0;
    if (kiln_store_doc_list(nb->store, KIND, NULL, &v, &n) != KILN_OK) return;
    for (size_t i = 0; i < n && !*nb->stop; i++) {
        /* Jupyter first, unlocked: from the document as listed */
        probed pr = {0};
        json_t *seen = json_loads(v[i].json, 0, NULL);
        const char *want = kstr(seen, "want");
        if (want && strcmp(want, "ACTIVE") == 0 &&
            (pr.port = job_port(nb, v[i].project, kstr(seen, "job"))) > 0) {
            char base[300];
            snprintf(base, sizeof base, "/notebooks/%s/%s/", v[i].project, v[i].name);
            bool idle_on =
                json_object_get(json_object_get(seen, "metadata"), "idle-shutdown-timeout") != NULL;
            pr.ok = probe(pr.port, base, &pr.last, idle_on ? &pr.busy : NULL) == 0;
        }
        json_decref(seen);
        pthread_mutex_lock(&nb->mu);
        json_t *doc = load(nb, KIND, v[i].project, v[i].name); /* the API may have changed it */
        bool gone = false;
        if (doc && step(nb, v[i].project, v[i].name, doc, &pr, &gone))
            save(nb, KIND, v[i].project, v[i].name, gone ? NULL : doc);
        json_decref(doc);
        pthread_mutex_unlock(&nb->mu);
    }
    kiln_store_docs_free(v, n);
    ops_tick(nb);
}

void *kiln_notebooks_run(void *arg)
{
    kiln_notebooks *nb = arg;
    while (!*nb->stop) {
        tick(nb);
        for (int i = 0; i < 5 && !*nb->stop; i++) {
            struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}
