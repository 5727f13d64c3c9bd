/* src/exec/claims.c - a site's PersistentVolumeClaims (kiln/claims.h). */
#include "kiln/claims.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[] = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany",
                                         "ReadWriteOncePod"};
#define TABLE "the node config's persistentVolumeClaims"

void kiln_claims_free(kiln_claims *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].path);
        free(c->v[i].node);
    }
    free(c->v);
    c->v = NULL;
    c->n = 0;
}

const kiln_claim *kiln_claims_find(const kiln_claims *c, const char *name)
{
    for (size_t i = 0; name && i < c->n; i++)
        if (strcmp(c->v[i].name, name) == 0) return &c->v[i];
    return NULL;
}

kiln_err kiln_claims_from_json(const void *root_json, kiln_claims *out, kiln_diag *d)
{
    const json_t *t = json_object_get((const json_t *)root_json, "persistentVolumeClaims");
    const char *name, *k;
    json_t *e, *v;
    size_t bad = d->n;
    out->v = NULL;
    out->n = 0;
    if (!t) return KILN_OK;
    if (!json_is_object(t)) {
        kiln_diag_add(d, "persistentVolumeClaims",
                      "must be a map of claim name -> {path, accessMode}");
        return KILN_EINVAL;
    }
    out->v = calloc(json_object_size(t) + 1, sizeof *out->v);
    if (!out->v) return KILN_ENOMEM;
    json_object_foreach((json_t *)t, name, e)
    {
        char f[320];
        kiln_claim *c = &out->v[out->n++];
        c->name = strdup(name);
        c->mode = KILN_CLAIM_RWO; /* Kubernetes' most common, and the strictest but one */
        if (!c->name) goto nomem;
        snprintf(f, sizeof f, "persistentVolumeClaims.%.256s", name);
        if (!json_is_object(e)) {
            kiln_diag_add(d, f, "must be {path, accessMode, node}");
            continue;
        }
        json_object_foreach(e, k, v)
        {
            const char *s = json_string_value(v);
            snprintf(f, sizeof f, "persistentVolumeClaims.%.200s.%.32s", name, k);
            if (strcmp(k, "path") == 0 && s && s[0] == '/' && !strchr(s, ':')) {
                if (!(c->path = strdup(s))) goto nomem;
            } else if (strcmp(k, "node") == 0 && s && *s) {
                if (!(c->node = strdup(s))) goto nomem;
            } else if (strcmp(k, "accessMode") == 0 && s) {
                size_t m = 0;
                while (m < 4 && strcmp(s, mode_names[m]) != 0)
                    m++;
                if (m == 4)
                    kiln_diag_add(d, f,
                                  "'%.32s' is not an access mode: ReadWriteOnce, ReadOnlyMany, "
                                  "ReadWriteMany or ReadWriteOncePod",
                                  s);
                c->mode = (kiln_claim_mode)(m < 4 ? m : 0);
            } else {
                kiln_diag_add(d, f,
                              "unknown, or not of its type: a claim has path (an absolute "
                              "directory without ':'), accessMode and node (strings)");
            }
        }
        snprintf(f, sizeof f, "persistentVolumeClaims.%.256s.path", name);
        if (!c->path) kiln_diag_add(d, f, "required: the directory the claim names");
        snprintf(f, sizeof f, "persistentVolumeClaims.%.256s.node", name);
        if (c->node && c->mode != KILN_CLAIM_RWO)
            kiln_diag_add(d, f, "only a ReadWriteOnce claim is held by one node");
    }
    return d->n > bad ? KILN_EINVAL : KILN_OK;
nomem:
    kiln_claims_free(out);
    return KILN_ENOMEM;
}

/* "CLAIM:/PATH[:ro]" -> CLAIM in name[], whether :ro */
static bool split(const char *m, char *name, size_t len, const char **path, bool *ro)
{
    const char *colon = strchr(m, ':');
    if (!colon || (size_t)(colon - m) >= len) return false;
    snprintf(name, len, "%.*s", (int)(colon - m), m);
    *path = colon + 1;
    size_t pl = strlen(*path);
    *ro = pl > 3 && strcmp(*path + pl - 3, ":ro") == 0;
    return true;
}

/* The list of the table's claims, for a refusal */
static void names_of(const kiln_claims *c, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < c->n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", c->v[i].name);
    if (c->n == 0) snprintf(buf, len, "none");
}

kiln_err kiln_claims_check_job(const kiln_claims *c, kiln_job *job, size_t n_nodes, kiln_diag *d)
{
    size_t bad = d->n;
    int64_t users[64] = {0}; /* replicas mounting each claim (the first 64 claims) */
    for (int r = 0; r < KILN_ROLE_COUNT; r++) {
        kiln_role_fields rf = kiln_job_role_fields(&job->training_input, (kiln_role)r);
        kiln_replica_config *rc = *rf.has_config ? rf.config : NULL;
        int64_t count = r == KILN_ROLE_MASTER ? 1 : rf.count ? *rf.count : 0;
        for (size_t i = 0; rc && i < rc->claim_mounts.n; i++) {
            char name[256], f[128], list[512];
            const char *path;
            bool ro;
            snprintf(f, sizeof f, "trainingInput.%sConfig.claimMounts[%zu]", kiln_role_field(r), i);
            const kiln_claim *cl = split(rc->claim_mounts.v[i], name, sizeof name, &path, &ro)
                                       ? kiln_claims_find(c, name)
                                       : NULL;
            if (!cl) {
                names_of(c, list, sizeof list);
                kiln_diag_add(d, f,
                              "claim '%.128s' is not defined in " TABLE " (this kilnd's: %s): "
                              "add it there with the directory it stands for",
                              name, list);
                continue;
            }
            size_t ci = (size_t)(cl - c->v);
            if (ci < 64) users[ci] += count;
            if (cl->mode == KILN_CLAIM_RWOP && ci < 64 && users[ci] > 1)
                kiln_diag_add(d, f,
                              "claim '%s' is ReadWriteOncePod: one replica may mount it, and "
                              "%lld do",
                              name, (long long)users[ci]);
            if (cl->mode != KILN_CLAIM_RWO || ro) continue;
            if (cl->node) {
                /* held by one node: its replicas go there, as a local PV's node affinity */
                const char *have = kiln_map_get(&rc->node_selector, "kiln.dev/node");
                if (have && strcmp(have, cl->node) != 0)
                    kiln_diag_add(d, f,
                                  "claim '%s' is ReadWriteOnce on node %s, and the replica's "
                                  "nodeSelector asks for kiln.dev/node %s",
                                  name, cl->node, have);
                else if (kiln_map_set(&rc->node_selector, "kiln.dev/node", cl->node) != KILN_OK)
                    return KILN_ENOMEM;
            } else if (n_nodes > 1) {
                kiln_diag_add(d, f,
                              "claim '%s' is ReadWriteOnce (one node) and this kilnd has %zu "
                              "nodes: name its node in " TABLE " (node), or mount it readOnly",
                              name, n_nodes);
            }
        }
    }
    return d->n > bad ? KILN_EINVAL : KILN_OK;
}

char *kiln_claims_bind(const kiln_claims *c, const char *mount)
{
    char name[256], *out = NULL;
    const char *path;
    bool ro;
    if (!split(mount, name, sizeof name, &path, &ro)) return NULL;
    const kiln_claim *cl = kiln_claims_find(c, name);
    if (!cl) return NULL;
    bool want_ro = !ro && cl->mode == KILN_CLAIM_ROX;
    if (asprintf(&out, "%s:%s%s", cl->path, path, want_ro ? ":ro" : "") < 0) return NULL;
    return out;
}
