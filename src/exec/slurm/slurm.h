/* src/exec/slurm/slurm.h - the Slurm executor (internal to kilnd).
 *
 * With `kilnd --executor slurm` a kiln job is handed whole to a Slurm cluster
 * (the one SLURM_CONF names) instead of being placed by kiln's own scheduler:
 * one heterogeneous Slurm job per kiln job, one component per replica type,
 * gang-placed by Slurm. Slurm does the placement, the GPU allocation and the
 * launch (sbatch/srun); kilnd keeps the job model, the states, the logs and
 * the API. Everything is done through Slurm's own commands (sbatch, squeue
 * --json, sinfo --json, scancel, scontrol). docs/slurm.md has the mapping. */
#ifndef KILN_EXEC_SLURM_H
#define KILN_EXEC_SLURM_H

#include <jansson.h>

#include "daemon/kilnd.h"

/* The supervisor thread of a kilnd with --executor slurm (in place of the
 * local one): reconciles the jobs a previous kilnd handed to Slurm, submits
 * QUEUED jobs, follows them in Slurm and writes their states. */
void *kiln_slurm_supervisor(kilnd *d);

/* The nodes of the partition as `kiln nodes list` shows them (a JSON array,
 * new reference), or NULL with a sentence in `why`. `only`: one node. */
json_t *kiln_slurm_nodes(kilnd *d, const char *only, char *why, size_t whylen);

/* `kiln nodes drain|uncordon NODE`: scontrol update nodename=NODE state=drain
 * (reason given) or state=resume. KILN_EIO with Slurm's words in `why`. */
kiln_err kiln_slurm_drain(kilnd *d, const char *node, bool drain, char *why, size_t whylen);

/* Create-time checks of the Slurm executor: what it cannot run (tuning,
 * elastic PyTorchJobs, packageUris, TPUs, container images without a
 * container runtime or of a project with its own user) and, with
 * --slurm-gpu-type maps, a GPU type the map lacks. false with the field and
 * the sentence. submit() asks again for jobs queued by a kilnd that ran
 * another executor. `project` may be NULL (its user is not checked). */
bool kiln_slurm_check_job(kilnd *d, const char *project, const kiln_job *job, char *field,
                          size_t flen, char *why, size_t whylen);

/* Runs argv (searched in PATH) with kilnd's allow-listed environment plus
 * SLURM_CONF, at most `timeout_s` seconds; its stdout+stderr in *out (caller
 * frees). Returns the exit status (-1: could not run or timed out). */
int kiln_slurm_run(char *const argv[], char **out, int timeout_s);

/* The site's GPU type map (--slurm-gpu-type KILN_TYPE=GRES_TYPE): the GRES
 * type of kiln type `t`, and kiln's type of GRES type `g`; NULL: unmapped. */
const char *kiln_slurm_gres_type(const kilnd *d, const char *t);
const char *kiln_slurm_kiln_type(const kilnd *d, const char *g);

#endif
