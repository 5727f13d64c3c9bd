#!/usr/bin/env bash
# `kiln validate` and the `kiln` entry point: exit codes 0/1/2, stdout, stderr.
. "$(dirname "$0")/lib.sh"
EX=$SRC/examples/tfjob

cat >"$TMP/config.yaml" <<'YAML'
jobId: census_file
labels: {team: data}
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  workerType: n1-standard-8
  workerCount: 2
  region: europe-west4
  pythonModule: trainer.task
  packageUris: [file:///srv/pkg/trainer.tar.gz]
  args: [--from-file]
YAML
# AI Platform's config.yaml may hold only trainingInput
cat >"$TMP/only-input.yaml" <<'YAML'
trainingInput:
  scaleTier: BASIC
  region: us-central1
  pythonModule: trainer.task
  packageUris: [file:///srv/pkg/trainer.tar.gz]
YAML
printf 'trainingInput: [\n' >"$TMP/broken.yaml"
sed 's#kubeflow.org/v1$#kubeflow.org/v1beta1#' "$EX/cpu.yaml" >"$TMP/old-api.yaml"

# ---- the entry point ----
run 0 "$KILN" --version;            out_has "kiln "
run 0 "$KILN" --help;               out_has "validate"; out_has "catalog"
run 1 "$KILN";                      err_has "usage: kiln"
run 1 "$KILN" valdate;              err_has "did you mean 'validate'"
run 0 "$KILN" validate --help;      out_has "usage: kiln validate"; err_empty

# ---- valid input: exit 0, the normalised Job on stdout, on stderr only notes ----
run 0 "$KILN" validate --tfjob "$EX/dist-gpu.yaml"
out_has "jobId: mnist_dist_gpu"; out_has "useChiefInTfConfig: true"
out_has "type: NVIDIA_TESLA_V100"; out_has "parameterServerCount: 2"
out_has "maxRunningTime: 604800s"    # normalised: the default filled in
err_has "note: metadata.namespace: 'ml' is not used"   # said, not silently dropped
run 0 "$KILN" validate --tfjob "$EX/cpu.yaml" --format json
out_has '"jobId": "fashion_mnist_cpu"'; out_has '"workerCount": "1"'
out_has '"region": "us-central1"'   # no annotation: the catalog's default region
err_empty
run 0 "$KILN" validate my_job --tfjob "$EX/cpu.yaml" --region europe-west4 --worker-count 3
out_has "jobId: my_job"; out_has "region: europe-west4"; out_has "workerCount: 3"
run 0 "$KILN" validate --config "$TMP/config.yaml"
out_has "jobId: census_file"; out_has "region: europe-west4"; out_has "- --from-file"
# flags win over the file, field by field; -- args replace the file's, untouched
run 0 "$KILN" validate renamed --config "$TMP/config.yaml" --region=us-east1 --worker-count 4 \
    --labels team=ml,owner=ana -- --foo -- --help
out_has "jobId: renamed"; out_has "region: us-east1"; out_has "workerCount: 4"
out_has "team: ml"; out_has "owner: ana"; out_has "masterType: n1-standard-8"
out_has "- --foo"; out_has "- --"; out_has "- --help"; out_lacks "--from-file"
run 0 "$KILN" validate job_7 --config "$TMP/only-input.yaml"
out_has "jobId: job_7"; out_has "scaleTier: BASIC"
run_in 0 "$TMP/config.yaml" "$KILN" validate --config -
out_has "jobId: census_file"
run 0 "$KILN" validate flags_only --scale-tier basic --region us-central1 \
    --module-name trainer.task --package-path "$SRC/examples" --job-dir /srv/jobs/x
out_has "file://$SRC/examples"; out_has "jobDir: /srv/jobs/x"; err_empty

# ---- unreadable input or bad command line: exit 1 ----
run 1 "$KILN" validate --config "$TMP/missing.yaml"
err_has "--config: cannot read '$TMP/missing.yaml'"; out_empty
run 1 "$KILN" validate --tfjob "$TMP"
err_has "--tfjob: cannot read '$TMP'"
run 1 "$KILN" validate --wroker-count 2
err_has "--wroker-count: unknown flag; did you mean --worker-count?"; out_empty
run 1 "$KILN" validate --region
err_has "--region: needs a value"
run 1 "$KILN" validate a b
err_has "unexpected argument 'b'"
run 1 "$KILN" validate --config "$TMP/config.yaml" --tfjob "$EX/cpu.yaml"
err_has "--tfjob: cannot be combined with --config"
run 1 "$KILN" validate --tfjob "$EX/cpu.yaml" --format table
err_has "--format table"
run 1 "$KILN" validate --tfjob "$EX/cpu.yaml" --catalog "$TMP/missing-site.yaml"
err_has "missing-site.yaml"

# ---- a site catalog: its default region applies to a TFJob without one ----
printf 'defaults:\n  region: europe-west4\n' >"$TMP/site.yaml"
run 0 "$KILN" validate --tfjob "$EX/cpu.yaml" --catalog "$TMP/site.yaml"
out_has "region: europe-west4"
printf 'defaults:\n  region: nowhere-1\n' >"$TMP/bad-site.yaml"
run 2 "$KILN" validate --tfjob "$EX/cpu.yaml" --catalog "$TMP/bad-site.yaml"
err_has "nowhere-1"; out_empty

# ---- read but invalid: exit 2, FIELD: DESCRIPTION lines and a summary ----
run 2 "$KILN" validate j1 --scale-tier custom --master-machine-type n1-standard-4 \
    --master-accelerator count=3,type=nvidia-tesla-k80 --region us-central1
err_has "trainingInput.masterConfig.acceleratorConfig.count: "; err_has "kiln validate: 1 problem"
out_empty
run 2 "$KILN" validate j1 --master-accelerator count=abc,type=nvidia-tesla-t4
err_has "--master-accelerator: count=abc"
run 2 "$KILN" validate j1 --master-accelerator type=nvidia-tesla-t4,count=
err_has "--master-accelerator: "
# count alone: any GPUs of one model (nvidia.com/gpu), valid where some GPU type takes that count
run 0 "$KILN" validate j1 --scale-tier custom --master-machine-type n1-standard-4 \
    --master-accelerator count=2 --region us-central1
run 2 "$KILN" validate j1 --scale-tier custom --master-machine-type n1-standard-4 \
    --master-accelerator count=3 --region us-central1
err_has "no GPU type takes 3 on n1-standard-4"
run 2 "$KILN" validate j1 --job-dir ../up
err_has "--job-dir: "
run 2 "$KILN" validate --config "$TMP/broken.yaml"
err_has "kiln validate: 1 problem in $TMP/broken.yaml"
run 2 "$KILN" validate --tfjob "$TMP/old-api.yaml"
err_has "apiVersion: 'kubeflow.org/v1beta1' is not supported"
run 2 "$KILN" validate --config "$TMP/only-input.yaml"   # no JOB and no jobId
err_has "jobId"

# ---- Kubeflow PyTorchJob: kiln's files in the shape of the training operator's examples ----
PT=$SRC/tests/data/pytorchjob
for f in simple cpu-demo elastic-echo mnist-gloo mnist-nccl mnist-mpi smoke-sendrecv \
    mnist2-sample deepspeed-demo; do
    run 0 "$KILN" validate --kubeflow-job "$PT/$f.yaml"
    out_has "scaleTier: CUSTOM"
done
run 0 "$KILN" validate --tfjob "$PT/elastic-echo.yaml" --format json
out_has '"elasticPolicy"'
# the operator's imagenet example: autoscaled container workers (cgroups)
run 0 "$KILN" validate --kubeflow-job "$PT/elastic-imagenet.yaml"
out_has "averageUtilization: 75"
sed 's/name: cpu/name: nvidia.com\/gpu/' "$PT/elastic-imagenet.yaml" >"$TMP/gpu-metric.yaml"
run 2 "$KILN" validate --kubeflow-job "$TMP/gpu-metric.yaml"
err_has "trainingInput.pytorchJob.elasticPolicy.metrics[0].resource: nvidia.com/gpu: the workers hold no GPUs to measure"
sed 's/cpu: 2/cpu: 2\n                  nvidia.com\/gpu: 1/' "$TMP/gpu-metric.yaml" >"$TMP/gpu-metric2.yaml"
run 0 "$KILN" validate --kubeflow-job "$TMP/gpu-metric2.yaml"
out_has "resource: nvidia.com/gpu"
run 2 "$KILN" validate --kubeflow-job "$PT/elastic-etcd.yaml"
err_has "the file holds 3 YAML documents (1: Service 'rdzv-store-client'; 2: Pod 'rdzv-store'"
sed 's/kind: PyTorchJob/kind: MXJob/' "$PT/simple.yaml" >"$TMP/mx.yaml"
run 2 "$KILN" validate --kubeflow-job "$TMP/mx.yaml"
err_has "kind: 'MXJob' is a Kubeflow training job kiln does not run; kiln reads TFJob, PyTorchJob, JAXJob, PaddleJob and XGBoostJob"
run 0 "$KILN" validate --kubeflow-job "$SRC/tests/data/kubeflow/mpijob-v2beta1.yaml"
err_has "containers[0].command: /usr/sbin/sshd is not run: kiln-mpi-agent takes ssh's place"

# ---- TrainJob: the runtime from data/runtimes, or --runtimes-dir ----
TJ=$SRC/tests/data/kubeflow/trainjob-torch.yaml
run 0 "$KILN" validate --kubeflow-job "$TJ"
out_has "workerCount: 2"
out_has "runtime: ClusterTrainingRuntime/torch-distributed"
mkdir -p "$TMP/runtimes"
run 2 "$KILN" validate --kubeflow-job "$TJ" --runtimes-dir "$TMP/runtimes"
err_has "spec.runtimeRef.name: no ClusterTrainingRuntime 'torch-distributed' in the runtimes directory $TMP/runtimes"
sed 's/numNodes: 1/numNodes: 5/' "$SRC/data/runtimes/torch-distributed.yaml" >"$TMP/runtimes/torch-distributed.yaml"
sed '/numNodes: 3/d' "$TJ" >"$TMP/tj-rt-nodes.yaml"
run 0 "$KILN" validate --kubeflow-job "$TMP/tj-rt-nodes.yaml" --runtimes-dir "$TMP/runtimes"
out_has "workerCount: 4"
run 0 env KILN_RUNTIMES_DIR="$TMP/runtimes" "$KILN" validate --kubeflow-job "$TMP/tj-rt-nodes.yaml"
out_has "workerCount: 4"

finish
