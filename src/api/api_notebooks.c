/* src/api/api_notebooks.c - the Notebooks API subset (v1) that `gcloud notebooks
 * instances` speaks (docs/notebooks.md):
 *   POST   .../locations/L/instances?instanceId=N    create (body: Instance)
 *   GET    .../locations/L/instances[/N]             list, get
 *   DELETE .../locations/L/instances/N               delete
 *   POST   .../instances/N:start | :stop | :reset
 *   PATCH  .../instances/N:setAccelerator | :setMachineType | :setLabels
 *   GET    .../locations/L/operations/ID             the long-running operations
 * The instances themselves (their jobs, states, operations) live in
 * src/notebooks/notebooks.c; this file checks what is sent and renders what
 * is shown. Every field kiln accepts is acted on; any other is refused
 * naming it. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "notebooks/notebooks.h"

/* gcloud's instance ids: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 */
static bool valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] < 'a' || s[0] > 'z' || s[n - 1] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static bool valid_location(const char *s, size_t n)
{
    if (n == 0 || n > 63) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

/* The Instance as the API shows it: kiln's bookkeeping reduced to what a
 * user may want (job, node, GPUs, events); proxyUri while ACTIVE. */
static json_t *render(kilnd *d, struct MHD_Connection *c, const char *project, json_t *doc)
{
    json_t *out = json_deep_copy(doc);
    json_t *k = json_object_get(doc, "kiln");
    const char *state = json_string_value(json_object_get(doc, "state"));
    const char *full = json_string_value(json_object_get(doc, "name"));
    const char *id = full ? strrchr(full, '/') : NULL;
    json_object_del(out, "kiln");
    json_t *shown = json_object();
    const char *keys[] = {"job", "node", "gpus", "events"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(k, keys[i]))
            json_object_set(shown, keys[i], json_object_get(k, keys[i]));
    json_object_set_new(out, "kiln", shown);
    if (state && strcmp(state, "ACTIVE") == 0 && id) {
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
        char uri[600];
        snprintf(uri, sizeof uri, "%s://%s/notebooks/%s/%s/", d->tls ? "https" : "http",
                 host ? host : d->listen, project, id + 1);
        json_object_set_new(out, "proxyUri", json_string(uri));
    }
    return out;
}

static enum MHD_Result not_found(struct MHD_Connection *c, const char *project, const char *loc,
                                 const char *id)
{
    return send_error(c, 404, NULL,
                      "Resource 'projects/%s/locations/%s/instances/%s' was not found", project,
                      loc, id);
}

/* An instance of this project at this location, or NULL. */
static json_t *get_at(kilnd *d, const char *project, const char *loc, const char *id)
{
    char full[400];
    json_t *doc = kiln_nb_get(d->notebooks, project, id);
    snprintf(full, sizeof full, "projects/%s/locations/%s/instances/%s", project, loc, id);
    if (doc && strcmp(loc, "-") != 0 &&
        strcmp(json_string_value(json_object_get(doc, "name")), full) != 0) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

/* Says why into why and returns the field at fault (the checks' one exit). */
static const char *fault(char *why, size_t len, const char *field, const char *msg)
{
    snprintf(why, len, "%s", msg);
    return field;
}

/* Checks acceleratorConfig {type, coreCount}: NULL or the field at fault. */
static const char *check_accel(json_t *a, char *why, size_t len)
{
    const char *key;
    json_t *v;
    if (!json_is_object(a)) return fault(why, len, "acceleratorConfig", "must be an object");
    /* gcloud sends {} for an instance without GPUs */
    if (json_object_size(a) == 0) return NULL;
    json_object_foreach(a, key, v)
    {
        if (strcmp(key, "type") != 0 && strcmp(key, "coreCount") != 0) {
            snprintf(why, len, "kiln does not know this field");
            return "acceleratorConfig.*";
        }
    }
    json_t *t = json_object_get(a, "type"), *n = json_object_get(a, "coreCount");
    if (!json_is_string(t) || !json_string_length(t))
        return fault(why, len, "acceleratorConfig.type",
                     "required: an accelerator type (NVIDIA_TESLA_T4, ...)");
    long long count = json_is_string(n)    ? atoll(json_string_value(n))
                      : json_is_integer(n) ? (long long)json_integer_value(n)
                                           : -1;
    if (count < 1 || count > 64)
        return fault(why, len, "acceleratorConfig.coreCount", "required: a GPU count from 1 to 64");
    return NULL;
}

/* What create accepts; NULL when fine, else the field at fault and why. */
static const char *check_instance(json_t *b, const char *id, char *why, size_t len)
{
    static char field[128];
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v)
    {
        if (strcmp(key, "name") == 0) {
            const char *n = json_string_value(v), *slash = n ? strrchr(n, '/') : NULL;
            if (!n || strcmp(slash ? slash + 1 : n, id) != 0) {
                snprintf(why, len, "'%s' is not the instanceId '%s'", n ? n : "", id);
                return "name";
            }
        } else if (strcmp(key, "machineType") == 0) {
            if (!json_is_string(v) || !json_string_length(v))
                return fault(why, len, "machineType", "must be a machine type name");
        } else if (strcmp(key, "acceleratorConfig") == 0) {
            const char *f = check_accel(v, why, len);
            if (f) return f;
        } else if (strcmp(key, "vmImage") == 0) {
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2)
            {
                if (strcmp(k2, "project") && strcmp(k2, "imageFamily") && strcmp(k2, "imageName")) {
                    snprintf(field, sizeof field, "vmImage.%.100s", k2);
                    snprintf(why, len, "kiln does not know this field");
                    return field;
                }
                if (!json_is_string(v2)) return fault(why, len, "vmImage", "must be strings");
            }
            if (!json_object_get(v, "imageFamily") == !json_object_get(v, "imageName"))
                return fault(why, len, "vmImage", "give exactly one of imageFamily and imageName");
        } else if (strcmp(key, "containerImage") == 0) {
            snprintf(why, len,
                     "kiln runs notebook instances from vmImage environments only (podman "
                     "containers are not wired to instances yet): use --vm-image-family");
            return "containerImage";
        } else if (strcmp(key, "labels") == 0) {
            const char *k2;
            json_t *v2;
            if (!json_is_object(v)) return fault(why, len, "labels", "must be a map");
            json_object_foreach(v, k2, v2)
            {
                if (!json_is_string(v2)) return fault(why, len, "labels", "values are strings");
            }
        } else if (strcmp(key, "metadata") == 0) {
            const char *k2;
            json_t *v2;
            if (!json_is_object(v)) return fault(why, len, "metadata", "must be a map");
            json_object_foreach(v, k2, v2)
            {
                snprintf(field, sizeof field, "metadata.%.100s", k2);
                if (strcmp(k2, "idle-shutdown-timeout") != 0) {
                    snprintf(why, len, "kiln acts on the metadata key idle-shutdown-timeout only");
                    return field;
                }
                if (!json_is_string(v2) || atof(json_string_value(v2)) <= 0) {
                    snprintf(why, len, "minutes, a positive number");
                    return field;
                }
            }
        } else if (strcmp(key, "noRemoveDataDisk") == 0 || strcmp(key, "installGpuDriver") == 0 ||
                   strcmp(key, "noPublicIp") == 0) {
            /* noRemoveDataDisk: delete keeps the home; installGpuDriver: the
             * node's driver is the host's, there either way; noPublicIp:
             * Jupyter listens on loopback only, always */
            if (!json_is_boolean(v)) {
                snprintf(field, sizeof field, "%.100s", key);
                snprintf(why, len, "must be true or false");
                return field;
            }
        } else if (strcmp(key, "noProxyAccess") == 0) {
            if (!json_is_boolean(v)) return fault(why, len, "noProxyAccess", "must be a boolean");
            if (json_is_true(v)) {
                snprintf(why, len,
                         "kilnd's proxy is the only way into an instance's JupyterLab: "
                         "noProxyAccess true would leave no way in");
                return "noProxyAccess";
            }
        } else if (strcmp(key, "dataDiskSizeGb") == 0) {
            snprintf(why, len,
                     "an instance's home is a directory under kilnd's data dir, without a disk "
                     "size of its own: leave --data-disk-size out");
            return "dataDiskSizeGb";
        } else if (strcmp(key, "postStartupScript") == 0) {
            /* checked against the staging store with the job (kiln_nb_check_job) */
            if (!json_is_string(v))
                return fault(why, len, "postStartupScript", "must be a gs:// URI");
        } else {
            snprintf(field, sizeof field, "%.100s", key);
            snprintf(why, len, "kiln does not act on this field (docs/notebooks.md)");
            return field;
        }
    }
    const char *vp = json_string_value(json_object_get(json_object_get(b, "vmImage"), "project"));
    if (vp && strcmp(vp, "deeplearning-platform-release") != 0) {
        snprintf(why, len,
                 "kiln's notebook environments stand for deeplearning-platform-release's images "
                 "only, not '%.100s'",
                 vp);
        return "vmImage.project";
    }
    return NULL;
}

static enum MHD_Result send_op(struct MHD_Connection *c, json_t *op)
{
    if (!op) return send_error(c, 500, NULL, "cannot store the operation");
    json_object_del(op, "kiln");
    return send_json(c, 200, op);
}

static enum MHD_Result create(kilnd *d, struct MHD_Connection *c, const char *project,
                              const char *loc, const kiln_api_req *rq)
{
    char why[1024], field[128];
    const char *id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "instanceId");
    json_error_t je;
    json_t *b = NULL;
    enum MHD_Result rc;
    if (!id || !valid_id(id))
        return send_error(c, 400, NULL,
                          "instanceId '%.64s' is not a valid instance id: lower-case letters, "
                          "digits and hyphens, starting with a letter, at most 63",
                          id ? id : "");
    if (kiln__api_disk_low(d, why, sizeof why)) return send_error(c, 503, NULL, "%s", why);
    b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(b)) {
        rc = send_error(c, 400, NULL, "The request body is not a JSON Instance: %s", je.text);
        goto out;
    }
    const char *f = check_instance(b, id, why, sizeof why);
    if (f) {
        rc = send_error(c, 400, NULL, "Field: %s Error: %s", f, why);
        goto out;
    }
    char full[400];
    snprintf(full, sizeof full, "projects/%s/locations/%s/instances/%s", project, loc, id);
    json_object_set_new(b, "name", json_string(full));
    if (!json_object_get(b, "machineType"))
        json_object_set_new(b, "machineType", json_string("n1-standard-4"));
    if (!json_object_get(b, "vmImage"))
        json_object_set_new(b, "vmImage",
                            json_pack("{s:s,s:s}", "project", "deeplearning-platform-release",
                                      "imageFamily", "common-cpu"));
    /* what its job would be refused for, refused now */
    if (kiln_nb_check_job(d->notebooks, project, id, b, field, sizeof field, why, sizeof why) !=
        KILN_OK) {
        rc = send_error(c, 400, NULL, "Field: %s Error: %s", field, why);
        goto out;
    }
    kiln_err err = kiln_nb_create(d->notebooks, project, id, b, why, sizeof why);
    if (err == KILN_EEXIST)
        rc = send_error(c, 409, NULL, "Resource '%s' already exists", full);
    else if (err == KILN_EINVAL)
        rc = send_error_st(c, 400, "FAILED_PRECONDITION", NULL, "%s", why);
    else if (err != KILN_OK)
        rc = send_error(c, 500, NULL, "%s", why);
    else
        rc = send_op(c, kiln_nb_op_new(d->notebooks, project, loc, id, "create", "ACTIVE", 0));
    kiln_doorbell_ring(&d->wake);
out:
    json_decref(b);
    return rc;
}

static enum MHD_Result list(kilnd *d, struct MHD_Connection *c, const char *project,
                            const char *loc)
{
    json_t *all = kiln_nb_list(d->notebooks, project), *out = json_array(), *doc;
    size_t i;
    char pre[300];
    snprintf(pre, sizeof pre, "projects/%s/locations/%s/instances/", project, loc);
    if (!all || !out) {
        json_decref(all);
        json_decref(out);
        return send_error(c, 500, NULL, "cannot read the instances");
    }
    json_array_foreach(all, i, doc)
    {
        const char *n = json_string_value(json_object_get(doc, "name"));
        if (strcmp(loc, "-") == 0 || (n && strncmp(n, pre, strlen(pre)) == 0))
            json_array_append_new(out, render(d, c, project, doc));
    }
    json_decref(all);
    return send_json(c, 200, json_pack("{s:o}", "instances", out));
}

/* setAccelerator / setMachineType / setLabels: the body as gcloud sends it */
static enum MHD_Result set_verb(kilnd *d, struct MHD_Connection *c, const char *project,
                                const char *loc, const char *id, const char *verb, json_t *doc,
                                const kiln_api_req *rq)
{
    char why[1024], field[128];
    json_error_t je;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &je);
    json_t *set = json_object();
    enum MHD_Result rc;
    const char *key, *f = NULL;
    json_t *v;
    if (!json_is_object(b)) {
        rc = send_error(c, 400, NULL, "The request body is not JSON: %s", je.text);
        goto out;
    }
    const char *allowed = strcmp(verb, "setAccelerator") == 0   ? "type coreCount"
                          : strcmp(verb, "setMachineType") == 0 ? "machineType"
                                                                : "labels";
    json_object_foreach(b, key, v)
    {
        bool known = strcmp(verb, "setAccelerator") == 0
                         ? strcmp(key, "type") == 0 || strcmp(key, "coreCount") == 0
                         : strcmp(key, allowed) == 0;
        if (!known) {
            snprintf(why, sizeof why, "%s takes %s only", verb, allowed);
            rc = send_error(c, 400, NULL, "Field: %s Error: %s", key, why);
            goto out;
        }
    }
    if (strcmp(verb, "setAccelerator") == 0) {
        json_t *acc = json_deep_copy(json_object_get(doc, "acceleratorConfig"));
        if (!acc) acc = json_object();
        json_object_update(acc, b);
        f = check_accel(acc, why, sizeof why);
        json_object_set_new(set, "acceleratorConfig", acc);
    } else if (strcmp(verb, "setMachineType") == 0) {
        if (!json_is_string(json_object_get(b, "machineType")))
            f = fault(why, sizeof why, "machineType", "required");
        json_object_set(set, "machineType", json_object_get(b, "machineType"));
    } else {
        json_t *lb = json_object_get(b, "labels");
        if (lb && !json_is_object(lb)) f = fault(why, sizeof why, "labels", "must be a map");
        json_object_foreach(lb, key, v)
        {
            if (!json_is_string(v)) f = fault(why, sizeof why, "labels", "values are strings");
        }
        json_object_set(set, "labels", lb ? lb : json_null());
    }
    if (f) {
        rc = send_error(c, 400, NULL, "Field: %s Error: %s", f, why);
        goto out;
    }
    /* the instance as it would be, checked as its next job */
    json_t *next = json_deep_copy(doc);
    json_object_update(next, set);
    kiln_err err =
        kiln_nb_check_job(d->notebooks, project, id, next, field, sizeof field, why, sizeof why);
    json_decref(next);
    if (err != KILN_OK) {
        rc = send_error(c, 400, NULL, "Field: %s Error: %s", field, why);
        goto out;
    }
    err = kiln_nb_update(d->notebooks, project, id, set, why, sizeof why);
    if (err == KILN_ENOTFOUND)
        rc = not_found(c, project, loc, id);
    else if (err == KILN_ECONFLICT)
        rc = send_error_st(c, 400, "FAILED_PRECONDITION", NULL, "%s", why);
    else if (err != KILN_OK)
        rc = send_error(c, 500, NULL, "%s", why);
    else
        rc = send_op(c, kiln_nb_op_new(d->notebooks, project, loc, id, verb, NULL, -1));
out:
    json_decref(b);
    json_decref(set);
    return rc;
}

/* kiln's :exec (`kiln notebooks exec`): {"command": [ARGV...],
 * "timeoutSeconds": N (default 60, at most 600)} */
static enum MHD_Result exec_verb(kilnd *d, struct MHD_Connection *c, const char *project,
                                 const char *id, const kiln_api_req *rq)
{
    char why[1024];
    json_error_t je;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &je);
    json_t *cmd = json_object_get(b, "command"), *v, *to = json_object_get(b, "timeoutSeconds");
    const char *key;
    size_t i;
    enum MHD_Result rc;
    bool ok = json_is_array(cmd) && json_array_size(cmd) > 0 && json_array_size(cmd) <= 4096;
    json_array_foreach(cmd, i, v) ok = ok && json_is_string(v);
    json_object_foreach(b, key, v)
    {
        if (strcmp(key, "command") != 0 && strcmp(key, "timeoutSeconds") != 0) {
            rc = send_error(c, 400, NULL,
                            "Field: %.100s Error: exec takes command and "
                            "timeoutSeconds only",
                            key);
            goto out;
        }
    }
    if (!ok) {
        rc = send_error(c, 400, NULL, "Field: command Error: required: a list of strings (argv)");
        goto out;
    }
    long long t = to ? (json_is_integer(to)  ? json_integer_value(to)
                        : json_is_string(to) ? atoll(json_string_value(to))
                                             : -1)
                     : 60;
    if (t < 1 || t > 600) {
        rc = send_error(c, 400, NULL, "Field: timeoutSeconds Error: from 1 to 600");
        goto out;
    }
    json_t *res = kiln_nb_exec(d->notebooks, project, id, cmd, (int)t, why, sizeof why);
    rc = res ? send_json(c, 200, res)
             : send_error_st(c, 400, "FAILED_PRECONDITION", NULL, "%s", why);
out:
    json_decref(b);
    return rc;
}

/* POST /v1/notebooks:signin: the caller's bearer token as the kiln_token
 * cookie (HttpOnly, SameSite=Strict, path /notebooks/), so that a browser
 * tab opened on an instance's proxyUri carries it (the dashboard calls this
 * before it opens JupyterLab). */
enum MHD_Result kiln__api_notebooks_signin(kilnd *d, struct MHD_Connection *c, const char *method)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    char cookie[512];
    if (strcmp(method, "POST") != 0) return send_error(c, 405, NULL, "POST /v1/notebooks:signin");
    if (!h || strncmp(h, "Bearer ", 7) != 0 || strlen(h + 7) > 256 || strpbrk(h + 7, ";,\r\n "))
        return send_json(c, 200, json_pack("{s:b}", "cookie", false)); /* no tokens: none needed */
    snprintf(cookie, sizeof cookie, "kiln_token=%s; Path=/notebooks/; HttpOnly; SameSite=Strict%s",
             h + 7, d->tls ? "; Secure" : "");
    char *body = strdup("{\"cookie\": true}");
    struct MHD_Response *r =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(body);
        return send_error(c, 500, NULL, "out of memory");
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Set-Cookie", cookie);
    return kiln__api_queue(c, 200, r);
}

static enum MHD_Result instance(kilnd *d, struct MHD_Connection *c, const char *method,
                                const char *project, const char *loc, const char *rest,
                                const kiln_api_req *rq, const kiln_api_auth *a)
{
    char id[64], why[512];
    const char *colon = strchr(rest, ':'), *verb = colon ? colon + 1 : NULL;
    size_t n = colon ? (size_t)(colon - rest) : strlen(rest);
    if (n >= sizeof id) return send_error(c, 404, NULL, "no such instance");
    memcpy(id, rest, n);
    id[n] = '\0';
    json_t *doc = get_at(d, project, loc, id);
    if (!doc) return not_found(c, project, loc, id);
    enum MHD_Result rc;
    bool viewer = a->role < KILN_AUTH_EDITOR;
    int gen = (int)json_integer_value(json_object_get(json_object_get(doc, "kiln"), "gen"));
    const char *want = json_string_value(json_object_get(json_object_get(doc, "kiln"), "want"));
    if (!verb && strcmp(method, "GET") == 0) {
        rc = send_json(c, 200, render(d, c, project, doc));
    } else if (viewer && strcmp(method, "GET") != 0) {
        rc = send_error(c, 403, NULL, "a viewer token cannot change instances");
    } else if (!verb && strcmp(method, "DELETE") == 0) {
        kiln_err err = kiln_nb_want(d->notebooks, project, id, "DELETED", why, sizeof why);
        rc = err == KILN_OK
                 ? send_op(c, kiln_nb_op_new(d->notebooks, project, loc, id, "delete", "GONE", -1))
                 : send_error_st(c, 400, "FAILED_PRECONDITION", NULL, "%s", why);
    } else if (verb && strcmp(method, "POST") == 0 &&
               (strcmp(verb, "start") == 0 || strcmp(verb, "stop") == 0 ||
                strcmp(verb, "reset") == 0)) {
        const char *w = strcmp(verb, "start") == 0  ? "ACTIVE"
                        : strcmp(verb, "stop") == 0 ? "STOPPED"
                                                    : "RESET";
        /* a start of an instance already asked to run waits for that run */
        int after =
            strcmp(verb, "start") == 0 && want && strcmp(want, "ACTIVE") == 0 ? gen - 1 : gen;
        kiln_err err = kiln_nb_want(d->notebooks, project, id, w, why, sizeof why);
        rc = err == KILN_OK
                 ? send_op(c,
                           kiln_nb_op_new(d->notebooks, project, loc, id, verb,
                                          strcmp(w, "STOPPED") == 0 ? "STOPPED" : "ACTIVE", after))
                 : send_error_st(c, 400, "FAILED_PRECONDITION", NULL, "%s", why);
    } else if (verb && strcmp(method, "POST") == 0 && strcmp(verb, "exec") == 0) {
        rc = exec_verb(d, c, project, id, rq);
    } else if (verb && strcmp(method, "PATCH") == 0 &&
               (strcmp(verb, "setAccelerator") == 0 || strcmp(verb, "setMachineType") == 0 ||
                strcmp(verb, "setLabels") == 0)) {
        rc = set_verb(d, c, project, loc, id, verb, doc, rq);
    } else {
        rc = send_error(c, 405, NULL, "%s %s%s%s is not supported for notebook instances", method,
                        id, verb ? ":" : "", verb ? verb : "");
    }
    kiln_doorbell_ring(&d->wake);
    json_decref(doc);
    return rc;
}

enum MHD_Result kiln__api_notebooks(kilnd *d, struct MHD_Connection *c, const char *method,
                                    const char *project, const char *rest, const kiln_api_req *rq,
                                    const kiln_api_auth *a)
{
    /* rest: L/instances..., L/operations/ID */
    const char *slash = strchr(rest, '/');
    char loc[64];
    size_t ln = slash ? (size_t)(slash - rest) : 0;
    if (!slash || !valid_location(rest, ln))
        return send_error(c, 404, NULL, "no such resource: locations/%.100s", rest);
    memcpy(loc, rest, ln);
    loc[ln] = '\0';
    const char *r = slash + 1;
    if (strncmp(r, "operations/", 11) == 0 && strcmp(method, "GET") == 0) {
        json_t *op = kiln_nb_op_get(d->notebooks, project, r + 11);
        if (!op) return send_error(c, 404, NULL, "Operation %.100s not found", r + 11);
        return send_op(c, op);
    }
    if (strcmp(r, "instances") == 0) {
        if (strcmp(method, "GET") == 0) return list(d, c, project, loc);
        if (strcmp(method, "POST") == 0) {
            if (a->role < KILN_AUTH_EDITOR)
                return send_error(c, 403, NULL, "a viewer token cannot create instances");
            return create(d, c, project, loc, rq);
        }
        return send_error(c, 405, NULL, "%s is not supported on instances", method);
    }
    if (strncmp(r, "instances/", 10) == 0)
        return instance(d, c, method, project, loc, r + 10, rq, a);
    return send_error(c, 404, NULL, "no such resource: locations/%.100s", rest);
}
