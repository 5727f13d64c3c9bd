/* job.c - the Job resource's field tables and the public kiln_job API. */
#include <stdlib.h>
#include <string.h>

#include "kiln/job.h"
#include "spec/schema.h"
#include "spec/tree.h"

#define NF(a)             (sizeof(a) / sizeof((a)[0]))
#define OFF(type, member) offsetof(type, member)
/* field helpers: plain, with presence flag, enum, message, list-of */
#define F(t, json, kind, m)                                                                        \
    {                                                                                              \
        json, kind, OFF(t, m), -1, NULL, NULL, 0, NULL                                             \
    }
#define FH(t, json, kind, m, has)                                                                  \
    {                                                                                              \
        json, kind, OFF(t, m), (long)OFF(t, has), NULL, NULL, 0, NULL                              \
    }
#define FE(t, json, m, en)                                                                         \
    {                                                                                              \
        json, FK_ENUM, OFF(t, m), -1, NULL, en, 0, NULL                                            \
    }
/* an enum of the ml v1 protos: names or numbers (nums: each name's number) */
#define FEN(t, json, m, en, nums)                                                                  \
    {                                                                                              \
        json, FK_ENUM, OFF(t, m), -1, NULL, en, 0, nums                                            \
    }
#define FM(t, json, m, has, sub)                                                                   \
    {                                                                                              \
        json, FK_MSG, OFF(t, m), (long)OFF(t, has), &sub, NULL, 0, NULL                            \
    }

static const char *const scale_tiers[] = {"BASIC",     "STANDARD_1", "PREMIUM_1", "BASIC_GPU",
                                          "BASIC_TPU", "CUSTOM",     NULL};
static const char *const restart_policies[] = {"Always", "OnFailure", "Never", "ExitCode", NULL};
static const char *const pull_policies[] = {"IfNotPresent", "Always", "Never", NULL};
static const char *const clean_pod_policies[] = {"All", "Running", "None", NULL};
static const char *const goals[] = {"GOAL_TYPE_UNSPECIFIED", "MAXIMIZE", "MINIMIZE", NULL};
static const char *const param_types[] = {
    "PARAMETER_TYPE_UNSPECIFIED", "DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE", NULL};
static const char *const scale_types[] = {"NONE", "UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE",
                                          "UNIT_REVERSE_LOG_SCALE", NULL};
static const char *const algorithms[] = {"ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH",
                                         NULL};
/* google/cloud/ml/v1/job_service.proto's numbers of the lists above */
static const int goal_nums[] = {0, 1, 2};
static const int param_type_nums[] = {0, 1, 2, 3, 4};
static const int scale_type_nums[] = {0, 1, 2, 3};
static const int algorithm_nums[] = {0, 2, 3};
static const char *const early_stopping_rules[] = {"MEDIAN", "ASHA", "DECAY_CURVE",
                                                   NULL}; /* kiln extension */
static const char *const measurement_selections[] = {"LAST_MEASUREMENT", "BEST_MEASUREMENT",
                                                     NULL}; /* kiln extension */

static const kiln__field accel_fields[] = {
    F(kiln_accelerator_config, "count", FK_INT64, count),
    F(kiln_accelerator_config, "type", FK_STR, type),
};
static const kiln__msg accel_msg = {"AcceleratorConfig", sizeof(kiln_accelerator_config),
                                    accel_fields, NF(accel_fields)};

static const kiln__field disk_fields[] = {
    F(kiln_disk_config, "bootDiskType", FK_STR, boot_disk_type),
    F(kiln_disk_config, "bootDiskSizeGb", FK_INT32, boot_disk_size_gb),
};
static const kiln__msg disk_msg = {"DiskConfig", sizeof(kiln_disk_config), disk_fields,
                                   NF(disk_fields)};

static const char *const seccomp_profiles[] = {"RuntimeDefault", NULL};
static const kiln__field secctx_fields[] = {
    FH(kiln_security_context, "runAsUser", FK_INT64, run_as_user, has_run_as_user),
    FH(kiln_security_context, "runAsGroup", FK_INT64, run_as_group, has_run_as_group),
    F(kiln_security_context, "runAsNonRoot", FK_BOOL, run_as_non_root),
    F(kiln_security_context, "noNewPrivileges", FK_BOOL, no_new_privileges),
    F(kiln_security_context, "readOnlyRootFilesystem", FK_BOOL, read_only_root_filesystem),
    F(kiln_security_context, "capDrop", FK_STRV, cap_drop),
    FE(kiln_security_context, "seccompProfile", seccomp_profile, seccomp_profiles),
};
static const kiln__msg secctx_msg = {"SecurityContext", sizeof(kiln_security_context),
                                     secctx_fields, NF(secctx_fields)};
static const char *const toleration_ops[] = {"Equal", "Exists", NULL};
static const char *const taint_effects[] = {"NoSchedule", "PreferNoSchedule", "NoExecute", NULL};
static const kiln__field toleration_fields[] = {
    F(kiln_toleration, "key", FK_STR, key),
    FE(kiln_toleration, "operator", op, toleration_ops),
    F(kiln_toleration, "value", FK_STR, value),
    FE(kiln_toleration, "effect", effect, taint_effects),
    FH(kiln_toleration, "tolerationSeconds", FK_INT64, toleration_seconds, has_toleration_seconds),
};
static const kiln__msg toleration_msg = {"Toleration", sizeof(kiln_toleration), toleration_fields,
                                         NF(toleration_fields)};

static const kiln__field topology_fields[] = {
    F(kiln_topology_request, "required", FK_STR, required),
    F(kiln_topology_request, "preferred", FK_STR, preferred),
    F(kiln_topology_request, "unconstrained", FK_BOOL, unconstrained),
    F(kiln_topology_request, "group", FK_STR, group),
};
static const kiln__msg topology_msg = {"TopologyRequest", sizeof(kiln_topology_request),
                                       topology_fields, NF(topology_fields)};

static const kiln__field replica_fields[] = {
    FM(kiln_replica_config, "acceleratorConfig", accelerator_config, has_accelerator_config,
       accel_msg),
    F(kiln_replica_config, "imageUri", FK_STR, image_uri),
    F(kiln_replica_config, "containerCommand", FK_STRV, container_command),
    F(kiln_replica_config, "containerArgs", FK_STRV, container_args),
    F(kiln_replica_config, "tpuTfVersion", FK_STR, tpu_tf_version),
    FM(kiln_replica_config, "diskConfig", disk_config, has_disk_config, disk_msg),
    FE(kiln_replica_config, "restartPolicy", restart_policy, restart_policies),
    F(kiln_replica_config, "nodeSelector", FK_MAP, node_selector),
    F(kiln_replica_config, "env", FK_MAP, env),
    F(kiln_replica_config, "cpuLimit", FK_STR, cpu_limit),
    F(kiln_replica_config, "memoryLimit", FK_STR, memory_limit),
    F(kiln_replica_config, "hostMounts", FK_STRV, host_mounts),
    F(kiln_replica_config, "cpuRequest", FK_STR, cpu_request),
    F(kiln_replica_config, "memoryRequest", FK_STR, memory_request),
    F(kiln_replica_config, "workingDir", FK_STR, working_dir),
    F(kiln_replica_config, "scratchMounts", FK_STRV, scratch_mounts),
    F(kiln_replica_config, "claimMounts", FK_STRV, claim_mounts),
    FE(kiln_replica_config, "imagePullPolicy", image_pull_policy, pull_policies),
    FM(kiln_replica_config, "securityContext", security_context, has_security_context, secctx_msg),
    {"tolerations", FK_MSGV, OFF(kiln_replica_config, tolerations), -1, &toleration_msg, NULL,
     OFF(kiln_replica_config, n_tolerations), NULL},
    FM(kiln_replica_config, "topology", topology, has_topology, topology_msg),
};
static const kiln__msg replica_msg = {"ReplicaConfig", sizeof(kiln_replica_config), replica_fields,
                                      NF(replica_fields)};

static const kiln__field sched_fields[] = {
    FH(kiln_scheduling, "maxRunningTime", FK_DURATION, max_running_time, has_max_running_time),
    FH(kiln_scheduling, "maxWaitTime", FK_DURATION, max_wait_time, has_max_wait_time),
    F(kiln_scheduling, "priority", FK_INT32, priority),
};
static const kiln__msg sched_msg = {"Scheduling", sizeof(kiln_scheduling), sched_fields,
                                    NF(sched_fields)};

static const kiln__field run_policy_fields[] = {
    FH(kiln_run_policy, "backoffLimit", FK_INT64, backoff_limit, has_backoff_limit),
    FH(kiln_run_policy, "activeDeadlineSeconds", FK_INT64, active_deadline_seconds,
       has_active_deadline_seconds),
    FH(kiln_run_policy, "ttlSecondsAfterFinished", FK_INT64, ttl_seconds_after_finished,
       has_ttl_seconds_after_finished),
    FE(kiln_run_policy, "cleanPodPolicy", clean_pod_policy, clean_pod_policies),
};
static const kiln__msg run_policy_msg = {"RunPolicy", sizeof(kiln_run_policy), run_policy_fields,
                                         NF(run_policy_fields)};

static const char *const metric_resources[] = {"cpu", "memory", "nvidia.com/gpu", NULL};
static const char *const metric_targets[] = {"Utilization", "AverageValue", NULL};
static const kiln__field metric_fields[] = {
    FE(kiln_elastic_metric, "resource", resource, metric_resources),
    FE(kiln_elastic_metric, "targetType", target_type, metric_targets),
    F(kiln_elastic_metric, "averageUtilization", FK_INT64, average_utilization),
    F(kiln_elastic_metric, "averageValue", FK_STR, average_value),
};
static const kiln__msg metric_msg = {"ElasticMetric", sizeof(kiln_elastic_metric), metric_fields,
                                     NF(metric_fields)};

static const kiln__field elastic_fields[] = {
    F(kiln_elastic_policy, "minReplicas", FK_INT64, min_replicas),
    F(kiln_elastic_policy, "maxReplicas", FK_INT64, max_replicas),
    F(kiln_elastic_policy, "rdzvBackend", FK_STR, rdzv_backend),
    F(kiln_elastic_policy, "rdzvHost", FK_STR, rdzv_host),
    F(kiln_elastic_policy, "rdzvPort", FK_INT64, rdzv_port),
    F(kiln_elastic_policy, "rdzvId", FK_STR, rdzv_id),
    F(kiln_elastic_policy, "rdzvConf", FK_MAP, rdzv_conf),
    FH(kiln_elastic_policy, "maxRestarts", FK_INT64, max_restarts, has_max_restarts),
    F(kiln_elastic_policy, "standalone", FK_BOOL, standalone),
    F(kiln_elastic_policy, "nProcPerNode", FK_STR, n_proc_per_node),
    {"metrics", FK_MSGV, OFF(kiln_elastic_policy, metrics), -1, &metric_msg, NULL,
     OFF(kiln_elastic_policy, n_metrics), NULL},
};
static const kiln__msg elastic_msg = {"ElasticPolicy", sizeof(kiln_elastic_policy), elastic_fields,
                                      NF(elastic_fields)};

static const kiln__field pytorch_fields[] = {
    F(kiln_pytorch_job, "nprocPerNode", FK_STR, nproc_per_node),
    F(kiln_pytorch_job, "workersOnly", FK_BOOL, workers_only),
    FM(kiln_pytorch_job, "elasticPolicy", elastic_policy, has_elastic_policy, elastic_msg),
};
static const kiln__msg pytorch_msg = {"PyTorchJob", sizeof(kiln_pytorch_job), pytorch_fields,
                                      NF(pytorch_fields)};

static const char *const mpi_apis[] = {"kubeflow.org/v1", "kubeflow.org/v2beta1", NULL};
static const char *const mpi_impls[] = {"OpenMPI", "Intel", "MPICH", NULL};
static const char *const mpi_launcher_policies[] = {"AtStartup", "WaitForWorkersReady", NULL};
static const kiln__field mpi_fields[] = {
    FE(kiln_mpi_job, "apiVersion", api_version, mpi_apis),
    F(kiln_mpi_job, "slotsPerWorker", FK_INT64, slots_per_worker),
    FE(kiln_mpi_job, "mpiImplementation", implementation, mpi_impls),
    F(kiln_mpi_job, "runLauncherAsWorker", FK_BOOL, run_launcher_as_worker),
    FE(kiln_mpi_job, "launcherCreationPolicy", launcher_creation_policy, mpi_launcher_policies),
    F(kiln_mpi_job, "sshAuthMountPath", FK_STR, ssh_auth_mount_path),
    F(kiln_mpi_job, "mainContainer", FK_STR, main_container),
};
static const kiln__msg mpi_msg = {"MPIJob", sizeof(kiln_mpi_job), mpi_fields, NF(mpi_fields)};

static const char *const kubeflow_kinds[] = {"JAXJob", "PaddleJob", "XGBoostJob", "TrainJob", NULL};
static const kiln__field kubeflow_fields[] = {
    FE(kiln_kubeflow_job, "kind", kind, kubeflow_kinds),
    F(kiln_kubeflow_job, "workersOnly", FK_BOOL, workers_only),
    F(kiln_kubeflow_job, "nprocPerNode", FK_STR, nproc_per_node),
    F(kiln_kubeflow_job, "runtime", FK_STR, runtime),
    F(kiln_kubeflow_job, "suspend", FK_BOOL, suspend),
};
static const kiln__msg kubeflow_msg = {"KubeflowJob", sizeof(kiln_kubeflow_job), kubeflow_fields,
                                       NF(kubeflow_fields)};

static const kiln__field vertex_fields[] = {
    F(kiln_vertex_job, "displayName", FK_STR, display_name),
    F(kiln_vertex_job, "baseOutputDirectory", FK_STR, base_output_directory),
    F(kiln_vertex_job, "persistentResourceId", FK_STR, persistent_resource_id),
    F(kiln_vertex_job, "modelToUpload", FK_STR, model_to_upload),
};
static const kiln__msg vertex_msg = {"VertexJob", sizeof(kiln_vertex_job), vertex_fields,
                                     NF(vertex_fields)};

static const kiln__field param_fields[] = {
    F(kiln_parameter_spec, "parameterName", FK_STR, parameter_name),
    FEN(kiln_parameter_spec, "type", type, param_types, param_type_nums),
    F(kiln_parameter_spec, "minValue", FK_DOUBLE, min_value),
    F(kiln_parameter_spec, "maxValue", FK_DOUBLE, max_value),
    F(kiln_parameter_spec, "categoricalValues", FK_STRV, categorical_values),
    {"discreteValues", FK_DOUBLEV, OFF(kiln_parameter_spec, discrete_values), -1, NULL, NULL,
     OFF(kiln_parameter_spec, n_discrete_values), NULL},
    FEN(kiln_parameter_spec, "scaleType", scale_type, scale_types, scale_type_nums),
    F(kiln_parameter_spec, "parentParameterName", FK_STR, parent_parameter),
    F(kiln_parameter_spec, "parentCategoricalValues", FK_STRV, parent_categorical_values),
    {"parentValues", FK_DOUBLEV, OFF(kiln_parameter_spec, parent_values), -1, NULL, NULL,
     OFF(kiln_parameter_spec, n_parent_values), NULL},
};
static const kiln__msg param_msg = {"ParameterSpec", sizeof(kiln_parameter_spec), param_fields,
                                    NF(param_fields)};

static const kiln__field hp_fields[] = {
    FEN(kiln_hyperparameter_spec, "goal", goal, goals, goal_nums),
    {"params", FK_MSGV, OFF(kiln_hyperparameter_spec, params), -1, &param_msg, NULL,
     OFF(kiln_hyperparameter_spec, n_params), NULL},
    F(kiln_hyperparameter_spec, "maxTrials", FK_INT32, max_trials),
    F(kiln_hyperparameter_spec, "maxParallelTrials", FK_INT32, max_parallel_trials),
    F(kiln_hyperparameter_spec, "maxFailedTrials", FK_INT32, max_failed_trials),
    F(kiln_hyperparameter_spec, "hyperparameterMetricTag", FK_STR, hyperparameter_metric_tag),
    F(kiln_hyperparameter_spec, "resumePreviousJobId", FK_STR, resume_previous_job_id),
    F(kiln_hyperparameter_spec, "enableTrialEarlyStopping", FK_BOOL, enable_trial_early_stopping),
    FEN(kiln_hyperparameter_spec, "algorithm", algorithm, algorithms, algorithm_nums),
    FE(kiln_hyperparameter_spec, "earlyStoppingRule", early_stopping_rule, early_stopping_rules),
    FH(kiln_hyperparameter_spec, "ashaReductionFactor", FK_INT64, asha_reduction_factor,
       has_asha_reduction_factor),
    FH(kiln_hyperparameter_spec, "ashaMinSteps", FK_INT64, asha_min_steps, has_asha_min_steps),
    FE(kiln_hyperparameter_spec, "measurementSelectionType", measurement_selection,
       measurement_selections),
};
static const kiln__msg hp_msg = {"HyperparameterSpec", sizeof(kiln_hyperparameter_spec), hp_fields,
                                 NF(hp_fields)};

#define TI kiln_training_input
static const kiln__field ti_fields[] = {
    FE(TI, "scaleTier", scale_tier, scale_tiers),
    F(TI, "masterType", FK_STR, master_type),
    FM(TI, "masterConfig", master_config, has_master_config, replica_msg),
    F(TI, "workerType", FK_STR, worker_type),
    F(TI, "workerCount", FK_INT64, worker_count),
    FM(TI, "workerConfig", worker_config, has_worker_config, replica_msg),
    F(TI, "parameterServerType", FK_STR, parameter_server_type),
    F(TI, "parameterServerCount", FK_INT64, parameter_server_count),
    FM(TI, "parameterServerConfig", parameter_server_config, has_parameter_server_config,
       replica_msg),
    F(TI, "evaluatorType", FK_STR, evaluator_type),
    F(TI, "evaluatorCount", FK_INT64, evaluator_count),
    FM(TI, "evaluatorConfig", evaluator_config, has_evaluator_config, replica_msg),
    F(TI, "packageUris", FK_STRV, package_uris),
    F(TI, "pythonModule", FK_STR, python_module),
    F(TI, "args", FK_STRV, args),
    F(TI, "region", FK_STR, region),
    F(TI, "jobDir", FK_STR, job_dir),
    F(TI, "runtimeVersion", FK_STR, runtime_version),
    F(TI, "pythonVersion", FK_STR, python_version),
    FM(TI, "hyperparameters", hyperparameters, has_hyperparameters, hp_msg),
    FM(TI, "scheduling", scheduling, has_scheduling, sched_msg),
    F(TI, "serviceAccount", FK_STR, service_account),
    F(TI, "network", FK_STR, network),
    F(TI, "useChiefInTfConfig", FK_BOOL, use_chief_in_tf_config),
    F(TI, "enableWebAccess", FK_BOOL, enable_web_access),
    FM(TI, "runPolicy", run_policy, has_run_policy, run_policy_msg),
    FM(TI, "pytorchJob", pytorch_job, has_pytorch_job, pytorch_msg),
    FM(TI, "kubeflowJob", kubeflow_job, has_kubeflow_job, kubeflow_msg),
    FM(TI, "mpiJob", mpi_job, has_mpi_job, mpi_msg),
    FM(TI, "vertex", vertex, has_vertex, vertex_msg),
};
#undef TI
static const kiln__msg ti_msg = {"TrainingInput", sizeof(kiln_training_input), ti_fields,
                                 NF(ti_fields)};

static const kiln__field to_fields[] = {
    F(kiln_training_output, "completedTrialCount", FK_INT64, completed_trial_count),
    F(kiln_training_output, "consumedMLUnits", FK_DOUBLE, consumed_ml_units),
    F(kiln_training_output, "isHyperparameterTuningJob", FK_BOOL, is_hyperparameter_tuning_job),
    F(kiln_training_output, "hyperparameterMetricTag", FK_STR, hyperparameter_metric_tag),
};
static const kiln__msg to_msg = {"TrainingOutput", sizeof(kiln_training_output), to_fields,
                                 NF(to_fields)};

static const kiln__field job_fields[] = {
    F(kiln_job, "jobId", FK_STR, job_id),
    F(kiln_job, "labels", FK_MAP, labels),
    FM(kiln_job, "trainingInput", training_input, has_training_input, ti_msg),
    FM(kiln_job, "trainingOutput", training_output, has_training_output, to_msg),
    F(kiln_job, "createTime", FK_STR, create_time),
    F(kiln_job, "startTime", FK_STR, start_time),
    F(kiln_job, "endTime", FK_STR, end_time),
    F(kiln_job, "state", FK_STATE, state),
    F(kiln_job, "errorMessage", FK_STR, error_message),
    F(kiln_job, "etag", FK_STR, etag),
};
const kiln__msg kiln__job_msg = {"Job", sizeof(kiln_job), job_fields, NF(job_fields)};

/* ---------- life cycle ---------- */

kiln_job *kiln_job_new(void)
{
    return calloc(1, sizeof(kiln_job));
}

void kiln_job_free(kiln_job *job)
{
    if (!job) return;
    kiln__free_fields(&kiln__job_msg, job);
    free(job);
}

static kiln_err from_tree(const json_t *root, int flags, kiln_job **out, kiln_diag *d)
{
    kiln_job *job = kiln_job_new();
    if (!job) return KILN_ENOMEM;
    if (!kiln__decode(&kiln__job_msg, root, job, "", flags, d)) {
        kiln_job_free(job);
        return KILN_EINVAL;
    }
    *out = job;
    return KILN_OK;
}

kiln_err kiln_job_from_json(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    kiln_err rc;
    *out = NULL;
    json_t *root = kiln__json_load(buf, len, d, &rc);
    if (!root) return rc;
    rc = from_tree(root, 0, out, d);
    json_decref(root);
    return rc;
}

kiln_err kiln_job_from_yaml(const char *buf, size_t len, kiln_job **out, kiln_diag *d)
{
    kiln_err rc;
    *out = NULL;
    json_t *root = kiln__yaml_load_err(buf, len, d, &rc);
    if (!root) return rc;
    rc = from_tree(root, KILN__DEC_YAML, out, d);
    json_decref(root);
    return rc;
}

char *kiln_job_to_json(const kiln_job *job, int flags)
{
    json_t *root = kiln__encode(&kiln__job_msg, job, 0);
    if (!root) return NULL;
    size_t jf = JSON_PRESERVE_ORDER | ((flags & KILN_ENC_COMPACT) ? JSON_COMPACT : JSON_INDENT(2));
    char *s = json_dumps(root, jf);
    json_decref(root);
    return s;
}

char *kiln_job_to_yaml(const kiln_job *job)
{
    json_t *root = kiln__encode(&kiln__job_msg, job, KILN__ENC_INT64_NUMBERS);
    if (!root) return NULL;
    char *s = kiln__yaml_dump(root);
    json_decref(root);
    return s;
}

/* A deep copy through the encoder: one code path for every field, and the
 * copy is by construction what a round trip through JSON would give. */
kiln_job *kiln_job_clone(const kiln_job *job)
{
    kiln_job *copy = NULL;
    kiln_diag d = KILN_DIAG_INIT;
    json_t *root = kiln__encode(&kiln__job_msg, job, 0);
    if (root && from_tree(root, 0, &copy, &d) != KILN_OK) copy = NULL;
    json_decref(root);
    kiln_diag_free(&d);
    return copy;
}

bool kiln_job_equal(const kiln_job *a, const kiln_job *b)
{
    json_t *ja = kiln__encode(&kiln__job_msg, a, 0);
    json_t *jb = kiln__encode(&kiln__job_msg, b, 0);
    bool eq = ja && jb && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return eq;
}

/* ---------- names ---------- */

static const char *const state_names[] = {"STATE_UNSPECIFIED", "QUEUED", "PREPARING",  "RUNNING",
                                          "SUCCEEDED",         "FAILED", "CANCELLING", "CANCELLED"};

const char *kiln_job_state_name(kiln_job_state s)
{
    return (unsigned)s < NF(state_names) ? state_names[s] : "STATE_UNSPECIFIED";
}

bool kiln_job_state_parse(const char *name, kiln_job_state *out)
{
    for (size_t i = 0; i < NF(state_names); i++)
        if (strcmp(name, state_names[i]) == 0) {
            *out = (kiln_job_state)i;
            return true;
        }
    return false;
}

const char *kiln_role_name(kiln_role r)
{
    static const char *const n[] = {"master", "worker", "ps", "evaluator"};
    return (unsigned)r < KILN_ROLE_COUNT ? n[r] : "?";
}

const char *kiln_role_field(kiln_role r)
{
    static const char *const n[] = {"master", "worker", "parameterServer", "evaluator"};
    return (unsigned)r < KILN_ROLE_COUNT ? n[r] : "?";
}

kiln_role_fields kiln_job_role_fields(kiln_training_input *ti, kiln_role r)
{
    switch (r) {
    case KILN_ROLE_WORKER:
        return (kiln_role_fields){&ti->worker_type, &ti->worker_count, &ti->has_worker_config,
                                  &ti->worker_config};
    case KILN_ROLE_PARAMETER_SERVER:
        return (kiln_role_fields){&ti->parameter_server_type, &ti->parameter_server_count,
                                  &ti->has_parameter_server_config, &ti->parameter_server_config};
    case KILN_ROLE_EVALUATOR:
        return (kiln_role_fields){&ti->evaluator_type, &ti->evaluator_count,
                                  &ti->has_evaluator_config, &ti->evaluator_config};
    default:
        return (kiln_role_fields){&ti->master_type, NULL, &ti->has_master_config,
                                  &ti->master_config};
    }
}

/* The read-only views go through the same table; the cast is safe because
 * nothing is written through the pointers here. */
static kiln_role_fields role_view(const kiln_job *job, kiln_role r)
{
    return kiln_job_role_fields((kiln_training_input *)&job->training_input, r);
}

const char *kiln_job_role_type(const kiln_job *job, kiln_role r)
{
    return (unsigned)r < KILN_ROLE_COUNT ? *role_view(job, r).type : NULL;
}

int64_t kiln_job_role_count(const kiln_job *job, kiln_role r)
{
    if ((unsigned)r >= KILN_ROLE_COUNT) return 0;
    kiln_role_fields f = role_view(job, r);
    return f.count ? *f.count : 1;
}

bool kiln_job_topology(const kiln_job *job, kiln_role r, kiln_topology_request *out)
{
    memset(out, 0, sizeof *out);
    const kiln_replica_config *rc = kiln_job_role_config(job, r);
    if (r != KILN_ROLE_MASTER && kiln_job_role_count(job, r) <= 0) return false;
    if (rc && rc->has_topology) {
        *out = rc->topology;
        return true;
    }
    const char *req = kiln_map_get(&job->labels, KILN_LABEL_REQUIRED_TOPOLOGY);
    const char *pref = kiln_map_get(&job->labels, KILN_LABEL_PREFERRED_TOPOLOGY);
    const char *unc = kiln_map_get(&job->labels, KILN_LABEL_UNCONSTRAINED_TOPOLOGY);
    if (!req && !pref && !(unc && strcmp(unc, "true") == 0)) return false;
    out->required = (char *)req;
    out->preferred = (char *)pref;
    out->unconstrained = unc && strcmp(unc, "true") == 0;
    out->group = (char *)"kiln-job"; /* the labels are the whole job's */
    return true;
}

long kiln_topology_level(const char *const *levels, size_t n, const char *want)
{
    for (size_t i = 0; want && i < n; i++) {
        const char *slash = strrchr(levels[i], '/');
        if (strcmp(levels[i], want) == 0 || (slash && strcmp(slash + 1, want) == 0)) return (long)i;
    }
    return -1;
}

const kiln_replica_config *kiln_job_role_config(const kiln_job *job, kiln_role r)
{
    if ((unsigned)r >= KILN_ROLE_COUNT) return NULL;
    kiln_role_fields f = role_view(job, r);
    return *f.has_config ? f.config : NULL;
}

const char *kiln_job_restart_policy(const kiln_job *job, kiln_role r)
{
    const kiln_replica_config *c = kiln_job_role_config(job, r);
    if (c && c->restart_policy && *c->restart_policy) return c->restart_policy;
    return "Never";
}

bool kiln_restart_policy_retries(const char *pol, int code)
{
    if (strcmp(pol, "Always") == 0) return true;
    if (code == 0) return false;
    if (strcmp(pol, "OnFailure") == 0) return true;
    return strcmp(pol, "ExitCode") == 0 && code >= 128;
}

int kiln_job_backoff_limit(const kiln_job *job)
{
    const kiln_training_input *ti = &job->training_input;
    if (ti->has_run_policy && ti->run_policy.has_backoff_limit)
        return (int)ti->run_policy.backoff_limit;
    return 3;
}

/* ---------- ownership helpers ---------- */

kiln_err kiln_set_str(char **slot, const char *value)
{
    char *copy = NULL;
    if (value && *value) {
        copy = strdup(value);
        if (!copy) return KILN_ENOMEM;
    }
    free(*slot);
    *slot = copy;
    return KILN_OK;
}

kiln_err kiln_strv_push(kiln_strv *v, const char *s)
{
    char *copy = strdup(s ? s : "");
    char **nv = copy ? realloc(v->v, (v->n + 2) * sizeof(char *)) : NULL;
    if (!nv) {
        free(copy);
        return KILN_ENOMEM;
    }
    v->v = nv;
    v->v[v->n++] = copy;
    v->v[v->n] = NULL; /* kept NULL-terminated: handy for execv */
    return KILN_OK;
}

void kiln_strv_clear(kiln_strv *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->v[i]);
    free(v->v);
    v->v = NULL;
    v->n = 0;
}

kiln_err kiln_map_set(kiln_map *m, const char *key, const char *val)
{
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->keys[i], key) != 0) continue;
        char *nv = strdup(val ? val : ""); /* map values may be "", unlike fields */
        if (!nv) return KILN_ENOMEM;
        free(m->vals[i]);
        m->vals[i] = nv;
        return KILN_OK;
    }
    char *k = strdup(key), *v = strdup(val ? val : "");
    char **nk = k && v ? realloc(m->keys, (m->n + 1) * sizeof(char *)) : NULL;
    if (nk) m->keys = nk;
    char **nvv = nk ? realloc(m->vals, (m->n + 1) * sizeof(char *)) : NULL;
    if (!nvv) {
        free(k);
        free(v);
        return KILN_ENOMEM;
    }
    m->vals = nvv;
    m->keys[m->n] = k;
    m->vals[m->n] = v;
    m->n++;
    return KILN_OK;
}

const char *kiln_map_get(const kiln_map *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], key) == 0) return m->vals[i];
    return NULL;
}

void kiln_map_clear(kiln_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->vals[i]);
    }
    free(m->keys);
    free(m->vals);
    m->keys = m->vals = NULL;
    m->n = 0;
}
