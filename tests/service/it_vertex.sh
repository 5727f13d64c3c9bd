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
        - 'for i in \$(seq 60); do [ \$(ls /gcs/stage1/up 2>/dev/null | wc -l) -ge 2 ] && break; sleep 1; done; d=\$(echo "\$AIP_MODEL_DIR" | sed "s#^gs://#/gcs/#"); mkdir -p "\$d" && echo "saved by \$CLOUD_ML_JOB_ID" >"\$d/saved.txt"; echo AIP=\$AIP_MODEL_DIR,\$AIP_CHECKPOINT_DIR,\$AIP_TENSORBOARD_LOG_DIR; echo CS=\$CLUSTER_SPEC; echo GREET=\$GREETING'
      env:
        - name: GREETING
          value: hello-vertex
  - machineSpec:
      machineType: n1-standard-4
    replicaCount: 2
    containerSpec:
      imageUri: $IMG
      command: ["sh", "-c", "echo worker \$(echo \$CLUSTER_SPEC | grep -o '\"task\":{[^}]*}'); mkdir -p /gcs/stage1/up && touch /gcs/stage1/up/\$(hostname)"]
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
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\",\"diskSpec\":{\"bootDiskType\":\"hyperdisk-balanced\"}}]}}"
check_eq "a disk class kiln cannot promise -> 400" "$STATUS" 400
check_eq "... named" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskType"
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\",\"diskSpec\":{\"bootDiskType\":\"pd-ssd\",\"bootDiskSizeGb\":65000}}]}}"
check_eq "more scratch space than kilnd's disk has -> 400" "$STATUS" 400
check_eq "... named" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.workerPoolSpecs[0].diskSpec.bootDiskSizeGb"
check "... with the reason ($(printf '%s' "$BODY" | jget error.message))" grep -q "no node can give it" <<<"$BODY"
api POST "$COL" "{\"displayName\":\"disk-1\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\",\"command\":[\"true\"]},\"machineSpec\":{\"machineType\":\"n2-highcpu-2\"},\"replicaCount\":\"1\",\"diskSpec\":{\"bootDiskType\":\"pd-standard\",\"bootDiskSizeGb\":\"1\"}}]}}"
check_eq "bootDiskSizeGb 1 on an n2 machine -> 200 ($(printf '%s' "$BODY" | head -c 200))" "$STATUS" 200
check_eq "... shown back" "$(printf '%s' "$BODY" | jget jobSpec.workerPoolSpecs.0.diskSpec.bootDiskSizeGb)" 1
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\"},{},{\"containerSpec\":{\"imageUri\":\"us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest\"},\"machineSpec\":{\"machineType\":\"n1-highcpu-16\"},\"replicaCount\":\"2\"}]}}"
check_eq "the Reduction Server pool -> 400, named" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.workerPoolSpecs[2].containerSpec.imageUri"
api POST "$COL" "{\"displayName\":\"b\",\"jobSpec\":{\"workerPoolSpecs\":[{\"containerSpec\":{\"imageUri\":\"$IMG\"},\"machineSpec\":{\"machineType\":\"n1-standard-4\"},\"replicaCount\":\"1\"}],\"baseOutputDirectory\":{\"outputUriPrefix\":\"gs://nobucket/x\"}}}"
check_eq "a bucket kilnd does not hold -> 400" "$STATUS" 400
check_eq "... named" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "jobSpec.baseOutputDirectory.outputUriPrefix"
api POST "$COL" "{\"displayName\":\"b\",\"state\":\"JOB_STATE_RUNNING\",\"jobSpec\":{}}"
check_eq "output-only state -> 400" "$STATUS" 400
api POST "$COL" '{'
check_eq "malformed body -> 400" "$STATUS" 400
api GET "$COL/notanumber"
check_eq "non-numeric id -> 404" "$STATUS" 404
api GET "/v1/projects/p1/locations/$R/endpoints"
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

# 9. v1beta1: the same resources and handlers (gcloud beta ai maps its
# BETA track to /v1beta1/; the SDK's preview classes use it too)
BCOL=/v1beta1/projects/p1/locations/$R/customJobs
out=$(gc beta ai custom-jobs create --region $R --display-name beta-1 \
    --worker-pool-spec "machine-type=n1-standard-4,replica-count=1,container-image-uri=$IMG" \
    --args=sh,-c,'echo beta-ran' 2>&1)
IDB=$(job_id_of "$out")
check "gcloud beta ai custom-jobs create ($(tail -1 <<<"$out"))" test -n "$IDB"
check "beta-1 succeeds" wait_vx "$IDB" JOB_STATE_SUCCEEDED 60
out=$(gc beta ai custom-jobs describe "$IDB" --region $R --format 'value(displayName,state)' 2>"$T/err")
check_eq "gcloud beta describe" "$out" "beta-1	JOB_STATE_SUCCEEDED"
out=$(gc beta ai custom-jobs list --region $R --filter 'displayName=beta-1' --format 'value(name)' 2>"$T/err")
check_eq "gcloud beta list" "$out" "projects/p1/locations/$R/customJobs/$IDB"
api GET "$BCOL/$IDB"
check_eq "curl v1beta1 get -> 200" "$STATUS" 200
check_eq "... the v1 resource name" "$(printf '%s' "$BODY" | jget name)" "projects/p1/locations/$R/customJobs/$IDB"
api GET "$COL/$IDB"
check_eq "the same job under v1" "$(printf '%s' "$BODY" | jget displayName)" beta-1
api GET "$BCOL?pageSize=1&filter=display_name%3D%22beta-1%22"
check_eq "v1beta1 list with filter" "$(printf '%s' "$BODY" | jget customJobs.0.displayName)" beta-1
api GET "/v1beta1/projects/p1/locations/$R/hyperparameterTuningJobs/$IDH"
check_eq "v1beta1 hyperparameterTuningJobs get" "$(printf '%s' "$BODY" | jget displayName)" hp-1
api POST "$BCOL" '{"displayName":"b","jobSpec":{"workerPoolSpecs":[{"containerSpec":{"imageUri":"i"},"machineSpec":{"machineType":"n1-standard-4"},"replicaCount":"1"}],"network":"n"}}'
check_eq "v1beta1 create refuses as v1 does" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" jobSpec.network
api DELETE "$BCOL/$IDB"
check_eq "v1beta1 delete -> an Operation" "$(printf '%s' "$BODY" | jget done)" true
OPB=$(printf '%s' "$BODY" | jget name)
api GET "/v1beta1/$OPB"
check_eq "v1beta1 operations get" "$STATUS" 200
api GET "$COL/$IDB"
check_eq "deleted under v1 too" "$STATUS" 404
api GET "/v1beta1/projects/p1/jobs"
check_eq "the ml API has no v1beta1 here -> 404" "$STATUS" 404
api GET "/v1beta1/projects/p1/locations/$R/instances"
check_eq "nor the Notebooks API -> 404" "$STATUS" 404

# 10. a tuning job's trial in a container whatever its names: in project
# "default-project" the trial's container name is 75 characters, over the
# kernel's 64 for a hostname (runc: sethostname: invalid argument); the
# container gets a DNS label. The range's minValue is left out (0), as the
# SDK sends DoubleParameterSpec(min=0, ...).
LP=default-project
cat >"$T/hpl.json" <<EOF
{"displayName": "hp-host", "maxTrialCount": 1, "parallelTrialCount": 1,
 "studySpec": {"metrics": [{"metricId": "loss", "goal": 2}],
               "parameters": [{"parameterId": "dropout", "doubleValueSpec": {"maxValue": 0.5}}]},
 "trialJobSpec": {"workerPoolSpecs": [{"replicaCount": "1", "machineSpec": {"machineType": "n1-standard-4"},
   "containerSpec": {"imageUri": "$IMG", "command": ["sh", "-c",
     "echo host=\$(hostname) \$0; echo '{\\"loss\\": 1}' >>\\"\$CLOUD_ML_HP_METRIC_FILE\\""]}}]}}
EOF
api POST "/v1/projects/$LP/locations/$R/hyperparameterTuningJobs" "$(cat "$T/hpl.json")"
check_eq "tuning job with an omitted minValue -> 200 ($(printf '%s' "$BODY" | head -c 300))" "$STATUS" 200
IDL=$(printf '%s' "$BODY" | jget name | grep -oE '[0-9]+$')
hpl_state() { api GET "/v1/projects/$LP/locations/$R/hyperparameterTuningJobs/$IDL"; printf '%s' "$BODY" | jget state; }
for _ in $(seq 1 300); do
    case "$(hpl_state)" in JOB_STATE_SUCCEEDED | JOB_STATE_FAILED | JOB_STATE_CANCELLED) break ;; esac
    sleep 0.2
done
check_eq "its trial's container starts and the job succeeds" "$(hpl_state)" JOB_STATE_SUCCEEDED
api GET "/v1/projects/$LP/jobs/hptuningjob_$IDL:logs"
hn=$(grep -oE 'host=[^ \"]+' <<<"$BODY" | head -1 | cut -d= -f2)
check "the trial's hostname '$hn' is a DNS label of at most 63" grep -qE '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' <<<"$hn"
check "... and tells the replica by a readable prefix" grep -q '^kiln-default-project-hptuningjob-' <<<"$hn"
check "... the searched range starts at 0" grep -qE 'host=[^ ]+ --dropout=0?\.[0-9]' <<<"$BODY"

# 10b. conditional parameters (conditionalParameterSpecs): a grid over
# optimizer {sgd, adam}, lr (2 values) only under sgd and beta1 (1) only
# under adam, is 3 trials, not 4; each trial gets the flags of its own
# parameters and lists only those in its parameters
cat >"$T/hpc.json" <<EOF
{"displayName": "hp-cond", "maxTrialCount": 10, "parallelTrialCount": 2,
 "studySpec": {"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}], "algorithm": "GRID_SEARCH",
   "parameters": [{"parameterId": "optimizer", "categoricalValueSpec": {"values": ["sgd", "adam"]},
     "conditionalParameterSpecs": [
       {"parentCategoricalValues": {"values": ["sgd"]},
        "parameterSpec": {"parameterId": "lr", "discreteValueSpec": {"values": [0.01, 0.5]}}},
       {"parentCategoricalValues": {"values": ["adam"]},
        "parameterSpec": {"parameterId": "beta1", "discreteValueSpec": {"values": [0.75]}}}]}]},
 "trialJobSpec": {"workerPoolSpecs": [{"replicaCount": "1", "machineSpec": {"machineType": "n1-standard-4"},
   "containerSpec": {"imageUri": "$IMG", "command": ["sh", "-c",
     "echo cond-trial \$CLOUD_ML_TRIAL_ID \$0 \$* end; echo '{\\"loss\\": 1}' >>\\"\$CLOUD_ML_HP_METRIC_FILE\\""]}}]}}
EOF
api POST "$HCOL" "$(cat "$T/hpc.json")"
check_eq "tuning job with conditional parameters -> 200 ($(printf '%s' "$BODY" | head -c 300))" "$STATUS" 200
IDC=$(printf '%s' "$BODY" | jget name | grep -oE '[0-9]+$')
check_eq "... its studySpec shows the condition" "$(printf '%s' "$BODY" | jget studySpec.parameters.0.conditionalParameterSpecs.1.parameterSpec.parameterId)" beta1
hpc_state() { api GET "$HCOL/$IDC"; printf '%s' "$BODY" | jget state; }
for _ in $(seq 1 300); do
    case "$(hpc_state)" in JOB_STATE_SUCCEEDED | JOB_STATE_FAILED | JOB_STATE_CANCELLED) break ;; esac
    sleep 0.2
done
check_eq "hp-cond succeeds" "$(hpc_state)" JOB_STATE_SUCCEEDED
api GET "$HCOL/$IDC"
check_eq "hp-cond: each finished trial's parameters are its own" "$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
print(";".join("%s:%s:%s" % (t["id"], t["state"], ",".join("%s=%s" % (p["parameterId"], p["value"]) for p in t["parameters"]))
               for t in json.load(sys.stdin)["trials"]))')" \
    "1:SUCCEEDED:optimizer=sgd,lr=0.01;2:SUCCEEDED:optimizer=sgd,lr=0.5;3:SUCCEEDED:optimizer=adam,beta1=0.75"
api GET "/v1/projects/p1/jobs/hptuningjob_$IDC:logs"
check "hp-cond: trial 1 got --optimizer=sgd --lr=0.01 only" grep -qE 'cond-trial 1 --optimizer=sgd --lr=0.01 end' <<<"$BODY"
check "hp-cond: trial 3 got --optimizer=adam --beta1=0.75 only" grep -qE 'cond-trial 3 --optimizer=adam --beta1=0.75 end' <<<"$BODY"
api POST "$HCOL" "$(sed 's/"values": \["adam"\]/"values": ["rmsprop"]/' "$T/hpc.json")"
check_eq "a condition on a value the parent does not take -> 400" "$STATUS" 400
check "... named by its path" grep -qF 'studySpec.parameters[0].conditionalParameterSpecs[1].parentCategoricalValues.values' <<<"$BODY"

# 11. trainingPipelines (the SDK's CustomTrainingJob and its siblings): the
# custom task's trainingTaskInputs, a CustomJobSpec in the SDK's mixed
# snake_case/camelCase with doubles for counts, run as that CustomJob; its
# state a PipelineState; under v1 and v1beta1
TASK=gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml
tp_body() { # tp_body NAME COMMAND-JSON
    printf '{"displayName": "%s", "trainingTaskDefinition": "%s", "labels": {"via": "tp"}, "trainingTaskInputs": {"worker_pool_specs": [{"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1.0, "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100.0}, "containerSpec": {"imageUri": "%s", "command": %s}}], "base_output_directory": {"output_uri_prefix": "gs://stage1/tp/%s"}}}' \
        "$1" "$TASK" "$IMG" "$2" "$1"
}
TPC=/v1/projects/p1/locations/$R/trainingPipelines
api POST "$TPC" "$(tp_body tp-1 '["sh", "-c", "echo pipeline-ran model=$AIP_MODEL_DIR"]')"
check_eq "trainingPipelines create -> 200 ($(printf '%s' "$BODY" | head -c 300))" "$STATUS" 200
TP1=$(printf '%s' "$BODY" | jget name | grep -oE '[0-9]+$')
check_eq "... the custom task read back byte for byte" "$(printf '%s' "$BODY" | jget trainingTaskDefinition)" "$TASK"
tp_state() { api GET "$TPC/$1"; printf '%s' "$BODY" | jget state; }
for _ in $(seq 1 300); do
    case "$(tp_state "$TP1")" in PIPELINE_STATE_SUCCEEDED | PIPELINE_STATE_FAILED | PIPELINE_STATE_CANCELLED) break ;; esac
    sleep 0.2
done
check_eq "tp-1 reaches PIPELINE_STATE_SUCCEEDED" "$(tp_state "$TP1")" PIPELINE_STATE_SUCCEEDED
api GET "$TPC/$TP1"
check_eq "... shown with its trainingTaskInputs" "$(printf '%s' "$BODY" | jget trainingTaskInputs.workerPoolSpecs.0.machineSpec.machineType)" n1-standard-4
api GET "$TPC/$TP1?\$alt=json;enum-encoding=int"
check_eq "... state 4 with enum-encoding=int" "$(printf '%s' "$BODY" | jget state)" 4
api GET "/v1/projects/p1/jobs/trainingpipeline_$TP1:logs"
check "its container ran with AIP_MODEL_DIR under its base" grep -qF "pipeline-ran model=gs://stage1/tp/tp-1/model/" <<<"$BODY"
api GET "/v1beta1/projects/p1/locations/$R/trainingPipelines/$TP1"
check_eq "v1beta1 get of the same pipeline" "$(printf '%s' "$BODY" | jget displayName)" tp-1
api POST "/v1beta1/projects/p1/locations/$R/trainingPipelines" "$(tp_body tp-2 '["sleep", "600"]')"
check_eq "v1beta1 create -> 200" "$STATUS" 200
TP2=$(printf '%s' "$BODY" | jget name | grep -oE '[0-9]+$')
for _ in $(seq 1 300); do [ "$(tp_state "$TP2")" = PIPELINE_STATE_RUNNING ] && break; sleep 0.2; done
check_eq "tp-2 running" "$(tp_state "$TP2")" PIPELINE_STATE_RUNNING
api GET "$TPC?filter=state%3D%22PIPELINE_STATE_SUCCEEDED%22"
check_eq "list filter on a PipelineState" "$(printf '%s' "$BODY" | jget trainingPipelines.0.displayName),$(printf '%s' "$BODY" | jget trainingPipelines.1.displayName)" "tp-1,"
api GET "$TPC?pageSize=1"
tok=$(printf '%s' "$BODY" | jget nextPageToken)
p1=$(printf '%s' "$BODY" | jget trainingPipelines.0.displayName)
check "list pageSize=1: a token" test -n "$tok"
api GET "$TPC?pageSize=1&pageToken=$tok"
p2=$(printf '%s' "$BODY" | jget trainingPipelines.0.displayName)
check_eq "... two pages, the two pipelines" "$(printf '%s\n%s\n' "$p1" "$p2" | sort | tr '\n' ,)" "tp-1,tp-2,"
api GET "$COL"
check "a pipeline is not listed as a CustomJob" test -z "$(printf '%s' "$BODY" | grep tp-1)"
api GET "$TPC?filter=state%3D%22JOB_STATE_RUNNING%22"
check_eq "a JobState in a pipeline filter -> 400" "$STATUS" 400
api POST "$TPC/$TP2:cancel" '{}'
check_eq "cancel -> 200 {}" "$STATUS,$BODY" "200,{}"
for _ in $(seq 1 300); do [ "$(tp_state "$TP2")" = PIPELINE_STATE_CANCELLED ] && break; sleep 0.2; done
check_eq "tp-2 PIPELINE_STATE_CANCELLED" "$(tp_state "$TP2")" PIPELINE_STATE_CANCELLED
api GET "$TPC/$TP2"
check_eq "... error CANCELLED (1)" "$(printf '%s' "$BODY" | jget error.code)" 1
api DELETE "$TPC/$TP1"
check_eq "delete -> a done Operation" "$(printf '%s' "$BODY" | jget done)" true
api GET "$TPC/$TP1"
check_eq "... gone" "$STATUS" 404
api POST "$TPC" "$(tp_body tp-bad '["true"]' | sed 's/"labels"/"modelToUpload": {"displayName": "m", "explanationSpec": {"x": 1}}, "labels"/')"
check_eq "a Model field kiln does not keep -> 400 naming it" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" modelToUpload.explanationSpec
api POST "$TPC" "$(tp_body tp-bad '["true"]' | sed 's/n1-standard-4/no-such-machine/')"
check_eq "a bad machine type, named under trainingTaskInputs" "$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "trainingTaskInputs.workerPoolSpecs[0].machineSpec.machineType"

# 12. Models: models:upload (the SDK's Model.upload) of a directory of
# objects in the staging store, get, list, a modelId taken, refusals by
# field, delete (the objects stay); under v1 and v1beta1
MC=/v1/projects/p1/locations/$R/models
printf 'weights' >"$T/saved_model.pb"
curl -s -m 10 -o /dev/null -X POST -H 'Content-Type: application/octet-stream' --data-binary @"$T/saved_model.pb" \
    "$URL/upload/storage/v1/b/stage1/o?uploadType=media&name=up/m1/saved_model.pb"
up_body() { # up_body MODEL-ID ARTIFACT-URI [EXTRA-TOP-LEVEL-JSON]
    printf '{"model": {"displayName": "up-1", "artifactUri": "%s", "containerSpec": {"imageUri": "%s", "predictRoute": "/p"}, "labels": {"via": "upload"}}, "modelId": "%s"%s}' \
        "$2" "$IMG" "$1" "${3:+, $3}"
}
api POST "$MC:upload" "$(up_body my-model gs://stage1/up/m1)"
check_eq "models:upload -> 200 ($(printf '%s' "$BODY" | head -c 300))" "$STATUS" 200
check_eq "... a done Operation" "$(printf '%s' "$BODY" | jget done)" true
check_eq "... its response an UploadModelResponse" "$(printf '%s' "$BODY" | jget response.@type)" type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse
check_eq "... naming the Model by its modelId" "$(printf '%s' "$BODY" | jget response.model),$(printf '%s' "$BODY" | jget response.modelVersionId)" "projects/p1/locations/$R/models/my-model,1"
check_eq "... metadata UploadModelOperationMetadata" "$(printf '%s' "$BODY" | jget metadata.@type)" type.googleapis.com/google.cloud.aiplatform.v1.UploadModelOperationMetadata
OPN=$(printf '%s' "$BODY" | jget name)
api GET "/v1/$OPN"
check_eq "GET of the upload's Operation: the same" "$STATUS,$(printf '%s' "$BODY" | jget response.model)" "200,projects/p1/locations/$R/models/my-model"
api GET "$MC/my-model"
check_eq "the uploaded Model -> 200" "$STATUS" 200
check_eq "... as sent: artifactUri, containerSpec.imageUri, labels" "$(printf '%s' "$BODY" | jget artifactUri),$(printf '%s' "$BODY" | jget containerSpec.imageUri),$(printf '%s' "$BODY" | jget labels.via)" "gs://stage1/up/m1,$IMG,upload"
check_eq "... version 1, alias default, a createTime" "$(printf '%s' "$BODY" | jget versionId),$(printf '%s' "$BODY" | jget versionAliases.0),$(printf '%s' "$BODY" | jget createTime | grep -cE '^20[0-9-]+T')" "1,default,1"
check_eq "... made by no pipeline" "$(printf '%s' "$BODY" | jget trainingPipeline)" ""
api GET "/v1beta1/projects/p1/locations/$R/models/my-model@1"
check_eq "v1beta1 get of models/my-model@1" "$STATUS,$(printf '%s' "$BODY" | jget displayName)" "200,up-1"
api GET "$MC"
check "list shows it" grep -qF "\"projects/p1/locations/$R/models/my-model\"" <<<"$BODY"
api POST "$MC:upload" "$(up_body my-model gs://stage1/up/m1)"
check_eq "the same modelId again -> 409 ALREADY_EXISTS" "$STATUS,$(printf '%s' "$BODY" | jget error.status)" "409,ALREADY_EXISTS"
api POST "$MC:upload" "$(up_body m2 gs://stage1/up/m1 '"parentModel": "projects/p1/locations/'$R'/models/my-model"')"
check_eq "parentModel (versions) -> 400 naming it" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,parentModel"
api POST "$MC:upload" "$(up_body m2 gs://stage1/up/m1 | sed 's/"labels"/"explanationSpec": {"parameters": {"x": 1}}, "labels"/')"
check_eq "a Model field kiln does not act on -> 400 naming it" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,model.explanationSpec"
api POST "$MC:upload" "$(up_body m2 gs://stage1/up/none)"
check_eq "an artifactUri with no objects under it -> 400 naming it" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,model.artifactUri"
api POST "$MC:upload" "$(up_body m2 gs://no-such-bucket/up/m1)"
check_eq "an artifactUri of a bucket kilnd does not hold -> 400 naming it" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,model.artifactUri"
api POST "$MC:upload" "$(up_body m2 /tmp/m1)"
check_eq "a local artifactUri -> 400" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,model.artifactUri"
api POST "$MC:upload" '{"model": {"artifactUri": "gs://stage1/up/m1"}}'
check_eq "no displayName -> 400 naming it" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,model.displayName"
api POST "$MC:upload" "$(up_body 9bad gs://stage1/up/m1)"
check_eq "a modelId starting with a digit -> 400" "$STATUS,$(printf '%s' "$BODY" | jget error.details.0.fieldViolations.0.field)" "400,modelId"
api GET "$MC/m2"
check_eq "... none of them made a Model" "$STATUS" 404
api POST "/v1beta1/projects/p1/locations/$R/models:upload" '{"model": {"display_name": "up-2"}}'
check_eq "v1beta1 upload without modelId or artifactUri -> 200" "$STATUS" 200
ID_UP2=$(printf '%s' "$BODY" | jget response.model | grep -oE '[0-9]+$')
check "... a numeric id" test -n "$ID_UP2"
api GET "$MC/$ID_UP2"
check_eq "... get it" "$STATUS,$(printf '%s' "$BODY" | jget displayName)" "200,up-2"
api DELETE "$MC/my-model"
check_eq "delete -> a done Operation" "$STATUS,$(printf '%s' "$BODY" | jget done),$(printf '%s' "$BODY" | jget metadata.@type)" "200,true,type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata"
api GET "$MC/my-model"
check_eq "... gone" "$STATUS" 404
api GET "$MC"
check "... and not listed" test -z "$(printf '%s' "$BODY" | grep my-model)"
got=$(curl -s -m 10 "$URL/download/storage/v1/b/stage1/o/up%2Fm1%2Fsaved_model.pb?alt=media")
check_eq "... its artifact objects stay" "$got" weights
api DELETE "$MC/my-model"
check_eq "delete again -> 404" "$STATUS" 404
api DELETE "$MC/$ID_UP2"
check_eq "delete the v1beta1 one" "$STATUS" 200

# the ml v1 API is unchanged beside it
check "ml_1 succeeds" wait_state ml_1 SUCCEEDED 30
finish
