#!/bin/bash
# tests/service/it_pytorchjob.sh - Kubeflow PyTorchJob files run on a real
# kilnd with Debian's python3-torch: a Master + 2 Workers job whose program
# calls init_process_group("gloo") from the environment all-reduces across
# the three ranks and SUCCEEDS; an elastic job (min 1, max 2) forms a group
# of two through torchrun's c10d rendezvous; killing one worker of a running
# elastic job: kilnd starts it again alone, torchrun re-forms the group and
# the job SUCCEEDS; on a node with 2 simulated GPUs, one held by another job,
# an elastic job starts with 1 worker and gets its 2nd when that GPU frees up.
# Debian 12's torchrun is launched through
# pytorchjob/torchrun.py (see there). The replicas run in containers (podman)
# of the images the files name, built here (nothing is pulled) from the
# merged-/usr links only, with the host's /usr and /etc mounted read-only:
# the host's Python and torch run in them unchanged.
# The elastic jobs of one node run in containers as written (each container
# is a node of its own name to torchrun's rendezvous: the group has both);
# those on two nodes run as processes (submit_as_processes), so that the
# test can kill and follow their programs by pid.
# Skipped (77) where python3-torch is not installed, or podman cannot run.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need torch podman
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
for img in localhost/kiln-examples/allreduce:0.1 localhost/kiln-examples/elastic-hello:0.1 \
    localhost/pytorch/pytorch:latest; do
    host_image "$img" || {
        fail "cannot build the image $img"
        finish
    }
done
printf '{"nodes": [{"name": "vm", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config "$HERE" "$T")" >"$T/host.json"
start_kilnd "$T/d" --python "$SYSPY" --node-config "$T/host.json"

# ---- Master + 2 Workers, gloo, from the environment ----
cat >"$T/gloo.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pt-gloo
spec:
  runPolicy: {backoffLimit: 0}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: localhost/kiln-examples/allreduce:0.1
              command: ["$SYSPY", "$HERE/pytorchjob/allreduce.py"]
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: localhost/kiln-examples/allreduce:0.1
              command: ["$SYSPY", "$HERE/pytorchjob/allreduce.py"]
YAML
"$KILN" jobs submit training --kubeflow-job "$T/gloo.yaml" >"$T/submit.out" 2>&1
check_eq "PyTorchJob submitted" "$?" 0
check "PyTorchJob SUCCEEDED" wait_state pt_gloo SUCCEEDED 120
"$KILN" jobs stream-logs pt_gloo >"$T/gloo.logs" 2>&1
for r in 0 1 2; do
    check "rank $r all-reduced across 3" \
        grep -q "rank $r of 3: sum 6 (PET_NODE_RANK=$r PET_NNODES=3 PYTHONUNBUFFERED=1)" "$T/gloo.logs"
done
check "the replicas ran in containers of the image" grep -q "container kiln-p1-pt_gloo-worker-replica-1 of image localhost/kiln-examples/allreduce:0.1" "$T/gloo.logs"

# submit_as_processes FILE: the drain jobs below run as processes, not in
# containers. `kiln jobs submit training --kubeflow-job FILE`
# converts FILE to the Job it POSTs; that request is captured by a one-shot
# stand-in for kilnd, its imageUri fields are removed (a replica without an
# image runs its command as a process) and the Job goes to the real kilnd.
submit_as_processes() {
    local cap=$T/captured.json port
    rm -f "$cap" "$T/capture.port"
    "$PY" - "$cap" "$T/capture.port" <<'PYSRV' &
import http.server, json, sys
cap, portfile = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        open(cap, "wb").write(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(portfile + ".tmp", "w").write(str(s.server_address[1]))
import os; os.rename(portfile + ".tmp", portfile)
s.handle_request()
PYSRV
    local srv=$! i
    for i in $(seq 50); do [ -s "$T/capture.port" ] && break; sleep 0.1; done
    port=$(cat "$T/capture.port")
    KILN_ENDPOINT=http://127.0.0.1:$port "$KILN" jobs submit training --kubeflow-job "$1" >/dev/null 2>&1
    wait "$srv"
    [ -s "$cap" ] || return 1
    local job
    job=$("$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
for k, v in j.get("trainingInput", {}).items():
    if isinstance(v, dict):
        v.pop("imageUri", None)
print(json.dumps(j))' "$cap")
    api POST /v1/projects/p1/jobs "$job" >/dev/null
    [ "$STATUS" = 200 ]
}

# ---- elastic: torchrun's c10d rendezvous forms the group ----
# elastic_job NAME STEPS: Workers only (min 1, max 2), each runs torchrun
elastic_job() {
    mkdir -p "$T/$1"
    cat >"$T/$1.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: $1
spec:
  elasticPolicy:
    rdzvBackend: c10d
    minReplicas: 1
    maxReplicas: 2
    maxRestarts: 3
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: localhost/kiln-examples/elastic-hello:0.1
              command: ["env", "KILN_ELASTIC_STATE=$T/$1", "$SYSPY", "$HERE/pytorchjob/torchrun.py",
                        "$HERE/pytorchjob/elastic.py", "$2"]
YAML
}
# (in containers: each has its own hostname, which must be the name torchrun
# finds for itself, socket.getfqdn(), or both agents are one node to c10d)
elastic_job el-two 6
"$KILN" jobs submit training --kubeflow-job "$T/el-two.yaml" >/dev/null 2>&1
check_eq "elastic job submitted" "$?" 0
check "elastic job SUCCEEDED" wait_state el_two SUCCEEDED 120
"$KILN" jobs stream-logs el_two >"$T/el-two.logs" 2>&1
check "the workers ran in containers" grep -q "container kiln-p1-el_two-worker-replica-0 of image localhost/kiln-examples/elastic-hello:0.1" "$T/el-two.logs"
check "torchrun formed a group of two" grep -q "rank 1 done in a group of 2" "$T/el-two.logs"
check "both agents took part" test "$(grep -c 'done in a group of 2' "$T/el-two.logs")" -eq 2
check "worker 0 was in the group of two" grep -q "master-replica-0.*done in a group of 2" "$T/el-two.logs"
check "worker 1 was in the group of two" grep -q "worker-replica-0.*done in a group of 2" "$T/el-two.logs"
check "no group of one" test "$(grep -c 'group of 1' "$T/el-two.logs")" -eq 0

# wait_steps JOB: until the job's group of two has taken 3 steps (60 s at most)
wait_steps() {
    for _ in $(seq 1 600); do
        "$KILN" jobs stream-logs "$1" 2>/dev/null | grep -q "step 3: all-reduced across 2" && return 0
        sleep 0.1
    done
    return 1
}

# ---- elastic: a worker killed mid-run is started again; the group re-forms ----
elastic_job el-kill 40
"$KILN" jobs submit training --kubeflow-job "$T/el-kill.yaml" >/dev/null 2>&1
check "elastic job RUNNING" wait_state el_kill RUNNING 30
check "el_kill: the group of two took 3 steps" wait_steps el_kill
api GET /v1/projects/p1/jobs/el_kill
check_eq "current workers" "$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)" 2
check_eq "wanted workers" "$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.wanted)" 2
# worker-replica-0 is PyTorch's Worker 1 (Worker 0, the rendezvous host, is kiln's master)
# its container is killed (SIGKILL to everything in it: `podman run` exits 137)
check "killed worker 1's container" podman kill --signal KILL kiln-p1-el_kill-worker-replica-0
check "elastic job SUCCEEDED after the kill" wait_state el_kill SUCCEEDED 180
"$KILN" jobs stream-logs el_kill >"$T/el-kill.logs" 2>&1
check "the worker was started again alone" grep -q "worker-replica-0 exited with status 137: starting it again alone" "$T/el-kill.logs"
check "the group re-formed (restart count 1)" grep -q "joined a group of 2 at step [1-9][0-9]* (restart 1)" "$T/el-kill.logs"
check "it finished in a group of two" test "$(grep -c 'done in a group of 2' "$T/el-kill.logs")" -eq 2
"$KILN" jobs describe el_kill >"$T/el-kill.describe" 2>&1
check "describe shows the worker counts" grep -q "elasticWorkers" "$T/el-kill.describe"

# ---- elastic on scarce devices: start with what fits, grow when devices free up ----
printf '{"nodes": [{"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}], %s}\n' \
    "$(host_runtime_config "$HERE" "$T")" >"$T/nodes.json"
start_kilnd "$T/g" --node-config "$T/nodes.json" --python "$SYSPY"
api POST /v1/projects/p1/jobs '{"jobId":"blocker","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sleep","60"]}}}'
check_eq "blocker created" "$STATUS" 200
check "blocker holds one of the two GPUs" wait_state blocker RUNNING 20
cat >"$T/grow.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: el-grow}
spec:
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 2
    rdzvConf: [{key: last_call_timeout, value: "2"}]
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-tesla-v100}
          containers:
            - name: pytorch
              image: pytorch/pytorch
              command: ["sh", "-c", "echo nnodes=\$PET_NNODES; exec env KILN_ELASTIC_STATE=$T/el-grow $SYSPY $HERE/pytorchjob/torchrun.py $HERE/pytorchjob/elastic.py 40"]
              resources: {limits: {nvidia.com/gpu: 1}}
YAML
mkdir -p "$T/el-grow"
"$KILN" jobs submit training --kubeflow-job "$T/grow.yaml" >/dev/null 2>&1
check "elastic job RUNNING with the one free GPU" wait_state el_grow RUNNING 20
api GET /v1/projects/p1/jobs/el_grow
check_eq "started with 1 worker" "$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)" 1
check_eq "wants 2" "$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.wanted)" 2
# torchrun's group of one takes its first step before the GPU frees up
alone=""
for _ in $(seq 1 300); do
    "$KILN" jobs stream-logs el_grow 2>/dev/null | grep -q "step 1: all-reduced across 1" && alone=1 && break
    sleep 0.1
done
check "the one worker's container ran in a group of one" test -n "$alone"
api POST /v1/projects/p1/jobs/blocker:cancel '{}'
grown=""
for _ in $(seq 1 100); do
    api GET /v1/projects/p1/jobs/el_grow
    grown=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
    [ "$grown" = 2 ] && break
    sleep 0.1
done
check_eq "a worker was added when the GPU freed up" "$grown" 2
check "elastic job SUCCEEDED" wait_state el_grow SUCCEEDED 90
"$KILN" jobs stream-logs el_grow >"$T/grow.logs" 2>&1
check "the added worker was told min:max" grep -q "worker-replica-0.nnodes=1:2" "$T/grow.logs"
check "the addition is logged" grep -q "Adding worker-replica-0" "$T/grow.logs"
check "the containers' group grew to two" grep -q "rank 0 joined a group of 2 at step [1-9][0-9]*" "$T/grow.logs"
check "both finished in the group of two" test "$(grep -c 'done in a group of 2' "$T/grow.logs")" -eq 2

# ---- elastic and drains: two workers on two nodes, one node drained ----
stop_kilnd
printf '%s\n' '{"nodes": [' \
    '  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 1}]},' \
    '  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 1}]}]}' \
    >"$T/two-nodes.json"
start_kilnd "$T/n" --node-config "$T/two-nodes.json" --python "$SYSPY"
# two_node_job NAME MIN MAX COMMAND-JSON-LIST: one V100 per Worker, so each on its own node
two_node_job() {
    mkdir -p "$T/$1"
    cat >"$T/$1.yaml" <<YAML
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: $1}
spec:
  elasticPolicy:
    minReplicas: $2
    maxReplicas: $3
    maxRestarts: 3
    rdzvConf: [{key: last_call_timeout, value: "3"}]
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          nodeSelector: {cloud.google.com/gke-accelerator: nvidia-tesla-v100}
          containers:
            - name: pytorch
              image: localhost/kiln-examples/elastic-hello:0.1
              command: $4
              resources: {limits: {nvidia.com/gpu: 1}}
YAML
}
# rep_field TASK FIELD: a replica's field from $BODY (a GET of the job)
rep_field() {
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
for r in json.load(sys.stdin)["kilnStatus"]["replicas"]:
    if r["task"] == sys.argv[1]: print(r.get(sys.argv[2], ""))' "$1" "$2"
}
# wait_current JOB N [SECONDS]: until kilnStatus.elasticWorkers.current is N
wait_current() {
    local cur=""
    for _ in $(seq 1 $((${3:-10} * 10))); do
        api GET "/v1/projects/p1/jobs/$1"
        cur=$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)
        [ "$cur" = "$2" ] && return 0
        sleep 0.1
    done
    echo "  $1: elasticWorkers.current is '$cur', waited for $2" >&2
    return 1
}

# min 1: the drained node's worker leaves; the job goes on with Worker 0 and SUCCEEDS
two_node_job el-drain 1 2 "[\"env\", \"KILN_ELASTIC_STATE=$T/el-drain\", \"$SYSPY\", \"$HERE/pytorchjob/torchrun.py\", \"$HERE/pytorchjob/elastic.py\", \"30\"]"
submit_as_processes "$T/el-drain.yaml" >/dev/null 2>&1
check "el-drain RUNNING" wait_state el_drain RUNNING 30
check "el_drain: the group of two took 3 steps" wait_steps el_drain
api GET /v1/projects/p1/jobs/el_drain
check_eq "el-drain: 2 workers" "$(printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current)" 2
m_node=$(rep_field master-replica-0 node)
w_node=$(rep_field worker-replica-0 node)
check "the workers are on two nodes ($m_node, $w_node)" test -n "$w_node" -a "$m_node" != "$w_node"
"$KILN" nodes drain "$w_node" >/dev/null 2>&1
check_eq "drain exit" "$?" 0
check "the drained worker left: 1 worker" wait_current el_drain 1 15
check_eq "el-drain still RUNNING (not requeued)" "$(printf '%s' "$BODY" | jget state)" RUNNING
check_eq "el-drain: no restart counted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
check "el-drain SUCCEEDED after the drain" wait_state el_drain SUCCEEDED 90
"$KILN" jobs stream-logs el_drain >"$T/el-drain.logs" 2>&1
check "the drain is logged" grep -q "Node $w_node is being drained (maintenance): 1 worker leaves the job" "$T/el-drain.logs"
check "the worker's leaving is logged" grep -q "worker-replica-0 left the job (its node is drained); 1 workers carry on" "$T/el-drain.logs"
check "torchrun re-formed a group of one" grep -q "rank 0 joined a group of 1 at step [1-9][0-9]* (restart [1-9])" "$T/el-drain.logs"
check "it finished in a group of one" grep -q "rank 0 done in a group of 1" "$T/el-drain.logs"
api GET /v1/projects/p1/jobs/el_drain
check_eq "el-drain: restarts still 0" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
api POST "/v1/nodes/$w_node:uncordon" '{}'
check_eq "uncordon" "$STATUS" 200

# a leaving worker that ignores SIGTERM gets SIGKILL after the grace period (1 s)
two_node_job el-stubborn 1 2 '["sh", "-c", "trap \"\" TERM; sleep 10"]'
submit_as_processes "$T/el-stubborn.yaml" >/dev/null 2>&1
check "el-stubborn RUNNING with 2 workers" wait_current el_stubborn 2 20
w_node=$(rep_field worker-replica-0 node)
# the program's pid is in the runtime record once its monitor has reported it
# (0 before: and `kill -0 0` would always succeed below)
w_pid=0
for _ in $(seq 1 100); do
    api GET /v1/projects/p1/jobs/el_stubborn
    w_pid=$(rep_field worker-replica-0 pid)
    [ "${w_pid:-0}" -gt 0 ] 2>/dev/null && break
    sleep 0.1
done
check "the stubborn worker's pid is known" [ "${w_pid:-0}" -gt 0 ]
api POST "/v1/nodes/$w_node:drain" '{}'
check_eq "drain accepted" "$STATUS" 200
check "the stubborn worker was killed within the grace period" wait_current el_stubborn 1 4
# gone soon after: the monitor reads the last output for up to a second
# after its child dies, and a sanitized kilnd is slower to record it
gone() { # gone PID SECONDS
    local i
    for i in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}
check "its process is gone" gone "$w_pid" 5
check_eq "el-stubborn still RUNNING" "$(printf '%s' "$BODY" | jget state)" RUNNING
check "el-stubborn SUCCEEDED" wait_state el_stubborn SUCCEEDED 20
"$KILN" jobs stream-logs el_stubborn >"$T/el-stubborn.logs" 2>&1
check "the SIGKILL is announced" grep -q "SIGKILL after 1000 ms" "$T/el-stubborn.logs"
check "it left with status 137" grep -q "worker-replica-0 left the job (its node is drained)" "$T/el-stubborn.logs"
api POST "/v1/nodes/$w_node:uncordon" '{}'

# min 2: a drain would leave too few workers, so the job is requeued as any job
two_node_job el-min2 2 2 '["sleep", "30"]'
submit_as_processes "$T/el-min2.yaml" >/dev/null 2>&1
check "el-min2 RUNNING with 2 workers" wait_current el_min2 2 20
w_node=$(rep_field worker-replica-0 node)
api POST "/v1/nodes/$w_node:drain" '{}'
check "el-min2 requeued by the drain" wait_state el_min2 QUEUED 10
api GET /v1/projects/p1/jobs/el_min2
check_eq "el-min2: restart counted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 1
check "el-min2: the requeue is logged" grep -q "Replicas stopped for the drain of node $w_node" "$T/n/jobs/p1/el_min2/log.tsv"
api POST "/v1/nodes/$w_node:uncordon" '{}'
check "el-min2 placed again after the uncordon" wait_state el_min2 RUNNING 20
api POST /v1/projects/p1/jobs/el_min2:cancel '{}'
check "el-min2 cancelled" wait_state el_min2 CANCELLED 10

finish
