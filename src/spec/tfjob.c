/* src/spec/tfjob.c - Kubeflow TFJob (kubeflow.org/v1) -> kiln_job.
 *
 * What is TFJob's own (the rest is shared with PyTorchJob, kubeflow.c):
 *   spec.tfReplicaSpecs.Chief|Master   -> master (Chief also sets useChiefInTfConfig)
 *   spec.tfReplicaSpecs.Worker         -> workers; without Chief/Master, worker 0
 *                                         becomes the master (useChiefInTfConfig) and
 *                                         workerCount = replicas - 1
 *   spec.tfReplicaSpecs.PS / Evaluator -> parameter servers / evaluators
 *   the pod container "tensorflow" (else the first one) runs the program
 *   spec.successPolicy                 -> only Default (the chief decides)
 * scaleTier is CUSTOM. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "spec/kubeflow.h"

#define TF_CONTAINER "tensorflow"

/* Kubeflow's replica types, in the order their specs are decoded. */
enum { TF_CHIEF, TF_MASTER, TF_PS, TF_WORKER, TF_EVALUATOR, TF_NTYPES };
static const char *const tf_type_names[TF_NTYPES] = {"Chief", "Master", "PS", "Worker",
                                                     "Evaluator"};

/* spec keys kiln reads (runPolicy's fields directly under spec are the older
 * form); anything else is refused at its path */
const char *const kiln__tf_spec_keys[] = {"tfReplicaSpecs",        "runPolicy",
                                          "successPolicy",         "backoffLimit",
                                          "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                                          "cleanPodPolicy",        NULL};

/* Decodes the spec that has `found[t]` into `role`, checking replicas. */
static void decode_role(kiln__kf *c, const json_t *found[TF_NTYPES], int t, kiln_training_input *ti,
                        kiln_role role)
{
    char rpath[KILN__KF_ROLE_PATH];
    snprintf(rpath, sizeof rpath, "spec.tfReplicaSpecs.%s", tf_type_names[t]);
    int64_t n = kiln__kf_replicas(c, found[t], rpath, role == KILN_ROLE_MASTER);
    /* a bad count still gets its template checked: every problem at once */
    if (n != 0) kiln__kf_fill_role(c, found[t], rpath, ti, role, n < 0 ? 0 : n);
}

static void map_replica_specs(kiln__kf *c, const json_t *spec, kiln_training_input *ti)
{
    const json_t *specs = kiln__kf_get(spec, "tfReplicaSpecs");
    if (!json_is_object(specs) || json_object_size(specs) == 0) {
        kiln__kf_bad(c, "spec.tfReplicaSpecs",
                     "required: the replica specs (Chief, PS, Worker...)");
        return;
    }
    const json_t *found[TF_NTYPES] = {0};
    kiln__kf_find_specs(c, specs, "spec.tfReplicaSpecs", "TFJob", tf_type_names, TF_NTYPES, found);
    if (found[TF_CHIEF] && found[TF_MASTER]) {
        kiln__kf_bad(c, "spec.tfReplicaSpecs",
                     "has both Chief and Master; a TFJob has one of them, not both");
        return;
    }
    kiln__kf_nomem(c, kiln_set_str(&ti->scale_tier, "CUSTOM"));
    if (found[TF_CHIEF] || found[TF_MASTER]) {
        int t = found[TF_CHIEF] ? TF_CHIEF : TF_MASTER;
        ti->use_chief_in_tf_config = (t == TF_CHIEF);
        decode_role(c, found, t, ti, KILN_ROLE_MASTER);
        if (found[TF_WORKER]) decode_role(c, found, TF_WORKER, ti, KILN_ROLE_WORKER);
    } else if (found[TF_WORKER]) {
        /* Kubeflow's job succeeds when worker 0 does: it is kiln's master, named
         * "chief" in TF_CONFIG, which TensorFlow's multi-worker strategies treat
         * as a worker that also does the chief's duties */
        kiln__kf_promote_worker(c, found[TF_WORKER], "spec.tfReplicaSpecs.Worker", ti);
    } else {
        kiln__kf_bad(c, "spec.tfReplicaSpecs", "needs a Chief, Master or Worker replica spec");
    }
    if (found[TF_PS]) decode_role(c, found, TF_PS, ti, KILN_ROLE_PARAMETER_SERVER);
    if (found[TF_EVALUATOR]) decode_role(c, found, TF_EVALUATOR, ti, KILN_ROLE_EVALUATOR);
}

kiln_err kiln__tfjob_decode(kiln__kf *c, const json_t *root, kiln_job *job)
{
    c->kind = "TFJob";
    c->container = TF_CONTAINER;
    c->port = "tfjob-port";
    c->container_required = false;
    kiln__kf_metadata(c, root, job);
    job->has_training_input = true;
    const json_t *spec = kiln__kf_get(root, "spec");
    if (!json_is_object(spec)) {
        kiln__kf_bad(c, "spec", "required: the TFJob spec with tfReplicaSpecs");
        return KILN_EINVAL;
    }
    kiln__kf_check_keys(c, spec, "spec", kiln__tf_spec_keys);
    map_replica_specs(c, spec, &job->training_input);
    kiln__kf_run_policy(c, spec, &job->training_input);
    /* Kubeflow features kiln cannot honour are errors, not silent surprises */
    const char *sp = kiln__kf_scalar(kiln__kf_get(spec, "successPolicy"));
    if (sp && *sp && strcmp(sp, "Default") != 0)
        kiln__kf_bad(c, "spec.successPolicy",
                     "'%s' is not supported: a kiln job succeeds when its chief (or worker 0) "
                     "succeeds",
                     sp);
    if (c->err != KILN_OK) return c->err;
    return c->bad ? KILN_EINVAL : KILN_OK;
}
