/* kiln/claims.h - a site's PersistentVolumeClaims: the node config's table
 * that maps a claim name to a directory (docs/service.md, "Volumes"), so
 * that a Kubeflow file's persistentVolumeClaim volumes mount as they do on
 * the site's Kubernetes. Under --executor slurm the directory must be one
 * every node sees (a shared file system). */
#ifndef KILN_CLAIMS_H
#define KILN_CLAIMS_H

#include <stddef.h>

#include "kiln/job.h"

typedef enum {
    KILN_CLAIM_RWO,  /* ReadWriteOnce: read-write on one node */
    KILN_CLAIM_ROX,  /* ReadOnlyMany: read-only on any node */
    KILN_CLAIM_RWX,  /* ReadWriteMany: read-write on any node */
    KILN_CLAIM_RWOP, /* ReadWriteOncePod: read-write by one replica */
} kiln_claim_mode;

typedef struct kiln_claim {
    char *name; /* the claimName */
    char *path; /* the directory on the nodes */
    kiln_claim_mode mode;
    char *node; /* ReadWriteOnce: the node that holds it (NULL: any one node) */
} kiln_claim;

typedef struct kiln_claims {
    kiln_claim *v;
    size_t n;
} kiln_claims;

/* Reads "persistentVolumeClaims" of a node config's JSON root (absent: an
 * empty table): {"CLAIM": {"path": "/DIR", "accessMode": MODE, "node": N}},
 * MODE one of Kubernetes' four (default ReadWriteOnce). Anything else is a
 * violation at its path in `d`. */
kiln_err kiln_claims_from_json(const void *root_json, kiln_claims *out, kiln_diag *d);
void kiln_claims_free(kiln_claims *c);
const kiln_claim *kiln_claims_find(const kiln_claims *c, const char *name);

/* At create: every <role>Config.claimMounts entry ("CLAIM:/PATH[:ro]") must
 * name a claim of the table (else refused naming it and the table); a
 * ReadWriteOncePod claim is mounted by one replica at most; a ReadWriteOnce
 * claim mounted read-write keeps its replicas on one node: the claim's node
 * (added to the replicas' nodeSelector as kiln.dev/node), or, with no node
 * named, a cluster of one node. `n_nodes` is the cluster's. */
kiln_err kiln_claims_check_job(const kiln_claims *c, kiln_job *job, size_t n_nodes, kiln_diag *d);

/* "CLAIM:/PATH[:ro]" -> a bind "DIR:/PATH[:ro]" (read-only also for a
 * ReadOnlyMany claim), malloc'd; NULL for an unknown claim or no memory. */
char *kiln_claims_bind(const kiln_claims *c, const char *mount);

#endif
