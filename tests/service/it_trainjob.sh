#!/bin/bash
# tests/service/it_trainjob.sh - a TrainJob (Kubeflow Trainer v2) on kiln's
# stock torch-distributed runtime (data/runtimes) runs on a real kilnd: two
# nodes, each an unmodified `torchrun` (python3 -m torch.distributed.run)
# that finds its group from nothing but the torch policy's PET_* variables,
# start tests/service/pytorchjob/allreduce.py, which forms a gloo group of 2
# and all-reduces; the job SUCCEEDS. The trainer's image and command replace
# the runtime's node container's; the job view carries Trainer's Complete
# condition. The REST API takes the TrainJob itself as JSON, its runtime from
# kilnd's --runtimes-dir (a site's "site-torch" of 2 nodes; a runtime that
# directory lacks is refused naming spec.runtimeRef.name). A file that
# carries its runtime (a ClusterTrainingRuntime document before the TrainJob,
# as Trainer's examples) is submitted with the CLI and runs on that runtime.
# A suspended TrainJob (no queue label) and one on the
# deepspeed (mpi) runtime are refused at submit, naming the field.
# Replicas run in containers (podman) of an image built here from the
# merged-/usr links, with the host's /usr and /etc mounted read-only.
# Skipped (77) where torch with gloo or podman is missing.
PORT_RANGE=${PORT_RANGE:-15000-15999}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need torch podman
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
IMG=localhost/kiln-examples/allreduce:0.1
host_image "$IMG" || {
    fail "cannot build the image $IMG"
    finish
}
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config "$HERE" "$T")" >"$T/host.json"
# a site's runtimes directory: the stock torch runtime as "site-torch", 2 nodes
mkdir -p "$T/rt"
sed 's/name: torch-distributed/name: site-torch/; s/numNodes: 1/numNodes: 2/' \
    "$HERE/../../data/runtimes/torch-distributed.yaml" >"$T/rt/site-torch.yaml"
start_kilnd "$T/d" --python "$SYSPY" --node-config "$T/host.json" --runtimes-dir "$T/rt"

cat >"$T/tj.yaml" <<YAML
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: tj-gloo
  labels: {team: it}
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    image: $IMG
    command: ["$SYSPY", "$HERE/pytorchjob/torchrun.py", "$HERE/pytorchjob/allreduce.py"]
    env:
      - {name: KILN_IT_NOTE, value: from-the-trainjob}
    numNodes: 2
    numProcPerNode: 1
YAML
"$KILN" validate --kubeflow-job "$T/tj.yaml" --runtimes-dir "$HERE/../../data/runtimes" \
    >"$T/validate.out" 2>&1
check_eq "TrainJob validates against the stock runtimes" "$?" 0
"$KILN" jobs submit training --kubeflow-job "$T/tj.yaml" \
    --runtimes-dir "$HERE/../../data/runtimes" >"$T/submit.out" 2>&1
rc=$?
check_eq "TrainJob submitted" "$rc" 0
[ "$rc" -eq 0 ] || {
    cat "$T/validate.out" "$T/submit.out" >&2
    finish
}
check "TrainJob SUCCEEDED" wait_state tj_gloo SUCCEEDED 120
"$KILN" jobs stream-logs tj_gloo >"$T/tj.logs" 2>&1
grep -q "rank 0 of 2" "$T/tj.logs" || tail -n 40 "$T/tj.logs" >&2
for r in 0 1; do
    check "node $r all-reduced across 2 (torchrun from PET_*)" \
        grep -q "rank $r of 2: sum 3 (PET_NODE_RANK=$r PET_NNODES=2 " "$T/tj.logs"
done
check "the nodes ran in containers of the trainer's image" \
    grep -q "of image $IMG" "$T/tj.logs"
check "the API's job view keeps the kind" \
    bash -c "'$KILN' jobs describe tj_gloo --format json | grep -q '\"kind\": \"TrainJob\"'"

"$KILN" jobs describe tj_gloo --format json >"$T/describe.json" 2>&1
check "the job view has Trainer's Complete condition" "$PY" -c '
import json, sys
c = json.load(open(sys.argv[1]))["kilnStatus"]["trainJobStatus"]["conditions"]
assert [(x["type"], x["status"], x["reason"]) for x in c] == [("Complete", "True", "AllJobsCompleted")], c
' "$T/describe.json"

# the REST API takes the TrainJob itself (JSON, as kubectl -o json writes it),
# its runtime from kilnd's --runtimes-dir: numNodes 2 from the site's runtime
"$PY" - "$T/tj.yaml" >"$T/tj-api.json" <<'PYJ'
import json, sys
import yaml
d = yaml.safe_load(open(sys.argv[1]))
d["metadata"]["name"] = "tj-api"
d["spec"]["runtimeRef"]["name"] = "site-torch"
del d["spec"]["trainer"]["numNodes"]
print(json.dumps(d))
PYJ
api POST /v1/projects/p1/jobs "$(cat "$T/tj-api.json")"
echo "$BODY" >"$T/api.out"
check_eq "TrainJob POSTed to the REST API" "$STATUS" 200
[ "$STATUS" = 200 ] || {
    echo "$BODY" >&2
    finish
}
check "... read against kilnd's runtimes dir" grep -q '"runtime": *"ClusterTrainingRuntime/site-torch"' "$T/api.out"
check "TrainJob from the API SUCCEEDED" wait_state tj_api SUCCEEDED 120
"$KILN" jobs stream-logs tj_api >"$T/tj-api.logs" 2>&1
check "... its 2 nodes all-reduced" grep -q "rank 1 of 2: sum 3 (PET_NODE_RANK=1 PET_NNODES=2 " "$T/tj-api.logs"
api POST /v1/projects/p1/jobs "$(sed 's/site-torch/torch-distributed/; s/tj-api/tj-api2/' "$T/tj-api.json")"
echo "$BODY" >"$T/api2.out"
check_eq "a stock runtime kilnd's directory lacks is refused" "$STATUS" 400
check "... naming spec.runtimeRef.name" grep -q "spec.runtimeRef.name" "$T/api2.out"

# a file that carries its runtime, as Trainer's examples ship theirs: the
# file's own ClusterTrainingRuntime "file-torch" (2 nodes; the runtimes
# directory has none of that name), then the TrainJob without numNodes, then
# a document of comments only (no document). kiln reads the runtime from the
# file and says so; the job's 2 nodes all-reduce.
{
    sed 's/name: torch-distributed/name: file-torch/; s/numNodes: 1/numNodes: 2/' \
        "$HERE/../../data/runtimes/torch-distributed.yaml"
    echo "---"
    sed 's/tj-gloo/tj-file/; s/name: torch-distributed/name: file-torch/; /numNodes: 2/d' \
        "$T/tj.yaml"
    printf -- '---\n# comments only: no document\n'
} >"$T/tj-file.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/tj-file.yaml" \
    --runtimes-dir "$HERE/../../data/runtimes" >"$T/file.out" 2>&1
rc=$?
check_eq "a TrainJob file that carries its runtime is submitted" "$rc" 0
[ "$rc" -eq 0 ] || cat "$T/file.out" >&2
check "... the file's runtime used, and said" grep -q \
    "note: spec.runtimeRef: the ClusterTrainingRuntime 'file-torch' is the file's document 1" \
    "$T/file.out"
check "TrainJob of the file SUCCEEDED" wait_state tj_file SUCCEEDED 120
"$KILN" jobs stream-logs tj_file >"$T/tj-file.logs" 2>&1
check "... its 2 nodes (the file's runtime's numNodes) all-reduced" \
    grep -q "rank 1 of 2: sum 3 (PET_NODE_RANK=1 PET_NNODES=2 " "$T/tj-file.logs"

# refused at submit, each naming its field
sed 's/^spec:$/spec:\n  suspend: true/; s/tj-gloo/tj-susp/' "$T/tj.yaml" >"$T/susp.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/susp.yaml" >"$T/susp.out" 2>&1
check "a suspended TrainJob is refused" test $? -ne 0
check "... naming spec.suspend" grep -q "spec.suspend" "$T/susp.out"
sed 's/torch-distributed/deepspeed-distributed/; s/tj-gloo/tj-ds/' "$T/tj.yaml" >"$T/ds.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/ds.yaml" >"$T/ds.out" 2>&1
check "a TrainJob on the mpi runtime is refused" test $? -ne 0
check "... naming the runtime's mlPolicy.mpi" \
    grep -q "ClusterTrainingRuntime/deepspeed-distributed: spec.mlPolicy.mpi" "$T/ds.out"
finish
