/* kiln/job.h - the Job model: one in-memory form of the projects.jobs resource.
 *
 * A kiln_job is what every input turns into (config.yaml, Job JSON, Kubeflow
 * TFJob YAML, command-line flags) and what the store, scheduler and executor
 * consume. Field names follow the REST resource (docs/job-model.md lists
 * them, with kiln's extensions marked).
 *
 * Presence follows proto3, the resource's own definition: an empty string,
 * a zero number, false and an empty list are "not set" and are omitted on
 * output. Messages (masterConfig, acceleratorConfig, ...) have explicit
 * presence through their has_* flag. Durations are whole seconds + nanos.
 *
 * Ownership: every char* and array inside a kiln_job is owned by it and freed
 * by kiln_job_free(). Setters below replace and free the old value. */
#ifndef KILN_JOB_H
#define KILN_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_strv { /* a list of strings */
    char **v;
    size_t n;
} kiln_strv;

typedef struct kiln_map { /* string -> string, insertion order kept */
    char **keys;
    char **vals;
    size_t n;
} kiln_map;

typedef struct kiln_duration {
    int64_t seconds;
    int32_t nanos;
} kiln_duration;

typedef struct kiln_accelerator_config {
    int64_t count;
    char *type; /* NVIDIA_TESLA_V100, TPU_V2, ... (catalog-checked) */
} kiln_accelerator_config;

typedef struct kiln_disk_config {
    char *boot_disk_type; /* pd-ssd | pd-standard */
    int64_t boot_disk_size_gb;
} kiln_disk_config;

/* kiln extension, from a Kubernetes container's (and pod's) securityContext:
 * what kiln acts on or checks, each with Kubernetes' meaning
 * (docs/job-model.md). Who a replica runs as is kiln's to decide (its
 * project's Unix user): runAsUser and runAsGroup only state it, and are
 * refused at create unless they are true (kiln_job_check_run_as). */
typedef struct kiln_security_context {
    bool has_run_as_user;
    int64_t run_as_user;
    bool has_run_as_group;
    int64_t run_as_group;
    bool run_as_non_root;           /* refused at create when the replica would run as root */
    bool no_new_privileges;         /* allowPrivilegeEscalation: false */
    bool read_only_root_filesystem; /* container replicas: podman --read-only */
    kiln_strv cap_drop;             /* capabilities.drop ("ALL", "NET_RAW"): container --cap-drop */
    char *seccomp_profile;          /* RuntimeDefault: container replicas (podman's default) */
} kiln_security_context;

/* kiln extension, from a Kubernetes pod template's spec.tolerations (and a
 * Kueue ResourceFlavor's): which node taints (kiln/devices.h) a replica
 * may be placed despite. Unset strings are NULL. Kubernetes' meaning
 * (kiln_toleration_tolerates): an empty key with Exists matches every
 * taint, an empty effect every effect, an empty operator is Equal. */
typedef struct kiln_toleration {
    char *key;
    char *op;     /* Equal (default) | Exists; JSON "operator" */
    char *value;  /* Equal only */
    char *effect; /* NoSchedule | PreferNoSchedule | NoExecute; unset: all */
    bool has_toleration_seconds;
    int64_t toleration_seconds; /* NoExecute: how long it stays once tainted */
} kiln_toleration;

/* A node's (or a ResourceFlavor's) taint: key=value:effect. */
typedef struct kiln_taint {
    char *key;
    char *value;  /* NULL: none */
    char *effect; /* NoSchedule | PreferNoSchedule | NoExecute */
} kiln_taint;

/* kiln extension: Kueue's topology-aware scheduling request of one role
 * (a podset), from its pod template's annotations
 * kueue.x-k8s.io/podset-{required,preferred,unconstrained}-topology and
 * podset-group-name (docs/queues.md). A level is a node label of the
 * Topology of the flavor the job is admitted to (or, from the kiln labels
 * of ml v1 and Vertex jobs, the part of one after its last '/'). At most one
 * of required, preferred and unconstrained is set. */
typedef struct kiln_topology_request {
    char *required;     /* every replica of the role in one domain of this level, or none */
    char *preferred;    /* that level first, then each coarser one, then spread out */
    bool unconstrained; /* placed by topology (fewest nodes), no domain asked */
    char *group;        /* roles of one group share their domain */
} kiln_topology_request;

typedef struct kiln_replica_config {
    bool has_accelerator_config;
    kiln_accelerator_config accelerator_config;
    char *image_uri;
    kiln_strv container_command;
    kiln_strv container_args;
    char *tpu_tf_version;
    bool has_disk_config;
    kiln_disk_config disk_config;
    /* kiln extensions (from Kubeflow TFJob), not in AI Platform's resource: */
    char *restart_policy;    /* Always | OnFailure | Never | ExitCode */
    kiln_map node_selector;  /* pod nodeSelector, kept for placement */
    kiln_map env;            /* container env (NAME -> value), after kiln's own variables */
    char *cpu_limit;         /* resources.limits.cpu ("2", "500m"): container replicas */
    char *memory_limit;      /* resources.limits.memory ("4Gi"): container replicas */
    kiln_strv host_mounts;   /* hostPath volumes: "HOST:CONTAINER[:ro]", container replicas */
    char *image_pull_policy; /* IfNotPresent (default) | Always | Never: container replicas */
    /* resources.requests: what placement reserves (unset: the limit, as the
     * Kubernetes API server defaults a pod's requests from its limits) */
    char *cpu_request;
    char *memory_request;
    char *working_dir; /* a container's workingDir: the program's directory (unset: kiln's) */
    /* emptyDir volumes: "PATH" (a scratch volume on disk) or "PATH:Memory[:SIZE]"
     * (a tmpfs of at most SIZE, a memory quantity), each the container's own and
     * removed with it: container replicas */
    kiln_strv scratch_mounts;
    /* persistentVolumeClaim volumes: "CLAIM:/PATH[:ro]", each the directory the
     * site's claim table names (kiln/claims.h): container replicas */
    kiln_strv claim_mounts;
    bool has_security_context;
    kiln_security_context security_context;
    /* the pod's spec.tolerations: the node taints it may land despite */
    kiln_toleration *tolerations;
    size_t n_tolerations;
    bool has_topology;
    kiln_topology_request topology;
} kiln_replica_config;

typedef struct kiln_scheduling {
    bool has_max_running_time;
    kiln_duration max_running_time; /* default 604800s (7 days) */
    bool has_max_wait_time;
    kiln_duration max_wait_time; /* at least 1800s */
    int64_t priority;            /* 0..1000 */
} kiln_scheduling;

typedef struct kiln_run_policy { /* kiln extension, from Kubeflow runPolicy */
    bool has_backoff_limit;
    int64_t backoff_limit;
    bool has_active_deadline_seconds;
    int64_t active_deadline_seconds;
    bool has_ttl_seconds_after_finished;
    int64_t ttl_seconds_after_finished;
    char *clean_pod_policy; /* All | Running | None */
} kiln_run_policy;

/* kiln extension, from a Kubeflow PyTorchJob's spec.elasticPolicy: the
 * workers form their group through torchrun's rendezvous, so their number
 * may change while the job runs (docs/job-model.md, "Elastic PyTorch jobs"). */
/* One of elasticPolicy.metrics: a HorizontalPodAutoscaler (autoscaling/v2)
 * MetricSpec of type Resource, flattened (docs/job-model.md). */
typedef struct kiln_elastic_metric {
    char *resource;              /* cpu | memory */
    char *target_type;           /* Utilization | AverageValue */
    int64_t average_utilization; /* Utilization: percent of the replica's request */
    char *average_value;         /* AverageValue: a quantity per worker ("500m", "1Gi") */
} kiln_elastic_metric;

typedef struct kiln_elastic_policy {
    int64_t min_replicas; /* workers needed to run (0: the Worker replicas) */
    int64_t max_replicas; /* workers wanted at most (0: the Worker replicas) */
    char *rdzv_backend;   /* c10d (default), etcd, etcd-v2, static */
    char *rdzv_host;      /* unset: worker 0's address */
    int64_t rdzv_port;    /* unset: worker 0's port */
    char *rdzv_id;        /* unset: the jobId */
    kiln_map rdzv_conf;   /* torchrun --rdzv_conf key=value pairs */
    bool has_max_restarts;
    int64_t max_restarts; /* restarts per worker; the others carry on */
    bool standalone;
    char *n_proc_per_node;        /* auto | cpu | gpu | N (not with spec.nprocPerNode) */
    kiln_elastic_metric *metrics; /* autoscaling: the worker count follows these */
    size_t n_metrics;
} kiln_elastic_policy;

/* kiln extension: the job came from a Kubeflow PyTorchJob, whose replicas get
 * PyTorch's environment (kiln/exec.h) besides TF_CONFIG. */
typedef struct kiln_pytorch_job {
    char *nproc_per_node; /* spec.nprocPerNode: auto | cpu | gpu | N */
    bool workers_only;    /* no Master: kiln's master is Worker 0 */
    bool has_elastic_policy;
    kiln_elastic_policy elastic_policy;
} kiln_pytorch_job;

/* kiln extension, from a Kubeflow JAXJob, PaddleJob or XGBoostJob: the
 * replicas get the environment that kind's operator sets (COORDINATOR_*,
 * PADDLE_*, MASTER_ADDR/WORKER_ADDRS...: docs/job-model.md, src/exec/kfenv.c). */
typedef struct kiln_kubeflow_job {
    char *kind;        /* JAXJob | PaddleJob | XGBoostJob | TrainJob */
    bool workers_only; /* no Master: kiln's master is Worker 0 (JAXJob; PaddleJob collective) */
    /* TrainJob (torch policy): PET_NPROC_PER_NODE as Trainer computes it
     * (trainer.numProcPerNode, else auto with GPUs, else the node's CPUs) */
    char *nproc_per_node;
    char *runtime; /* TrainJob: "ClusterTrainingRuntime/NAME" it was read against */
    /* TrainJob: spec.suspend was true (accepted under a queue, whose
     * admission is the unsuspend): the Suspended condition Trainer shows */
    bool suspend;
} kiln_kubeflow_job;

/* kiln extension, from a Kubeflow MPIJob (kubeflow.org/v1, the training
 * operator's, or kubeflow.org/v2beta1, mpi-operator's): Launcher -> master,
 * Worker -> workers. kilnd runs its replicas as processes, the launcher's
 * mpirun starting ranks through kiln-mpi-agent (src/exec/mpienv.c,
 * docs/job-model.md). */
typedef struct kiln_mpi_job {
    char *api_version;              /* kubeflow.org/v1 | kubeflow.org/v2beta1 */
    int64_t slots_per_worker;       /* spec.slotsPerWorker (default 1) */
    char *implementation;           /* v2beta1 mpiImplementation: OpenMPI | Intel | MPICH */
    bool run_launcher_as_worker;    /* v2beta1 */
    char *launcher_creation_policy; /* v2beta1: AtStartup | WaitForWorkersReady */
    char *ssh_auth_mount_path;      /* v2beta1 (default /root/.ssh) */
    char *main_container;           /* v1 mainContainer (default: the first container) */
} kiln_mpi_job;

/* kiln extension: the job is a Vertex AI CustomJob (made through the
 * aiplatform v1 API, src/api/api_vertex.c; kiln_job_from_custom_job). Its
 * replicas get Vertex's environment (CLUSTER_SPEC with workerpoolN pools,
 * AIP_*_DIR under baseOutputDirectory, CLOUD_ML_JOB_ID: kiln/exec.h). */
typedef struct kiln_vertex_job {
    char *display_name;          /* the CustomJob's displayName */
    char *base_output_directory; /* jobSpec.baseOutputDirectory.outputUriPrefix */
    /* a TrainingPipeline's modelToUpload as sent (compact JSON), or NULL:
     * the Model it becomes on success, its files under base/model/ */
    char *model_to_upload;
    /* jobSpec.persistentResourceId: the ClusterQueue a site declares as
     * that persistent resource (docs/vertex.md) admits the job */
    char *persistent_resource_id;
} kiln_vertex_job;

typedef struct kiln_parameter_spec {
    char *parameter_name;
    char *type; /* DOUBLE | INTEGER | CATEGORICAL | DISCRETE */
    double min_value, max_value;
    kiln_strv categorical_values;
    double *discrete_values;
    size_t n_discrete_values;
    char *scale_type; /* NONE | UNIT_LINEAR_SCALE | UNIT_LOG_SCALE | UNIT_REVERSE_LOG_SCALE */
    /* kiln extension (Vertex's conditionalParameterSpecs, flattened parent
     * first; AI Platform has no conditional parameters): when
     * parent_parameter is set, a trial has this parameter only when the
     * parameter of that name, listed before it, is in the trial and has one
     * of parent_categorical_values (a CATEGORICAL parent) or parent_values
     * (a DISCRETE or INTEGER parent) */
    char *parent_parameter;
    kiln_strv parent_categorical_values;
    double *parent_values;
    size_t n_parent_values;
} kiln_parameter_spec;

typedef struct kiln_hyperparameter_spec {
    char *goal; /* MAXIMIZE | MINIMIZE */
    kiln_parameter_spec *params;
    size_t n_params;
    int64_t max_trials, max_parallel_trials, max_failed_trials;
    char *hyperparameter_metric_tag;
    char *resume_previous_job_id;
    bool enable_trial_early_stopping;
    char *algorithm; /* ALGORITHM_UNSPECIFIED | GRID_SEARCH | RANDOM_SEARCH */
    /* kiln extension: the early-stopping rule, MEDIAN (unset) | ASHA, and
     * ASHA's reduction factor (eta) and first rung (in training steps) */
    char *early_stopping_rule;
    bool has_asha_reduction_factor;
    int64_t asha_reduction_factor;
    bool has_asha_min_steps;
    int64_t asha_min_steps;
    /* kiln extension (Vertex's studySpec.measurementSelectionType): which
     * report is a trial's objective, LAST_MEASUREMENT (unset: AI Platform's
     * rule) or BEST_MEASUREMENT (the best by the goal) */
    char *measurement_selection;
} kiln_hyperparameter_spec;

typedef struct kiln_training_input {
    char *scale_tier; /* BASIC | STANDARD_1 | PREMIUM_1 | BASIC_GPU | BASIC_TPU | CUSTOM */
    char *master_type;
    bool has_master_config;
    kiln_replica_config master_config;
    char *worker_type;
    int64_t worker_count;
    bool has_worker_config;
    kiln_replica_config worker_config;
    char *parameter_server_type;
    int64_t parameter_server_count;
    bool has_parameter_server_config;
    kiln_replica_config parameter_server_config;
    char *evaluator_type;
    int64_t evaluator_count;
    bool has_evaluator_config;
    kiln_replica_config evaluator_config;
    kiln_strv package_uris;
    char *python_module;
    kiln_strv args;
    char *region;
    char *job_dir;
    char *runtime_version;
    char *python_version;
    bool has_hyperparameters;
    kiln_hyperparameter_spec hyperparameters;
    bool has_scheduling;
    kiln_scheduling scheduling;
    char *service_account;
    char *network;
    bool use_chief_in_tf_config;
    bool enable_web_access;
    bool has_run_policy; /* kiln extension */
    kiln_run_policy run_policy;
    bool has_pytorch_job; /* kiln extension */
    kiln_pytorch_job pytorch_job;
    bool has_mpi_job; /* kiln extension */
    kiln_mpi_job mpi_job;
    bool has_kubeflow_job; /* kiln extension */
    kiln_kubeflow_job kubeflow_job;
    bool has_vertex; /* kiln extension */
    kiln_vertex_job vertex;
} kiln_training_input;

typedef struct kiln_training_output {
    int64_t completed_trial_count;
    double consumed_ml_units;
    bool is_hyperparameter_tuning_job;
    char *hyperparameter_metric_tag;
} kiln_training_output;

typedef enum kiln_job_state {
    KILN_STATE_UNSPECIFIED = 0,
    KILN_STATE_QUEUED,
    KILN_STATE_PREPARING,
    KILN_STATE_RUNNING,
    KILN_STATE_SUCCEEDED,
    KILN_STATE_FAILED,
    KILN_STATE_CANCELLING,
    KILN_STATE_CANCELLED,
} kiln_job_state;

typedef struct kiln_job {
    char *job_id;
    kiln_map labels;
    bool has_training_input;
    kiln_training_input training_input;
    /* output-only, set by the service */
    bool has_training_output;
    kiln_training_output training_output;
    char *create_time, *start_time, *end_time; /* RFC 3339 */
    kiln_job_state state;
    char *error_message;
    char *etag;
} kiln_job;

/* The replica roles of a job, in TF_CONFIG order. */
typedef enum kiln_role {
    KILN_ROLE_MASTER = 0,
    KILN_ROLE_WORKER,
    KILN_ROLE_PARAMETER_SERVER,
    KILN_ROLE_EVALUATOR,
    KILN_ROLE_COUNT
} kiln_role;

/* ---- life cycle ---- */
kiln_job *kiln_job_new(void);
void kiln_job_free(kiln_job *job);
kiln_job *kiln_job_clone(const kiln_job *job); /* deep copy; NULL on ENOMEM */
bool kiln_job_equal(const kiln_job *a, const kiln_job *b);

/* ---- decoding ----
 * Decoders check the shape of the input (types, known field names, enum
 * values, sizes) and report each problem to `d` with its field path; they do
 * not apply catalog rules (see kiln/catalog.h). Unknown fields are errors, as
 * in the REST API. Returns KILN_OK and sets *out, or KILN_EINVAL (see `d`),
 * KILN_ELIMIT or KILN_ENOMEM and leaves *out NULL.
 * Input caps: KILN_SPEC_MAX_BYTES bytes, KILN_SPEC_MAX_DEPTH nesting. */
#define KILN_SPEC_MAX_BYTES (4u << 20)
#define KILN_SPEC_MAX_DEPTH 64

/* A Job resource in JSON. Int64 fields accept numbers or decimal strings. */
kiln_err kiln_job_from_json(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* AI Platform config.yaml: a Job in YAML (top-level trainingInput, jobId, labels). */
kiln_err kiln_job_from_yaml(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* A Kubeflow training job (apiVersion kubeflow.org/v1), YAML or JSON, read by
 * its kind: TFJob or PyTorchJob. Other kinds (MPIJob, XGBoostJob...) and files
 * of several YAML documents are refused with an error that says why. */
kiln_err kiln_job_from_kubeflow(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* The same, and `notes` (when not NULL) gets one entry per key of the file
 * that is accepted but not used, because it is harmless to drop: its field
 * path and why (metadata.namespace; annotations other than kiln.dev/...;
 * pod template labels). The CLI prints them (`note: ...`) so that nothing in
 * the file is dropped silently; kilnd never sees the file. */
kiln_err kiln_job_from_kubeflow_notes(const char *buf, size_t len, kiln_job **out, kiln_diag *d,
                                      kiln_diag *notes);
/* The same, with a TrainJob's runtimeRef looked up in `runtimes_dir`
 * (<dir>/<name>.yaml, a ClusterTrainingRuntime or TrainingRuntime); NULL
 * means $KILN_RUNTIMES_DIR, else the stock runtimes (data/runtimes). */
kiln_err kiln_job_from_kubeflow_in(const char *buf, size_t len, kiln_job **out, kiln_diag *d,
                                   kiln_diag *notes, const char *runtimes_dir);

/* A TrainJob's status.conditions as Trainer reports them (Complete or
 * Failed, from the job's state: src/spec/trainjob_status.c): a new JSON
 * array the caller owns (empty while no condition holds), or NULL for a
 * job that is not a TrainJob or when out of memory. */
struct json_t;
struct json_t *kiln_trainjob_conditions(const kiln_job *job);
/* The same (the name from before PyTorchJob): a TFJob or a PyTorchJob. */
kiln_err kiln_job_from_tfjob(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* A Vertex AI CustomJob resource in JSON (the body of aiplatform v1's
 * customJobs.create; src/spec/vertex.c): workerPoolSpecs[0..3] become the
 * master, workers, parameter servers and evaluators. Every field it does not
 * act on is refused, by its CustomJob path (jobSpec.workerPoolSpecs[1]...).
 * Output-only fields (name, state, times) are refused too. The job has no
 * jobId: the caller names it. */
kiln_err kiln_job_from_custom_job(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* A Vertex AI HyperparameterTuningJob in JSON (src/spec/vertex.c): its
 * studySpec onto trainingInput.hyperparameters, its trialJobSpec as a
 * CustomJob's jobSpec. Refusals as for kiln_job_from_custom_job. */
kiln_err kiln_job_from_hp_tuning_job(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* The training task definition kiln runs: Vertex's custom task, what the
 * SDK's CustomTrainingJob, CustomContainerTrainingJob and
 * CustomPythonPackageTrainingJob send (and read back byte for byte). */
#define KILN_VERTEX_CUSTOM_TASK                                                                    \
    "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
/* A Vertex AI TrainingPipeline in JSON (src/spec/vertex.c): its
 * trainingTaskInputs, a CustomJobSpec in either spelling of its keys, run
 * as that CustomJob; trainingTaskDefinition must be the custom task.
 * Refusals as for kiln_job_from_custom_job, named under trainingTaskInputs. */
kiln_err kiln_job_from_training_pipeline(const char *buf, size_t len, kiln_job **out, kiln_diag *d);
/* A Vertex AI UploadModelRequest in JSON (models:upload's body;
 * src/spec/vertex.c): `model` checked as a pipeline's modelToUpload is,
 * plus its artifactUri (a gs:// URI; whether kilnd holds it is the
 * caller's check), and `modelId`. parentModel, serviceAccount and any
 * field kiln does not act on are refused by name. On KILN_OK *out holds
 * malloc'd strings, freed with kiln_vertex_upload_clear; on failure it is
 * empty. */
typedef struct kiln_vertex_upload {
    char *model;        /* the Model as sent, compact JSON, keys sorted */
    char *model_id;     /* modelId, or NULL: the service picks one */
    char *artifact_uri; /* model.artifactUri, or NULL */
} kiln_vertex_upload;
kiln_err kiln_vertex_upload_parse(const char *buf, size_t len, kiln_vertex_upload *out,
                                  kiln_diag *d);
void kiln_vertex_upload_clear(kiln_vertex_upload *u);
/* Vertex's modelId rule: 1-63 of [a-z0-9_-], the first a letter. */
bool kiln_vertex_model_id_valid(const char *s, size_t n);
/* The studySpec of such a job (a json_t *, as kiln_job_custom_job_spec). */
void *kiln_job_study_spec(const kiln_job *job);
/* The CustomJobSpec of a job (jobSpec as aiplatform v1 shows it), built back
 * from the Job model; NULL on ENOMEM. A jansson object (json_t *), returned
 * as void * so that this header needs no jansson. */
void *kiln_job_custom_job_spec(const kiln_job *job);
/* The CustomJob path of an ml v1 field path (trainingInput.workerType ->
 * jobSpec.workerPoolSpecs[1].machineSpec.machineType), into out; the path
 * itself where there is none. */
void kiln_job_custom_job_field(const char *ml_field, char *out, size_t cap);

/* ---- encoding ---- (caller frees the string; NULL on ENOMEM) */
enum { KILN_ENC_COMPACT = 1 /* JSON on one line */ };
char *kiln_job_to_json(const kiln_job *job, int flags);
char *kiln_job_to_yaml(const kiln_job *job);

/* ---- helpers for the modules downstream ---- */
const char *kiln_job_state_name(kiln_job_state s);
bool kiln_job_state_parse(const char *name, kiln_job_state *out);
const char *kiln_role_name(kiln_role r);  /* "master", "worker", "ps", "evaluator" */
const char *kiln_role_field(kiln_role r); /* "master", "worker", "parameterServer", "evaluator" */
/* The fields of one role in the training input, for code that fills them
 * (front ends, normalisation). `count` is NULL for the master (always one). */
typedef struct kiln_role_fields {
    char **type;
    int64_t *count;
    bool *has_config;
    kiln_replica_config *config;
} kiln_role_fields;
kiln_role_fields kiln_job_role_fields(kiln_training_input *ti, kiln_role r);

/* Per-role views of the training input (NULL where the role has no config). */
const char *kiln_job_role_type(const kiln_job *job, kiln_role r);
int64_t kiln_job_role_count(const kiln_job *job, kiln_role r); /* master: 1 */
const kiln_replica_config *kiln_job_role_config(const kiln_job *job, kiln_role r);
/* Topology-aware placement: ml v1 and Vertex jobs ask by labels, whose
 * values cannot hold a node label key's '/' or '.': a level's last part. */
#define KILN_LABEL_REQUIRED_TOPOLOGY      "kiln-required-topology"
#define KILN_LABEL_PREFERRED_TOPOLOGY     "kiln-preferred-topology"
#define KILN_LABEL_UNCONSTRAINED_TOPOLOGY "kiln-unconstrained-topology"
/* Role r's topology request: its own (kiln_replica_config.topology), else
 * the job's labels above ("true" for unconstrained), which put every role
 * in one group (one domain for the whole gang). False: none. Shallow: the
 * strings are the job's. */
bool kiln_job_topology(const kiln_job *job, kiln_role r, kiln_topology_request *out);
/* The index of `want` among levels[0..n): a level's node label, or the part
 * of one after its last '/' ("topology-rack", "hostname"); -1: none. */
long kiln_topology_level(const char *const *levels, size_t n, const char *want);
/* What every executor reads for a failed replica: its role's restartPolicy
 * ("Never" when unset) and the job's runPolicy.backoffLimit (3 when unset). */
const char *kiln_job_restart_policy(const kiln_job *job, kiln_role r);
int kiln_job_backoff_limit(const kiln_job *job);
/* Kubeflow's restart rule, decided here for every executor: whether a
 * replica that ended with `code` (a signal as 128 + its number) is run
 * again under restart policy `pol`: Always, whatever the status; OnFailure,
 * any non-zero status; ExitCode, 128-255 only (1-127 are permanent
 * errors); Never, not at all. The backoff limit is the caller's. */
bool kiln_restart_policy_retries(const char *pol, int code);

/* Taints and tolerations, with Kubernetes' rules (k8s.io/api core/v1
 * Toleration.ToleratesTaint): an effect, when the toleration names one,
 * must be the taint's; a key, when it names one, the taint's; then Exists
 * matches any value, Equal (or no operator) the taint's value exactly. */
bool kiln_toleration_tolerates(const kiln_toleration *t, const kiln_taint *taint);
/* Whether any of v[0..n) or, after them, of extra[0..n_extra) (a Kueue
 * flavor's tolerations; NULL: none) tolerates `taint`. */
bool kiln_tolerations_tolerate(const kiln_toleration *v, size_t n, const kiln_toleration *extra,
                               size_t n_extra, const kiln_taint *taint);
/* Kubernetes' NoExecute rule (its taint manager's, for a pod already on a
 * node): how long a replica with tolerations v[0..n) (and extra[0..n_extra),
 * a Kueue flavor's) may stay on a node with taints t[0..nt). Each NoExecute
 * taint takes the first toleration that matches it (v before extra); 0: one
 * is not tolerated, or a matching toleration's tolerationSeconds is <= 0
 * (leave now); else the least tolerationSeconds among them; -1: it stays
 * (no NoExecute taint, or none of the matching tolerations has
 * tolerationSeconds). *which (may be NULL) gets the taint that decided:
 * the untolerated one, or the one tolerated for the least time. */
int64_t kiln_noexecute_stay(const kiln_toleration *v, size_t n, const kiln_toleration *extra,
                            size_t n_extra, const kiln_taint *t, size_t nt,
                            const kiln_taint **which);
/* Whether `effect` is one a taint may have (NoSchedule, PreferNoSchedule,
 * NoExecute). */
bool kiln_taint_effect_valid(const char *effect);
/* Kubernetes' validation of one toleration (ValidateTolerations): the
 * operator Equal, Exists or unset; an empty key only with Exists; Exists
 * with no value; tolerationSeconds only with effect NoExecute; a known
 * effect. false with the reason in `why` (the offending field's name
 * first: "operator: ..."). */
bool kiln_toleration_check(const kiln_toleration *t, char *why, size_t len);
/* "key=value:effect" (or "key:effect"), into buf; returns buf. */
const char *kiln_taint_str(const kiln_taint *t, char *buf, size_t len);
void kiln_taint_clear(kiln_taint *t);
void kiln_toleration_clear(kiln_toleration *t);

/* String helpers that keep the ownership rules in one place. */
kiln_err kiln_set_str(char **slot, const char *value); /* NULL or "" clears */
kiln_err kiln_strv_push(kiln_strv *v, const char *s);
void kiln_strv_clear(kiln_strv *v);
kiln_err kiln_map_set(kiln_map *m, const char *key, const char *val);
const char *kiln_map_get(const kiln_map *m, const char *key);
void kiln_map_clear(kiln_map *m);

#ifdef __cplusplus
}
#endif
#endif
