#!/bin/bash
# tests/service/it_taints.sh - node taints and pod tolerations (docs/service.md
# "Node taints", docs/queues.md) with a real kilnd on simulated GPUs: two
# nodes of 2 V100s, gpu-res tainted gpu=reserved:NoSchedule. Without queues: a
# job that does not tolerate the taint lands on the untainted node only (and
# waits rather than take gpu-res), a tolerating one may take gpu-res, one
# pinned to gpu-res without the toleration FAILS naming the taint, and the
# tolerations survive a restart of kilnd (the store's JSON). With queues: a
# ResourceFlavor with nodeTaints admits only tolerating jobs (the others wait,
# saying which taint), and a flavor's tolerations let the jobs it admits land
# on the tainted node.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-plain", "address": "127.0.0.1", "labels": {"pool": "plain"},
   "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-res", "address": "127.0.0.1", "labels": {"pool": "reserved"},
   "taints": [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}],
   "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON

# a bad taint stops kilnd at start, naming its path
printf '{"nodes": [{"name": "n", "taints": [{"key": "k", "effect": "Sometimes"}]}]}' >"$T/bad.json"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad" --node-config "$T/bad.json" 2>"$T/bad.err"
check_eq "a bad taint: kilnd does not start" "$?" 1
check "it names the field" grep -q "nodes\[0\].taints\[0\].effect" "$T/bad.err"

# gjob ID GPUS [TOLERATIONS_JSON] [SELECTOR_JSON]: a master with GPUS V100s
TOL='[{"key":"gpu","operator":"Equal","value":"reserved","effect":"NoSchedule"}]'
gjob() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_V100"},"tolerations":%s,"nodeSelector":%s,"containerCommand":["sh","-c","sleep 300"]}}}' \
        "$1" "$2" "${3:-[]}" "${4:-{\}}"
}
st() { # st PROJECT JOB
    api GET "/v1/projects/$1/jobs/$2"
    printf '%s' "$BODY" | jget state
}
wait_st() { # wait_st PROJECT JOB STATE [SECONDS]
    local i s=""
    for i in $(seq 1 $(( ${4:-20} * 20 ))); do
        s=$(st "$1" "$2")
        [ "$s" = "$3" ] && return 0
        sleep 0.05
    done
    echo "  job $1/$2 is '$s', waited for '$3'" >&2
    return 1
}
nodes_of() { # nodes_of PROJECT JOB: the nodes its replicas run on
    api GET "/v1/projects/$1/jobs/$2"
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join(sorted(r.get("node", "") for r in d.get("kilnStatus", {}).get("replicas", []))))'
}
free_on() { # free_on NODE: its V100s not handed out
    api GET "/v1/nodes/$1"
    printf '%s' "$BODY" | jget allocatable.NVIDIA_TESLA_V100
}

start_kilnd "$T/d" --node-config "$T/nodes.json"

api GET /v1/nodes/gpu-res
check_eq "the nodes API shows gpu-res's taint" "$(printf '%s' "$BODY" | jget taints)" \
    '[{"key": "gpu", "effect": "NoSchedule", "value": "reserved"}]'
api GET /v1/nodes/gpu-plain
check_eq "an untainted node lists no taints" "$(printf '%s' "$BODY" | jget taints)" ""
D=$("$KILN" nodes describe gpu-res 2>&1); check "kiln nodes describe shows it ($D)" grep -q reserved <<<"$D"

# untolerating jobs: the untainted node only
for j in u1 u2; do
    api POST /v1/projects/p1/jobs "$(gjob $j 1)"
    check_eq "$j accepted" "$STATUS" 200
    check "$j runs" wait_st p1 $j RUNNING
    check_eq "$j on gpu-plain" "$(nodes_of p1 $j)" gpu-plain
done
# a tolerating job may take gpu-res (gpu-plain is full)
api POST /v1/projects/p1/jobs "$(gjob t1 1 "$TOL")"
check_eq "t1 accepted" "$STATUS" 200
check "t1 runs" wait_st p1 t1 RUNNING
check_eq "t1 on gpu-res" "$(nodes_of p1 t1)" gpu-res
# an untolerating one waits, though gpu-res has a GPU free
api POST /v1/projects/p1/jobs "$(gjob u3 1)"
check_eq "u3 accepted" "$STATUS" 200
sleep 2
check_eq "u3 waits: gpu-plain is full and gpu-res is not for it" "$(st p1 u3)" QUEUED
check_eq "gpu-res still has a GPU free" "$(free_on gpu-res)" 1

# a toleration that does not match (another value) does not do; pinned to
# gpu-res, such a job can never run, and says which taint
api POST /v1/projects/p1/jobs "$(gjob n1 1 '[{"key":"gpu","value":"other"}]' '{"kubernetes.io/hostname":"gpu-res"}')"
if [ "$STATUS" = 200 ]; then
    check "n1 fails" wait_st p1 n1 FAILED
    api GET /v1/projects/p1/jobs/n1
fi
check "n1's error names the taint ($(printf '%s' "$BODY" | head -c 300))" \
    grep -q "taint it does not tolerate (node gpu-res: gpu=reserved:NoSchedule)" <<<"$BODY"

# a toleration Kubernetes would refuse is refused at create, at its path
api POST /v1/projects/p1/jobs "$(gjob b1 1 '[{"operator":"Exists","value":"x"}]')"
check_eq "a toleration with Exists and a value: refused" "$STATUS" 400
check "it names the field" grep -q "masterConfig.tolerations\[0\].value" <<<"$BODY"

# the tolerations are the job's, kept across a restart
for j in u1 u2 u3 t1; do api POST "/v1/projects/p1/jobs/$j:cancel" '{}'; done
for j in u1 u2 u3 t1; do check "$j cancelled" wait_st p1 $j CANCELLED; done
stop_kilnd
start_kilnd "$T/d" --node-config "$T/nodes.json"
api GET /v1/projects/p1/jobs/t1
check_eq "t1's tolerations after a restart" \
    "$(printf '%s' "$BODY" | jget trainingInput.masterConfig.tolerations.0.value)" reserved
stop_kilnd

# ---- queues: a flavor with nodeTaints admits only tolerating jobs; a
#      flavor's tolerations are added to the jobs it admits ----
cat >"$T/queues.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: reserved
spec:
  nodeLabels:
    pool: reserved
  nodeTaints:
  - key: gpu
    value: reserved
    effect: NoSchedule
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: reserved-open
spec:
  nodeLabels:
    pool: reserved
  tolerations:
  - key: gpu
    operator: Exists
    effect: NoSchedule
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: selective
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: reserved
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 1
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: open
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: reserved-open
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 1
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: team-s
  name: default
spec:
  clusterQueue: selective
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: team-o
  name: default
spec:
  clusterQueue: open
YAML
start_kilnd "$T/q" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

api POST /v1/projects/team-s/jobs "$(gjob s_plain 1)"
check_eq "s_plain accepted" "$STATUS" 200
sleep 2
check_eq "s_plain is not admitted: it does not tolerate the flavor's taint" "$(st team-s s_plain)" QUEUED
api GET /v1/projects/team-s/jobs/s_plain
reason=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
check "its reason names the taint and the flavor ($reason)" \
    grep -q "untolerated taint gpu=reserved:NoSchedule in flavor reserved" <<<"$reason"
api POST /v1/projects/team-s/jobs "$(gjob s_tol 1 "$TOL")"
check_eq "s_tol accepted" "$STATUS" 200
check "s_tol (tolerating) is admitted and runs" wait_st team-s s_tol RUNNING
check_eq "s_tol on the flavor's node" "$(nodes_of team-s s_tol)" gpu-res
check_eq "s_plain still waits" "$(st team-s s_plain)" QUEUED

# the open flavor's toleration is added: an untolerating job lands on gpu-res
api POST /v1/projects/team-o/jobs "$(gjob o_plain 1)"
check_eq "o_plain accepted" "$STATUS" 200
check "o_plain is admitted and runs" wait_st team-o o_plain RUNNING
check_eq "o_plain on gpu-res, by its flavor's toleration" "$(nodes_of team-o o_plain)" gpu-res

finish
