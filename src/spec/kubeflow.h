/* kubeflow.h - what the Kubeflow front ends (tfjob.c, pytorchjob.c,
 * kfkinds.c) share:
 * the decoding context, the reading of metadata, replica specs, pod
 * containers and runPolicy, and the dispatch by kind (kubeflow.c).
 * Internal to src/spec.
 *
 * The two kinds differ only in their replica types, the name of the
 * container that runs the program, and a few spec fields of their own; the
 * rest of a Kubeflow job is one format, so it is read by one piece of code
 * and gets the same field paths and the same errors in both. */
#ifndef KILN_SPEC_KUBEFLOW_H
#define KILN_SPEC_KUBEFLOW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kiln/job.h"

#define KILN__KF_API_VERSION "kubeflow.org/v1"
#define KILN__KF_TRAINER_API "trainer.kubeflow.org/v1alpha1"
/* The label a job names its Kueue LocalQueue by: KILN_QUEUE_LABEL of
 * kiln/queues.h, which routes by it (a later module: not included here). */
#define KILN__KF_QUEUE_LABEL "kueue.x-k8s.io/queue-name"

/* Path prefixes are built from known names only ("spec.pytorchReplicaSpecs.Worker"
 * plus a container index), so these sizes never truncate. */
#define KILN__KF_ROLE_PATH 64
#define KILN__KF_PATH      256

typedef struct kiln__kf {
    kiln_diag *d;
    kiln_diag *notes; /* NULL, or what is accepted but not used (kiln__kf_note) */
    kiln_err err;     /* first hard error (ENOMEM); EINVAL is counted through d */
    size_t bad;       /* violations reported by this decoder */
    /* set by the front end before the shared readers run: */
    const char *kind;        /* "TFJob" | "PyTorchJob", for messages */
    const char *container;   /* the container that runs the program */
    const char *port;        /* the operator's port name (tfjob-port, jaxjob-port...) */
    bool container_required; /* PyTorchJob: every replica type must have it */
    bool image_optional;     /* MPIJob: no image = the command runs as a process on the node */
    /* MPIJob: a container whose program is sshd, which kiln does not run
     * (kiln-mpi-agent takes ssh's place), may carry the readinessProbe that
     * probes it: said, not refused (kiln__kf_runs_sshd) */
    bool sshd_probe_ok;
    const char *runtimes_dir; /* TrainJob: where runtimeRef is looked up (NULL: default) */
    /* set by the entry point for a TrainJob shipped with its runtimes (one
     * file of runtime documents and the TrainJob): runtimeRef is looked up
     * among them before the runtimes directory */
    const json_t *file_docs; /* NULL: the file is one document */
    size_t file_job;         /* the TrainJob's index in file_docs */
    /* set by kiln__kf_metadata: the KILN__KF_QUEUE_LABEL label's value, NULL
     * without one (a suspended job under a queue is kiln's to unsuspend) */
    const char *queue;
} kiln__kf;

/* The container's program (command[0], else args[0]) is sshd. */
bool kiln__kf_runs_sshd(const json_t *ctr);
void kiln__kf_bad(kiln__kf *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kiln__kf_nomem(kiln__kf *c, kiln_err e);
/* A key accepted and not used (harmless to drop): said, not refused. */
void kiln__kf_note(kiln__kf *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Tree access: YAML hands every scalar over as a string, JSON may not. */
json_t *kiln__kf_get(const json_t *obj, const char *key);
const char *kiln__kf_scalar(const json_t *v);
bool kiln__kf_present(const json_t *v);
bool kiln__kf_get_int(const json_t *v, int64_t *out);
/* An optional whole number >= 0; reports at `path` and returns false when set but bad. */
bool kiln__kf_opt_count(kiln__kf *c, const json_t *obj, const char *key, const char *path,
                        bool *has, int64_t *out);
/* An optional boolean: true or false (a JSON boolean, or YAML's true/True/TRUE,
 * false/False/FALSE) into *out; absent leaves *out alone. Anything else is
 * reported at `path` (a "yes" or a typo must not read as false) and false returned. */
bool kiln__kf_opt_bool(kiln__kf *c, const json_t *obj, const char *key, const char *path,
                       bool *out);

/* metadata.generateName: `prefix` (cut to 58 characters) and 5 random
 * characters of the API server's alphabet into out; false when the system
 * gives no randomness. */
#define KILN__KF_NAME_MAX    63
#define KILN__KF_NAME_RANDOM 5
bool kiln__kf_generate_name(const char *prefix, char out[KILN__KF_NAME_MAX + 1]);

/* metadata: name (or generateName) -> jobId, labels, kiln.dev/region and kiln.dev/job-dir
 * annotations; c->queue from the labels. */
void kiln__kf_metadata(kiln__kf *c, const json_t *root, kiln_job *job);

/* Sorts the replica specs of `specs` (at `path`, e.g. spec.tfReplicaSpecs)
 * into found[0..n) by their type `names` (any letter case), reporting a type
 * that is not a `kind` replica type, one given twice and one that is not an
 * object. found[] must start all NULL. */
void kiln__kf_find_specs(kiln__kf *c, const json_t *specs, const char *path, const char *kind,
                         const char *const *names, size_t n, const json_t **found);

/* `<rpath>.replicas` (default 1); -1 after reporting a bad value. With `master`,
 * anything but 1 is refused (both operators allow exactly one). */
int64_t kiln__kf_replicas(kiln__kf *c, const json_t *spec, const char *rpath, bool master);

/* Decodes one replica spec (restartPolicy, template: container, nodeSelector,
 * GPUs, machine-type annotation) into `role` with `count` replicas. */
void kiln__kf_fill_role(kiln__kf *c, const json_t *spec, const char *rpath, kiln_training_input *ti,
                        kiln_role role, int64_t count);

/* Without a master replica the job succeeds when worker 0 does: worker 0
 * becomes kiln's master ("chief" in TF_CONFIG) and the rest stay workers.
 * Returns the Worker replica count, or -1 after reporting. */
int64_t kiln__kf_promote_worker(kiln__kf *c, const json_t *worker, const char *rpath,
                                kiln_training_input *ti);

/* spec.runPolicy (or its older fields directly under spec), and refusals of
 * what kiln cannot honour there (suspend, unless c->queue). */
void kiln__kf_run_policy(kiln__kf *c, const json_t *spec, kiln_training_input *ti);

/* A suspend: true at `path`: accepted (said in a note) when the job names a
 * queue (c->queue), whose admission is then its unsuspend; else refused. */
void kiln__kf_suspend(kiln__kf *c, const char *path);

/* Every key kiln reads in a Kubeflow job, one list per object (NULL-ended);
 * the table ends with {NULL, NULL}. `where` is the object's path as
 * docs/job-model.md writes it. */
typedef struct kiln__kf_keys {
    const char *where;
    const char *const *keys;
} kiln__kf_keys;
extern const kiln__kf_keys kiln__kf_key_tables[];
extern const char *const kiln__tf_spec_keys[];    /* tfjob.c */
extern const char *const kiln__pt_spec_keys[];    /* pytorchjob.c */
extern const char *const kiln__pt_elastic_keys[]; /* pytorchjob.c */

/* Refuses, each at its path below `path`, the keys of `obj` not in `keys`. */
void kiln__kf_check_keys(kiln__kf *c, const json_t *obj, const char *path, const char *const *keys);

/* The front ends: `root` is one document whose kind is theirs. */
kiln_err kiln__tfjob_decode(kiln__kf *c, const json_t *root, kiln_job *job);
kiln_err kiln__pytorchjob_decode(kiln__kf *c, const json_t *root, kiln_job *job);
/* JAXJob, PaddleJob, XGBoostJob (kfkinds.c); false from kiln__kfk_known for another kind. */
bool kiln__kfk_known(const char *kind);
/* MPIJob, kubeflow.org/v1 or v2beta1 (mpijob.c). */
kiln_err kiln__mpijob_decode(kiln__kf *c, const json_t *root, kiln_job *job);
extern const char *const kiln__mpi_v1_spec_keys[]; /* mpijob.c */
extern const char *const kiln__mpi_v2_spec_keys[]; /* mpijob.c */
/* TrainJob, trainer.kubeflow.org/v1alpha1, against its runtime (trainjob.c). */
kiln_err kiln__trainjob_decode(kiln__kf *c, const json_t *root, kiln_job *job);
extern const char *const kiln__trainjob_spec_keys[]; /* trainjob.c */
kiln_err kiln__kfk_decode(kiln__kf *c, const json_t *root, kiln_job *job);
extern const char *const kiln__jax_spec_keys[];    /* kfkinds.c */
extern const char *const kiln__paddle_spec_keys[]; /* kfkinds.c */
extern const char *const kiln__xgb_spec_keys[];    /* kfkinds.c */

#endif
