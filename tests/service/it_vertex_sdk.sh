#!/bin/bash
# tests/service/it_vertex_sdk.sh - Google's own Python SDK for Vertex AI
# (google-cloud-aiplatform from PyPI, the venv scripts/bootstrap makes)
# against a real kilnd: aiplatform.init(api_endpoint=..., api_transport="rest")
# with anonymous credentials; CustomJob(...).run(sync=True) reaching
# SUCCEEDED; CustomJob.from_local_script (its package uploaded through
# google-cloud-storage to kilnd's Storage subset, STORAGE_EMULATOR_HOST, and
# pip-installed in the container from /gcs/BUCKET); job.cancel(); a FAILED
# job raising with its error; list, delete; HyperparameterTuningJob(...).run()
# with its trials. The containers run an image built here from the host's /usr.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need podman
VPY=${KILN_AIP_VENV:-$HOME/.cache/kiln/aiplatform-venv}/bin/python
if ! "$VPY" -c 'import google.cloud.aiplatform' >/dev/null 2>&1; then
    echo "SKIP: google-cloud-aiplatform is not installed in ${VPY%/bin/python}; to run it: scripts/bootstrap"
    exit 77
fi
IMG=localhost/kiln-examples/vertex-sdk:1
host_image "$IMG" || {
    fail "cannot build the image $IMG"
    finish
}
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config)" >"$T/host.json"
start_kilnd "$T/d" --node-config "$T/host.json" --bucket stage1:p1

# sdk NAME PYTHON: runs the snippet after aiplatform.init; its stdout in $OUT
sdk() {
    local name=$1
    cat >"$T/$name.py" <<EOF
import os, sys, time
from google.cloud import aiplatform
from google.auth.credentials import AnonymousCredentials
URL, IMG, T = sys.argv[1], sys.argv[2], sys.argv[3]
aiplatform.init(project="p1", location="us-central1", api_endpoint=URL, api_transport="rest",
                staging_bucket="gs://stage1", credentials=AnonymousCredentials())
$2
EOF
    OUT=$(cd "$T" && STORAGE_EMULATOR_HOST=$URL timeout 240 "$VPY" "$T/$name.py" "$URL" "$IMG" "$T" 2>"$T/$name.err")
    RC=$?
}
errtail() { tail -c 400 "$T/$1.err" | tr '\n' ' '; }

# 1. CustomJob(...).run(sync=True)
sdk run1 '
job = aiplatform.CustomJob(display_name="sdk-1", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["sh", "-c", "echo model at $AIP_MODEL_DIR"],
                       "env": [{"name": "MODE", "value": "sdk"}]}}], labels={"via": "sdk"})
job.run(sync=True)
print("STATE", job.state.name)
print("NAME", job.resource_name)
print("OUT", job.job_spec.base_output_directory.output_uri_prefix)
print("LABEL", job.labels.get("via"))'
check_eq "CustomJob.run exit ($(errtail run1))" "$RC" 0
check_eq "CustomJob.run: SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_SUCCEEDED
name=$(sed -n 's/^NAME //p' <<<"$OUT")
check "CustomJob.run: a numeric name ($name)" grep -qE '^projects/p1/locations/us-central1/customJobs/[0-9]+$' <<<"$name"
check_eq "CustomJob.run: labels read back" "$(sed -n 's/^LABEL //p' <<<"$OUT")" sdk
base=$(sed -n 's/^OUT //p' <<<"$OUT")
check "the SDK's base output directory is under the staging bucket ($base)" grep -q '^gs://stage1/' <<<"$base"
api GET "/v1/projects/p1/jobs/customjob_${name##*/}:logs"
check "the container saw AIP_MODEL_DIR = base/model/" grep -qF "model at $base/model/" <<<"$BODY"

# 2. CustomJob.from_local_script: the SDK builds a source package, uploads it
# to gs://stage1 (google-cloud-storage through STORAGE_EMULATOR_HOST), and the
# container installs it from /gcs/stage1. pip must not reach PyPI here: the
# host's Python and setuptools build it, offline.
sdk local1 '
open(os.path.join(T, "train.py"), "w").write(
    "import os, sys\nprint(\"script args\", sys.argv[1:], os.environ.get(\"CLOUD_ML_JOB_ID\"))\n")
job = aiplatform.CustomJob.from_local_script(
    display_name="local-1", script_path=os.path.join(T, "train.py"), container_uri=IMG,
    args=["--epochs", "2"], machine_type="n1-standard-4",
    environment_variables={"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_NO_INDEX": "1",
                           "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
job.run(sync=True)
print("STATE", job.state.name)
print("NAME", job.resource_name)'
check_eq "from_local_script exit ($(errtail local1))" "$RC" 0
check_eq "from_local_script: SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_SUCCEEDED
id=$(sed -n 's/^NAME //p' <<<"$OUT")
id=${id##*/}
api GET "/v1/projects/p1/jobs/customjob_$id:logs"
check "the script ran with its args and job id" grep -qF "script args ['--epochs', '2'] $id" <<<"$BODY"
api GET "/storage/v1/b/stage1/o?prefix=aiplatform-"
check "the package is an object of the staging bucket" grep -q 'aiplatform_custom_trainer_script-0.1.tar.gz' <<<"$BODY"

# 3. job.cancel() of a running job: CANCELLED, and run() raises with the error
sdk cancel1 '
job = aiplatform.CustomJob(display_name="cancel-1", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["sleep", "600"]}}])
job.submit()
for _ in range(300):
    if job.state.name == "JOB_STATE_RUNNING":
        break
    time.sleep(0.2)
    job = aiplatform.CustomJob.get(job.resource_name)
print("BEFORE", job.state.name)
job.cancel()
for _ in range(300):
    job = aiplatform.CustomJob.get(job.resource_name)
    if job.state.name == "JOB_STATE_CANCELLED":
        break
    time.sleep(0.2)
print("STATE", job.state.name)
print("ERROR", job.error.code)'
check_eq "cancel exit ($(errtail cancel1))" "$RC" 0
check_eq "cancel: it was running" "$(sed -n 's/^BEFORE //p' <<<"$OUT")" JOB_STATE_RUNNING
check_eq "cancel: CANCELLED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_CANCELLED
check_eq "cancel: error.code 1 (CANCELLED)" "$(sed -n 's/^ERROR //p' <<<"$OUT")" 1

# 4. a failing job: run(sync=True) raises with the job's error
sdk fail1 '
job = aiplatform.CustomJob(display_name="fail-1", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["sh", "-c", "exit 3"]}}])
try:
    job.run(sync=True)
    print("RAISED no")
except RuntimeError as e:
    print("RAISED", "status of 3" in str(e))
print("STATE", job.state.name)'
check_eq "failed job: run raises with the error ($(errtail fail1))" "$(sed -n 's/^RAISED //p' <<<"$OUT")" True
check_eq "failed job: FAILED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_FAILED

# 5. a field kiln does not act on is refused at create, naming it
sdk bad1 '
job = aiplatform.CustomJob(display_name="bad-1", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["true"]}}])
try:
    job.run(sync=True, enable_web_access=True)
    print("RAISED no")
except Exception as e:
    print("RAISED", type(e).__name__, "jobSpec.enableWebAccess" in str(e))'
check_eq "enable_web_access refused, named ($(errtail bad1))" "$(sed -n 's/^RAISED //p' <<<"$OUT")" "BadRequest True"

# 6. scheduling, list (with a server-side filter) and delete
sdk misc1 '
job = aiplatform.CustomJob(display_name="sched-1", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["true"]}}])
job.run(sync=True, timeout=900, disable_retries=True)
print("TIMEOUT", job.job_spec.scheduling.timeout.seconds)
print("NORETRY", job.job_spec.scheduling.disable_retries)
print("LIST", sorted(set(j.display_name for j in aiplatform.CustomJob.list())))
print("LISTF", [j.display_name for j in aiplatform.CustomJob.list(filter="display_name=\"sched-1\"")])
job.delete()
try:
    aiplatform.CustomJob.get(job.resource_name)
    print("GONE no")
except Exception as e:
    print("GONE", type(e).__name__)
print("NAME", job.resource_name)'
check_eq "misc exit ($(errtail misc1))" "$RC" 0
check_eq "scheduling.timeout kept" "$(sed -n 's/^TIMEOUT //p' <<<"$OUT")" 900
check_eq "disableRetries kept" "$(sed -n 's/^NORETRY //p' <<<"$OUT")" True
check_eq "CustomJob.list" "$(sed -n 's/^LIST //p' <<<"$OUT")" "['cancel-1', 'fail-1', 'local-1', 'sched-1', 'sdk-1']"
check_eq "CustomJob.list(filter=...)" "$(sed -n 's/^LISTF //p' <<<"$OUT")" "['sched-1']"
check_eq "delete: gone" "$(sed -n 's/^GONE //p' <<<"$OUT")" NotFound
id=$(sed -n 's/^NAME //p' <<<"$OUT")
api GET "/v1/projects/p1/jobs/customjob_${id##*/}"
check_eq "deleted from the ml API too" "$STATUS" 404

# 7. HyperparameterTuningJob(...).run(): kiln's study runs the trials; the
# SDK reads trials[] (id, state, parameters, finalMeasurement). The SDK's
# default measurement_selection ("best", BEST_MEASUREMENT): a trial reports
# 1LR at step 1, LR at step 2 and 2LR at step 3 (each digit string prefixed,
# so larger); minimising, its finalMeasurement is LR at step 2, not the last
sdk hp1 '
from google.cloud.aiplatform import hyperparameter_tuning as hpt
cmd = "lr=${0#--lr=}; f=\"$CLOUD_ML_HP_METRIC_FILE\"; echo \"{\\\"loss\\\": 1$lr, \\\"global_step\\\": 1}\" >>\"$f\"; echo \"{\\\"loss\\\": $lr, \\\"global_step\\\": 2}\" >>\"$f\"; echo \"{\\\"loss\\\": 2$lr, \\\"global_step\\\": 3}\" >>\"$f\""
cj = aiplatform.CustomJob(display_name="hp-trial", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["sh", "-c", cmd]}}])
spec = {"lr": hpt.DoubleParameterSpec(min=0.001, max=0.1, scale="log"),
        "opt": hpt.CategoricalParameterSpec(values=["adam", "sgd"]),
        "units": hpt.IntegerParameterSpec(min=8, max=64, scale="linear"),
        "layers": hpt.DiscreteParameterSpec(values=[2, 4], scale="linear")}
hj = aiplatform.HyperparameterTuningJob(display_name="hp-sdk", custom_job=cj,
    metric_spec={"loss": "minimize"}, parameter_spec=spec, max_trial_count=2,
    parallel_trial_count=1)
hj.run(sync=True)
print("STATE", hj.state.name)
print("SEL", hj.gca_resource.study_spec.measurement_selection_type.name)
for t in hj.trials:
    ps = {p.parameter_id: p.value for p in t.parameters}
    ok = abs(t.final_measurement.metrics[0].value - ps["lr"]) < 1e-9 and ps["opt"] in ("adam", "sgd") \
        and 8 <= ps["units"] <= 64 and ps["layers"] in (2, 4)
    print("TRIAL", t.id, t.state.name, ok, t.final_measurement.step_count)'
check_eq "hp exit ($(errtail hp1))" "$RC" 0
check_eq "HyperparameterTuningJob.run: SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_SUCCEEDED
check_eq "measurement_selection best (the default) sent and shown" "$(sed -n 's/^SEL //p' <<<"$OUT")" BEST_MEASUREMENT
check_eq "trials as the SDK reads them: finalMeasurement the best (step 2)" "$(grep '^TRIAL' <<<"$OUT" | tr '\n' ' ')" "TRIAL 1 SUCCEEDED True 2 TRIAL 2 SUCCEEDED True 2 "

# 8. the three training-job classes (trainingPipelines), run(sync=True) to
# PIPELINE_STATE_SUCCEEDED; without a serving image run() returns None
sdk tp1 '
job = aiplatform.CustomContainerTrainingJob(display_name="tp-container", container_uri=IMG,
    command=["sh", "-c", "echo container-trained model=$AIP_MODEL_DIR; sleep 5"])
model = job.run(replica_count=2, machine_type="n1-standard-4", args=["--steps", "3"],
                boot_disk_size_gb=100, sync=True)
print("STATE", job.state.name)
print("MODEL", model)
print("NAME", job.resource_name)
print("GET", type(aiplatform.CustomContainerTrainingJob.get(job.resource_name)).__name__)'
check_eq "CustomContainerTrainingJob.run exit ($(errtail tp1))" "$RC" 0
check_eq "CustomContainerTrainingJob: PIPELINE_STATE_SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" PIPELINE_STATE_SUCCEEDED
check_eq "... no model without a serving image" "$(sed -n 's/^MODEL //p' <<<"$OUT")" None
check_eq "... get() takes the custom task read back" "$(sed -n 's/^GET //p' <<<"$OUT")" CustomContainerTrainingJob
id=$(sed -n 's/^NAME //p' <<<"$OUT")
api GET "/v1/projects/p1/jobs/trainingpipeline_${id##*/}:logs"
# the chief decides the job (Vertex's rule) and stops the worker: it stays 5 s
# after its line, the time a slower replica (ASan's kilnd, a loaded machine)
# takes to start and print, or the worker's line would race the chief's end
check "both replicas (chief + 1 worker) ran the command" test "$(grep -c 'container-trained model=gs://stage1/' <<<"$BODY")" -ge 2
sdk tp2 '
open(os.path.join(T, "task2.py"), "w").write(
    "import sys\nprint(\"pipeline script\", sys.argv[1:])\n")
job = aiplatform.CustomTrainingJob(display_name="tp-script", script_path=os.path.join(T, "task2.py"),
    container_uri=IMG)
job.run(args=["--lr", "0.5"], replica_count=1, machine_type="n1-standard-4",
        environment_variables={"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_NO_INDEX": "1",
                               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, sync=True)
print("STATE", job.state.name)
print("NAME", job.resource_name)'
check_eq "CustomTrainingJob (local script) exit ($(errtail tp2))" "$RC" 0
check_eq "CustomTrainingJob: PIPELINE_STATE_SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" PIPELINE_STATE_SUCCEEDED
id=$(sed -n 's/^NAME //p' <<<"$OUT")
api GET "/v1/projects/p1/jobs/trainingpipeline_${id##*/}:logs"
check "the packaged script ran with its args" grep -qF "pipeline script ['--lr', '0.5']" <<<"$BODY"

# 9. a tuning range from 0: DoubleParameterSpec(min=0) is sent without minValue
sdk hp0 '
from google.cloud.aiplatform import hyperparameter_tuning as hpt
cj = aiplatform.CustomJob(display_name="hp0-trial", worker_pool_specs=[{
    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
    "container_spec": {"image_uri": IMG, "command": ["sh", "-c",
        "echo \"{\\\"loss\\\": 1}\" >>\"$CLOUD_ML_HP_METRIC_FILE\"; echo dropout $0"]}}])
hj = aiplatform.HyperparameterTuningJob(display_name="hp-zero", custom_job=cj,
    metric_spec={"loss": "minimize"}, parameter_spec={"dropout": hpt.DoubleParameterSpec(min=0, max=0.5, scale="linear")},
    max_trial_count=1, parallel_trial_count=1)
hj.run(sync=True)
print("STATE", hj.state.name)
print("MIN", hj.gca_resource.study_spec.parameters[0].double_value_spec.min_value)'
check_eq "DoubleParameterSpec(min=0) exit ($(errtail hp0))" "$RC" 0
check_eq "... SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" JOB_STATE_SUCCEEDED
check_eq "... the range starts at 0" "$(sed -n 's/^MIN //p' <<<"$OUT")" 0.0

# 10. a serving image given: run() returns the Model the pipeline made, its
# artifact_uri the job's AIP_MODEL_DIR, whose files the user lists and
# downloads (google-cloud-storage, kilnd's staging store)
sdk tpm '
from google.cloud import storage
job = aiplatform.CustomContainerTrainingJob(display_name="tp-model", container_uri=IMG,
    command=["sh", "-c", "d=$(echo $AIP_MODEL_DIR | sed s#^gs://#/gcs/#); mkdir -p $d; echo weights >$d/model.txt"],
    model_serving_container_image_uri=IMG)
model = job.run(replica_count=1, machine_type="n1-standard-4", sync=True)
print("STATE", job.state.name)
print("MODEL", model.display_name, model.version_id)
print("ART", model.uri)
b, _, prefix = model.uri[len("gs://"):].partition("/")
cl = storage.Client(project="p1", credentials=AnonymousCredentials())
print("FILES", [x.name for x in cl.list_blobs(b, prefix=prefix)])
print("DATA", cl.bucket(b).blob(prefix + "model.txt").download_as_bytes().decode().strip())
print("LISTED", [m.display_name for m in aiplatform.Model.list()])'
check_eq "run() with a serving image exit ($(errtail tpm))" "$RC" 0
check_eq "... PIPELINE_STATE_SUCCEEDED" "$(sed -n 's/^STATE //p' <<<"$OUT")" PIPELINE_STATE_SUCCEEDED
check_eq "... returns its Model (version 1)" "$(sed -n 's/^MODEL //p' <<<"$OUT")" "tp-model-model 1"
art=$(sed -n 's/^ART //p' <<<"$OUT")
check "... artifactUri is the job's model dir ($art)" grep -qE '^gs://stage1/aiplatform-custom-training-.*/model/$' <<<"$art"
check "... whose files are the job's" grep -q "model/model.txt" <<<"$(sed -n 's/^FILES //p' <<<"$OUT")"
check_eq "... downloaded" "$(sed -n 's/^DATA //p' <<<"$OUT")" weights
check_eq "Model.list" "$(sed -n 's/^LISTED //p' <<<"$OUT")" "['tp-model-model']"


# 11. Model.upload of files the user staged (google-cloud-storage), as
# Google's samples do: the Model it returns read back, listed; .delete()
# removes it and leaves its files
sdk mup '
from google.cloud import storage
from google.api_core import exceptions
cl = storage.Client(project="p1", credentials=AnonymousCredentials())
cl.bucket("stage1").blob("sdk-up/m1/model.txt").upload_from_string("uploaded weights")
m = aiplatform.Model.upload(display_name="sdk-up", artifact_uri="gs://stage1/sdk-up/m1",
    serving_container_image_uri=IMG, model_id="sdk-model", labels={"via": "sdk"})
print("NAME", m.resource_name, m.version_id)
print("ART", m.uri)
print("IMAGE", m.container_spec.image_uri)
print("LISTED", sorted(x.display_name for x in aiplatform.Model.list()))
try:
    aiplatform.Model.upload(display_name="bad", artifact_uri="gs://stage1/sdk-up/none",
        serving_container_image_uri=IMG)
    print("BAD accepted")
except exceptions.BadRequest as e:
    print("BAD", e.code)
m.delete()
try:
    aiplatform.Model("sdk-model")
    print("AFTER found")
except exceptions.NotFound:
    print("AFTER NotFound")
print("FILES", [x.name for x in cl.list_blobs("stage1", prefix="sdk-up/m1/")])'
check_eq "Model.upload, delete exit ($(errtail mup))" "$RC" 0
check_eq "... the uploaded Model, version 1" "$(sed -n 's/^NAME //p' <<<"$OUT")" "projects/p1/locations/us-central1/models/sdk-model 1"
check_eq "... its artifact_uri as given" "$(sed -n 's/^ART //p' <<<"$OUT")" gs://stage1/sdk-up/m1
check_eq "... its serving image kept" "$(sed -n 's/^IMAGE //p' <<<"$OUT")" "$IMG"
check_eq "... listed beside the pipeline's" "$(sed -n 's/^LISTED //p' <<<"$OUT")" "['sdk-up', 'tp-model-model']"
check_eq "... an artifact_uri with no objects: BadRequest" "$(sed -n 's/^BAD //p' <<<"$OUT")" 400
check_eq "... after delete(): NotFound" "$(sed -n 's/^AFTER //p' <<<"$OUT")" NotFound
check_eq "... its files stay" "$(sed -n 's/^FILES //p' <<<"$OUT")" "['sdk-up/m1/model.txt']"

finish
