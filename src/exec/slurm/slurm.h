/* src/exec/slurm/slurm.h - Slurm's commands as kilnd uses them (internal).
 *
 * With `kilnd --executor slurm` the nodes are a Slurm partition's (the
 * cluster SLURM_CONF names): kiln's one supervisor (src/exec/supervisor)
 * runs every job, Slurm places each gang as one allocation (alloc.h) and
 * every replica is a step in it. This header is what the API and the
 * placement need of Slurm besides that: its commands run with a bound, the
 * site's GPU type map, the create-time refusals, the nodes and their drain.
 * docs/slurm.md has the mapping.
 *
 * The Slurm code knows nothing of kilnd's own structure: what it reads of
 * kilnd's settings and modules comes in a kiln_slurm_cfg, which kilnd's
 * main builds once and every caller passes. */
#ifndef KILN_EXEC_SLURM_H
#define KILN_EXEC_SLURM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kiln/auth.h"
#include "kiln/catalog.h"
#include "kiln/exec.h"

/* What the Slurm code reads of kilnd's configuration. Every pointer is
 * borrowed: it stays the owner's, and must outlive each call given this. */
typedef struct kiln_slurm_cfg {
    const char *partition;  /* --slurm-partition: the nodes are its */
    const char *account;    /* --slurm-account: the parent of the queues'
                               accounts (accounts.h); NULL: root */
    char *const *gpu_types; /* --slurm-gpu-type KILN_TYPE=GRES_TYPE ("K=G") */
    size_t gpu_type_n;
    const kiln_catalog *catalog;  /* a job's plans and images (kiln_slurm_check_job) */
    const kiln_users *users;      /* the projects' run-as users */
    const kiln_exec_config *exec; /* its container_runtime (NULL there: none found) */
} kiln_slurm_cfg;

/* The nodes of the partition as `kiln nodes list` shows them (a JSON array,
 * new reference), or NULL with a sentence in `why`. `only`: one node. */
json_t *kiln_slurm_nodes(const kiln_slurm_cfg *sc, const char *only, char *why, size_t whylen);

/* `kiln nodes drain|uncordon NODE`: scontrol update nodename=NODE state=drain
 * (reason given) or state=resume. KILN_EIO with Slurm's words in `why`. */
kiln_err kiln_slurm_drain(const kiln_slurm_cfg *sc, const char *node, bool drain, char *why,
                          size_t whylen);

/* Create-time checks under Slurm: what Slurm has no meaning for (node
 * labels, TPUs, GPU utilisation as an elastic metric, container images
 * without a container runtime or of a project with its own user, an
 * MPIJob, whose ranks as Slurm steps are not done, securityContext's
 * noNewPrivileges on a process, which slurmstepd starts) and,
 * with --slurm-gpu-type maps, a GPU type the map lacks. false with the
 * field and the sentence. `project` may be NULL (its user is not checked). */
bool kiln_slurm_check_job(const kiln_slurm_cfg *sc, const char *project, const kiln_job *job,
                          char *field, size_t flen, char *why, size_t whylen);

/* Runs argv (searched in PATH) with kilnd's allow-listed environment plus
 * SLURM_CONF, at most `timeout_s` seconds; its stdout+stderr in *out (caller
 * frees). Returns the exit status (-1: could not run or timed out). */
int kiln_slurm_run(char *const argv[], char **out, int timeout_s);

/* The site's GPU type map (--slurm-gpu-type KILN_TYPE=GRES_TYPE): the GRES
 * type of kiln type `t`, and kiln's type of GRES type `g`; NULL: unmapped. */
const char *kiln_slurm_gres_type(const kiln_slurm_cfg *sc, const char *t);
const char *kiln_slurm_kiln_type(const kiln_slurm_cfg *sc, const char *g);

#endif
