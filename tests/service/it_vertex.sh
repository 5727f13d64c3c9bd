#!/bin/bash
# tests/service/it_vertex.sh - Vertex AI's aiplatform v1 customJobs on a real
# kilnd, through the real Google Cloud CLI (`gcloud ai custom-jobs create`
# with --worker-pool-spec and with --config, describe, list, cancel) and
# curl for the wire format gcloud does not show (enum-encoding=int, delete's
# Operation, refusals). The jobs run a container (kiln's podman executor) of
# an image built here from the host's /usr, nothing pulled.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need gcloud podman
IMG=localhost/kiln-examples/vertex:1
host_image "$IMG" || {
    fail "cannot build the image $IMG"
    finish
}
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config)" >"$T/host.json"
start_kilnd "$T/d" --node-config "$T/host.json" --bucket stage1:p1

G=$T/gc
mkdir -p "$G"
for kv in "core/project p1" "auth/disable_credentials true" "core/disable_usage_reporting true" \
    "component_manager/disable_update_check true" "api_endpoint_overrides/aiplatform $URL/" \
    "api_endpoint_overrides/logging $URL/"; do
    # shellcheck disable=SC2086
    CLOUDSDK_CONFIG=$G gcloud config set $kv >/dev/null 2>&1 || fail "config set $kv"
done
gc() { CLOUDSDK_CONFIG=$G timeout 120 gcloud "$@"; }
R=us-central1
COL=/v1/projects/p1/locations/$R/customJobs

# the id of "Created/CustomJob [projects/p1/locations/L/customJobs/ID]" in gcloud's output
job_id_of() { grep -oE 'customJobs/[0-9]+' <<<"$1" | head -1 | cut -d/ -f2; }
vx_state() { # vx_state ID
    api GET "$COL/$1"
    printf '%s' "$BODY" | jget state
}
wait_vx() { # wait_vx ID STATE [SECONDS]
    local i s=""
    for i in $(seq 1 $((${3:-60} * 5))); do
        s=$(vx_state "$1")
        [ "$s" = "$2" ] && return 0
        case "$s" in JOB_STATE_SUCCEEDED | JOB_STATE_FAILED | JOB_STATE_CANCELLED) break ;; esac
        sleep 0.2
    done
    echo "  CustomJob $1 is '$s', waited for '$2'" >&2
    printf '%s\n' "$BODY" | grep -E 'message|state' >&2
    return 1
}

# 1. --worker-pool-spec: the container prints what Vertex's containers see
out=$(gc ai custom-jobs create --region $R --display-name flags-1 --labels team=ml \
    --worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri=$IMG \
    --command=sh --args=-c,'echo CS=$CLUSTER_SPEC; echo TF=$TF_CONFIG; echo ID=$CLOUD_ML_JOB_ID' 2>&1)
ID1=$(job_id_of "$out")
check "create --worker-pool-spec ($(tail -2 <<<"$out"))" test -n "$ID1"
check "flags-1 succeeds" wait_vx "$ID1" JOB_STATE_SUCCEEDED 90
# the same job through the ml API: one job model
api GET "/v1/projects/p1/jobs/customjob_$ID1"
check_eq "ml v1 sees it" "$STATUS" 200
check_eq "ml v1: displayName" "$(printf '%s' "$BODY" | jget trainingInput.vertex.displayName)" flags-1
check_eq "ml v1: state" "$(printf '%s' "$BODY" | jget state)" SUCCEEDED
api GET "/v1/projects/p1/jobs/customjob_$ID1:logs"
logs=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; [print(e["message"]) for e in json.load(sys.stdin)["entries"]]')
cs=$(sed -n 's/^CS=//p' <<<"$logs")
check_eq "CLUSTER_SPEC task" "$(printf '%s' "$cs" | jget task.type)" workerpool0
check "CLUSTER_SPEC workerpool0 address" grep -qE '^\["127\.0\.0\.1:[0-9]+"\]$' <<<"$(printf '%s' "$cs" | jget cluster.workerpool0)"
check_eq "CLUSTER_SPEC job is the jobSpec" "$(printf '%s' "$cs" | jget job.workerPoolSpecs.0.containerSpec.imageUri)" "$IMG"
tf=$(sed -n 's/^TF=//p' <<<"$logs")
check_eq "TF_CONFIG names the chief" "$(printf '%s' "$tf" | jget task.type)" chief
check_eq "CLOUD_ML_JOB_ID is the number" "$(sed -n 's/^ID=//p' <<<"$logs")" "$ID1"

# describe: Vertex's fields
out=$(gc ai custom-jobs describe "$ID1" --region $R --format json 2>"$T/err")
check "describe ($(head -c 300 "$T/err"))" test -n "$out"
check_eq "describe state" "$(printf '%s' "$out" | jget state)" JOB_STATE_SUCCEEDED
check_eq "describe name" "$(printf '%s' "$out" | jget name)" "projects/p1/locations/$R/customJobs/$ID1"
check_eq "describe labels" "$(printf '%s' "$out" | jget labels.team)" ml
check_eq "describe replicaCount" "$(printf '%s' "$out" | jget jobSpec.workerPoolSpecs.0.replicaCount)" 1
check "describe endTime RFC 3339" grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$' <<<"$(printf '%s' "$out" | jget endTime)"

# stream-logs reads the job's lines through the Logging subset (entries are
# labelled with the CustomJob's number); for a job that has ended (endTime) it
# returns after two polls without new lines
out=$(gc ai custom-jobs stream-logs "$ID1" --region $R --polling-interval 1 2>&1)
check_eq "stream-logs exit" "$?" 0
check "stream-logs: the container's lines" grep -qE "master-replica-0.*ID=$ID1" <<<"$out"
check "stream-logs: the service's lines" grep -q "Job completed successfully" <<<"$out"

# 2. --config: a CustomJobSpec in YAML with a chief and a worker pool, the
# output directory in the staging bucket, and the bucket at /gcs/stage1
cat >"$T/spec.yaml" <<EOF
workerPoolSpecs:
  - machineSpec:
      machineType: n1-standard-4
    replicaCount: 1
    containerSpec:
      imageUri: $IMG
      command: ["sh", "-c"]
      args:
        - 'd=\$(echo "\$AIP_MODEL_DIR" | sed "s#^gs://#/gcs/#"); mkdir -p "\$d" && echo "saved by \$CLOUD_ML_JOB_ID" >"\$d/saved.txt"; echo AIP=\$AIP_MODEL_DIR,\$AIP_CHECKPOINT_DIR,\$AIP_TENSORBOARD_LOG_DIR; echo CS=\$CLUSTER_SPEC; echo GREET=\$GREETING'
      env:
        - name: GREETING
          value: hello-vertex
  - machineSpec:
      machineType: n1-standard-4
    replicaCount: 2
    containerSpec:
      imageUri: $IMG
      command: ["sh", "-c", "echo worker \$(echo \$CLUSTER_SPEC | grep -o '\"task\":{[^}]*}')"]
baseOutputDirectory:
  outputUriPrefix: gs://stage1/run1
scheduling:
  timeout: 600s
EOF
out=$(gc ai custom-jobs create --region $R --display-name config-1 --config "$T/spec.yaml" 2>&1)
ID2=$(job_id_of "$out")
check "create --config ($(tail -2 <<<"$out"))" test -n "$ID2"
check "config-1 succeeds" wait_vx "$ID2" JOB_STATE_SUCCEEDED 90
api GET "/v1/projects/p1/jobs/customjob_$ID2:logs"
logs=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; [print(e["taskName"], e["message"]) for e in json.load(sys.stdin)["entries"]]')
check_eq "AIP_*_DIR under baseOutputDirectory" "$(sed -n 's/^master-replica-0 AIP=//p' <<<"$logs")" \
    "gs://stage1/run1/model/,gs://stage1/run1/checkpoints/,gs://stage1/run1/logs/"
cs=$(sed -n 's/^master-replica-0 CS=//p' <<<"$logs")
check "the chief sees the worker pool (2 workers): $cs" grep -qE '^\["127\.0\.0\.1:[0-9]+", "127\.0\.0\.1:[0-9]+"\]$' <<<"$(printf '%s' "$cs" | jget cluster.workerpool1)"
check_eq "containerSpec.env reached the chief" "$(sed -n 's/^master-replica-0 GREET=//p' <<<"$logs")" hello-vertex
check "worker 1 is workerpool1 index 1" grep -q 'worker-replica-1 worker "task":{"type":"workerpool1","index":1}' <<<"$logs"
# what the chief wrote under /gcs/stage1 is the object gs://stage1/run1/model/saved.txt
got=$(curl -s -m 10 "$URL/download/storage/v1/b/stage1/o/run1%2Fmodel%2Fsaved.txt?alt=media")
check_eq "the model dir's file is an object of the bucket" "$got" "saved by $ID2"
out=$(gc ai custom-jobs describe "$ID2" --region $R --format json 2>"$T/err")
check_eq "describe: the worker pool" "$(printf '%s' "$out" | jget jobSpec.workerPoolSpecs.1.replicaCount)" 2
check_eq "describe: timeout" "$(printf '%s' "$out" | jget jobSpec.scheduling.timeout)" 600s
check_eq "describe: baseOutputDirectory" "$(printf '%s' "$out" | jget jobSpec.baseOutputDirectory.outputUriPrefix)" gs://stage1/run1

# pythonPackageSpec: an sdist in the staging bucket, run with python3 -m in
# the executor image (kiln stages the package and puts it on PYTHONPATH)
mkdir -p "$T/pkg/trainer-0.1/trainer"
: >"$T/pkg/trainer-0.1/trainer/__init__.py"
printf 'import os, sys\nprint("task args", sys.argv[1:], os.environ.get("CLOUD_ML_JOB_ID"))\n' >"$T/pkg/trainer-0.1/trainer/task.py"
tar -C "$T/pkg" -czf "$T/trainer-0.1.tar.gz" trainer-0.1
curl -s -m 10 -o /dev/null -X POST --data-binary @"$T/trainer-0.1.tar.gz" \
    "$URL/upload/storage/v1/b/stage1/o?uploadType=media&name=pkg/trainer-0.1.tar.gz"
cat >"$T/py.yaml" <<EOF
workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    pythonPackageSpec:
      executorImageUri: $IMG
      packageUris: [gs://stage1/pkg/trainer-0.1.tar.gz]
      pythonModule: trainer.task
      args: [--lr, "0.1"]
EOF
out=$(gc ai custom-jobs create --region $R --display-name py-1 --config "$T/py.yaml" 2>&1)
IDP=$(job_id_of "$out")
check "create pythonPackageSpec ($(tail -2 <<<"$out"))" test -n "$IDP"
check "py-1 succeeds" wait_vx "$IDP" JOB_STATE_SUCCEEDED 90
api GET "/v1/projects/p1/jobs/customjob_$IDP:logs"
check "the module ran with its args" grep -qF "task args ['--lr', '0.1'] $IDP" <<<"$BODY"
api GET "$COL/$IDP"
check_eq "describe: pythonPackageSpec back" "$(printf '%s' "$BODY" | jget jobSpec.workerPoolSpecs.0.pythonPackageSpec.pythonModule)" trainer.task
api DELETE "$COL/$IDP"
check_eq "delete py-1" "$STATUS" 200

# the same through gcloud's flags: executor-image-uri, python-module, --python-package-uris
out=$(gc ai custom-jobs create --region $R --display-name pyflags-1 \
    --worker-pool-spec=machine-type=n1-standard-4,replica-count=1,executor-image-uri=$IMG,python-module=trainer.task \
    --python-package-uris=gs://stage1/pkg/trainer-0.1.tar.gz --args=--lr,0.2 2>&1)
IDF=$(job_id_of "$out")
check "create --worker-pool-spec python-module ($(tail -2 <<<"$out"))" test -n "$IDF"
check "pyflags-1 succeeds" wait_vx "$IDF" JOB_STATE_SUCCEEDED 90
api GET "/v1/projects/p1/jobs/customjob_$IDF:logs"
check "the flags' module ran with its args" grep -qF "task args ['--lr', '0.2'] $IDF" <<<"$BODY"
api DELETE "$COL/$IDF"
check_eq "delete pyflags-1" "$STATUS" 200

# 3. list (gcloud pages through pageSize/pageToken itself)
out=$(gc ai custom-jobs list --region $R --format 'value(displayName)' 2>"$T/err")
check_eq "list" "$(printf '%s\n' "$out" | sort | tr '\n' ' ')" "config-1 flags-1 "
out=$(gc ai custom-jobs list --region $R --filter 'displayName=config-1' --format 'value(name)' 2>"$T/err")
check_eq "list --filter" "$out" "projects/p1/locations/$R/customJobs/$ID2"
# the server's own filter and pages
api GET "$COL?filter=state%3D%22JOB_STATE_SUCCEEDED%22%20AND%20labels.team%3Dml"
check_eq "filter state AND label" "$(printf '%s' "$BODY" | jget customJobs.0.displayName),$(printf '%s' "$BODY" | jget customJobs.1.displayName)" "flags-1,"
api GET "$COL?filter=display_name%3D%22config-1%22"
check_eq "filter display_name" "$(printf '%s' "$BODY" | jget customJobs.0.name)" "projects/p1/locations/$R/customJobs/$ID2"
api GET "$COL?filter=create_time%3E%222020%22"
check_eq "unread filter term -> 400" "$STATUS" 400
check "... naming it" grep -q create_time <<<"$BODY"
api GET "$COL?pageSize=1"
tok=$(printf '%s' "$BODY" | jget nextPageToken)
first=$(printf '%s' "$BODY" | jget customJobs.0.displayName)
api GET "$COL?pageSize=1&pageToken=$tok"
check_eq "page 2" "$first,$(printf '%s' "$BODY" | jget customJobs.0.displayName)" "flags-1,config-1"
api GET "$COL?pageSize=1&pageToken=garbage"
check_eq "bad pageToken -> 400" "$STATUS" 400
# an ml v1 job is not a CustomJob
api POST /v1/projects/p1/jobs "$(job_json ml_1 'echo ml')"
api GET "$COL"
check_eq "ml v1 jobs are not listed" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["customJobs"]))')" 2

# 4. the Python SDK's REST transport asks for enums as numbers
api GET "$COL/$ID1?%24alt=json%3Benum-encoding%3Dint"
check_eq "enum-encoding=int: state 4" "$(printf '%s' "$BODY" | jget state)" 4
api POST "$COL?%24alt=json%3Benum-encoding%3Dint" "{\"displayName\":\"int-1\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\",\"command\":[\"sleep\",\"600\"]},\"machineSpec\":{\"machineType\":\"n1-standard-4\",\"acceleratorType\":0},\"replicaCount\":\"1\"}]}}"
check_eq "create with int enums" "$STATUS" 200
check_eq "... state 1 (QUEUED)" "$(printf '%s' "$BODY" | jget state)" 1
ID3=$(printf '%s' "$BODY" | jget name | sed 's#.*/##')

# 5. cancel through gcloud: CANCELLED with a google.rpc.Status error
check "int-1 runs" wait_vx "$ID3" JOB_STATE_RUNNING 60
out=$(gc ai custom-jobs cancel "$ID3" --region $R 2>&1)
check "gcloud cancel ($out)" grep -qi "cancel" <<<"$out"
check "int-1 cancelled" wait_vx "$ID3" JOB_STATE_CANCELLED 60
api GET "$COL/$ID3"
check_eq "cancelled: error.code 1" "$(printf '%s' "$BODY" | jget error.code)" 1
out=$(gc ai custom-jobs cancel "$ID1" --region $R 2>&1)
check "cancel of an ended job fails" test $? -ne 0
check "... FAILED_PRECONDITION ($out)" grep -q FAILED_PRECONDITION <<<"$out"

# 6. delete: a done Operation, pollable by name; the job is gone from both APIs
api DELETE "$COL/$ID3"
check_eq "delete" "$STATUS" 200
check_eq "delete: done" "$(printf '%s' "$BODY" | jget done)" true
op=$(printf '%s' "$BODY" | jget name)
api GET "/v1/$op"
check_eq "operation GET" "$STATUS,$(printf '%s' "$BODY" | jget done)" "200,true"
api GET "$COL/$ID3"
check_eq "deleted -> 404" "$STATUS" 404
api GET "/v1/projects/p1/jobs/customjob_$ID3"
check_eq "deleted from the ml API too" "$STATUS" 404
api GET "/v1/projects/p1/locations/$R/operations/123"
check_eq "unknown operation -> 404" "$STATUS" 404

# 7. refusals at create, naming the CustomJob field
cat >"$T/bad.yaml" <<EOF
workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    containerSpec: {imageUri: $IMG}
network: projects/1/global/networks/default
EOF
out=$(gc ai custom-jobs create --region $R --display-name bad-1 --config "$T/bad.yaml" 2>&1)
check "unacted field refused" test $? -ne 0
check "... naming jobSpec.network ($out)" grep -q "jobSpec.network" <<<"$out"
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"2\"}]}}"
check_eq "chief replicaCount 2 -> 400" "$STATUS" 400
check_eq "... its field" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.workerPoolSpecs[0].replicaCount"
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"no-such-machine\"},\"replicaCount\":\"1\"}]}}"
check_eq "unknown machine type -> 400" "$STATUS" 400
check_eq "... named as the CustomJob's field" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.workerPoolSpecs[0].machineSpec.machineType"
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\",\"diskSpec\":{\"bootDiskType\":\"pd-standard\"}}]}}"
check_eq "diskSpec other than the default -> 400" "$STATUS" 400
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\"}],\"baseOutputDirectory\":{\"outputUriPrefix\":\"gs://nobucket/x\"}}}"
check_eq "a bucket kilnd does not hold -> 400" "$STATUS" 400
check_eq "... named" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.baseOutputDirectory.outputUriPrefix"
api POST "$COL" "{\"displayName\":\"b\",\"state\":\"JOB_STATE_RUNNING\",\"jobSpec\":{}}"
check_eq "output-only state -> 400" "$STATUS" 400
api POST "$COL" '{'
check_eq "malformed body -> 400" "$STATUS" 400
api GET "$COL/notanumber"
check_eq "non-numeric id -> 404" "$STATUS" 404
api GET "/v1/projects/p1/locations/$R/trainingPipelines"
check_eq "other collections -> 404" "$STATUS" 404

# 8. a HyperparameterTuningJob (gcloud ai hp-tuning-jobs create --config):
# kiln's study runs the trials, each a container with --NAME=VALUE args, its
# AIP_*_DIR under base/TRIAL/, reporting through the cloudml-hypertune file
cat >"$T/hp.yaml" <<EOF
studySpec:
  metrics:
    - metricId: loss
      goal: MINIMIZE
  parameters:
    - parameterId: lr
      doubleValueSpec: {minValue: 0.001, maxValue: 0.1}
      scaleType: UNIT_LOG_SCALE
    - parameterId: layers
      discreteValueSpec: {values: [2, 4]}
  algorithm: RANDOM_SEARCH
trialJobSpec:
  workerPoolSpecs:
    - machineSpec: {machineType: n1-standard-4}
      replicaCount: 1
      containerSpec:
        imageUri: $IMG
        command: ["sh", "-c", 'lr=\${0#--lr=}; echo "{\"loss\": \$lr, \"global_step\": \"3\"}" >>"\$CLOUD_ML_HP_METRIC_FILE"; echo "trial \$CLOUD_ML_TRIAL_ID \$0 \$1 \$AIP_MODEL_DIR"; echo "CS=\$CLUSTER_SPEC"']
  baseOutputDirectory: {outputUriPrefix: gs://stage1/hp1}
EOF
out=$(gc ai hp-tuning-jobs create --region $R --display-name hp-1 --config "$T/hp.yaml" \
    --max-trial-count 3 --parallel-trial-count 1 2>&1)
IDH=$(grep -oE 'job \[[0-9]+\]' <<<"$out" | head -1 | tr -dc 0-9)
check "hp-tuning-jobs create ($(tail -2 <<<"$out"))" test -n "$IDH"
HCOL=/v1/projects/p1/locations/$R/hyperparameterTuningJobs
hp_ok() {
    local i s
    for i in $(seq 1 450); do
        api GET "$HCOL/$IDH"
        s=$(printf '%s' "$BODY" | jget state)
        [ "$s" = JOB_STATE_SUCCEEDED ] && return 0
        case "$s" in JOB_STATE_FAILED | JOB_STATE_CANCELLED) break ;; esac
        sleep 0.2
    done
    echo "  hp-1 is $s: $(printf '%s' "$BODY" | head -c 600)" >&2
    return 1
}
check "hp-1 succeeds" hp_ok
out=$(gc ai hp-tuning-jobs describe "$IDH" --region $R --format json 2>"$T/err")
check_eq "describe: 3 trials" "$(printf '%s' "$out" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["trials"]))')" 3
check_eq "describe: trial 1 SUCCEEDED" "$(printf '%s' "$out" | jget trials.0.state)" SUCCEEDED
check_eq "describe: trial ids" "$(printf '%s' "$out" | "$PY" -c 'import json,sys; print(",".join(t["id"] for t in json.load(sys.stdin)["trials"]))')" "1,2,3"
check_eq "describe: parameters" "$(printf '%s' "$out" | jget trials.0.parameters.0.parameterId),$(printf '%s' "$out" | jget trials.0.parameters.1.parameterId)" "lr,layers"
lr=$(printf '%s' "$out" | jget trials.0.parameters.0.value)
check_eq "finalMeasurement is the reported loss" "$(printf '%s' "$out" | "$PY" -c 'import json,sys; t=json.load(sys.stdin)["trials"][0]; print(abs(t["finalMeasurement"]["metrics"][0]["value"] - t["parameters"][0]["value"]) < 1e-6, t["finalMeasurement"]["stepCount"])')" "True 3"
check_eq "describe: studySpec goal" "$(printf '%s' "$out" | jget studySpec.metrics.0.goal)" MINIMIZE
check_eq "describe: maxTrialCount" "$(printf '%s' "$out" | jget maxTrialCount)" 3
api GET "/v1/projects/p1/jobs/hptuningjob_$IDH:logs"
check "trial 2 got its args and its own AIP_MODEL_DIR" grep -qE "trial 2 --lr=[0-9.e-]+ --layers=[24](\\.0)? gs://stage1/hp1/2/model/" <<<"$BODY"
check "trial 2's CLUSTER_SPEC names its trial" grep -qF '\"task\":{\"type\":\"workerpool0\",\"index\":0,\"trial\":\"2\"}' <<<"$BODY"
out=$(gc ai hp-tuning-jobs list --region $R --format 'value(displayName)' 2>"$T/err")
check_eq "hp-tuning-jobs list" "$out" hp-1
api GET "$COL"
check "a tuning job is not a CustomJob" test -z "$(printf '%s' "$BODY" | grep hp-1)"
out=$(gc ai hp-tuning-jobs stream-logs "$IDH" --region $R --polling-interval 1 2>&1)
check "hp stream-logs: every trial's lines" test "$(grep -c 'master-replica-0.*trial [123] --lr' <<<"$out")" = 3
# cancel: the running trial is stopped and the job ends CANCELLED
sed -e 's/^        command: .*/        command: ["sh", "-c", "sleep 600"]/' -e 's#gs://stage1/hp1#gs://stage1/hp2#' "$T/hp.yaml" >"$T/hp2.yaml"
out=$(gc ai hp-tuning-jobs create --region $R --display-name hp-2 --config "$T/hp2.yaml" --max-trial-count 2 2>&1)
IDH2=$(grep -oE 'job \[[0-9]+\]' <<<"$out" | head -1 | tr -dc 0-9)
hp_state() { api GET "$HCOL/$IDH2"; printf '%s' "$BODY" | jget "$1"; }
for _ in $(seq 1 300); do [ "$(hp_state trials.0.state)" = ACTIVE ] && break; sleep 0.2; done
check_eq "hp-2: a trial is active" "$(hp_state trials.0.state)" ACTIVE
check "hp cancel" gc ai hp-tuning-jobs cancel "$IDH2" --region $R
for _ in $(seq 1 300); do [ "$(hp_state state)" = JOB_STATE_CANCELLED ] && break; sleep 0.2; done
check_eq "hp-2 cancelled" "$(hp_state state)" JOB_STATE_CANCELLED
cat >"$T/hpbad.yaml" <<EOF
studySpec:
  metrics: [{metricId: loss, goal: MINIMIZE}]
  parameters:
    - parameterId: lr
      doubleValueSpec: {minValue: 0.001, maxValue: 0.1}
  decayCurveStoppingSpec: {useElapsedDuration: true}
trialJobSpec:
  workerPoolSpecs:
    - machineSpec: {machineType: n1-standard-4}
      replicaCount: 1
      containerSpec: {imageUri: $IMG}
EOF
out=$(gc ai hp-tuning-jobs create --region $R --display-name hp-bad --config "$T/hpbad.yaml" --max-trial-count 2 2>&1)
check "decayCurveStoppingSpec.useElapsedDuration refused, named ($out)" grep -q "studySpec.decayCurveStoppingSpec.useElapsedDuration" <<<"$out"

# the ml v1 API is unchanged beside it
check "ml_1 succeeds" wait_state ml_1 SUCCEEDED 30
finish
