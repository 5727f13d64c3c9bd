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
# on the tainted node. NoExecute: kilnd restarted with a node config that adds
# one evicts the replicas under it that do not tolerate it (the job queued
# again, then FAILED past its backoff limit), after tolerationSeconds those
# that tolerate it for a while, and keeps those (a flavor's tolerations too)
# that tolerate it for good.
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

# gjob ID GPUS [TOLERATIONS_JSON] [SELECTOR_JSON] [,MORE_TRAININGINPUT]: a master
# with GPUS V100s
TOL='[{"key":"gpu","operator":"Equal","value":"reserved","effect":"NoSchedule"}]'
gjob() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_V100"},"tolerations":%s,"nodeSelector":%s,"containerCommand":["sh","-c","sleep 300"]}%s}}' \
        "$1" "$2" "${3:-[]}" "${4:-{\}}" "${5:-}"
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
  - key: maint
    operator: Exists
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

# ---- NoExecute on a restart: the flavor's toleration (kept in the runtime
#      record) keeps o_plain; s_tol, tolerating only NoSchedule, is evicted ----
sed 's/"taints": \[/"taints": [{"key": "maint", "effect": "NoExecute"}, /' "$T/nodes.json" >"$T/nodes-ne.json"
stop_kilnd
start_kilnd "$T/q" --node-config "$T/nodes-ne.json" --queues "$T/queues.yaml"
check "s_tol is evicted and queued again" wait_st team-s s_tol QUEUED 15
check "its log says why" grep -q "The master-replica-0 replica was evicted from node gpu-res: the node has the taint maint:NoExecute, which the replica does not tolerate; the job is queued again" "$T/q/jobs/team-s/s_tol/log.tsv"
sleep 1
check_eq "o_plain stays: its flavor tolerates maint" "$(st team-o o_plain)" RUNNING
api GET /v1/projects/team-o/jobs/o_plain
check_eq "o_plain was not restarted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
stop_kilnd

# ---- NoExecute without queues: evicted at once (ev), after tolerationSeconds
#      (st, backoffLimit 1: queued again once, then FAILED), never (fv) ----
cat >"$T/evict0.json" <<'JSON'
{"nodes": [
  {"name": "gpu-plain", "address": "127.0.0.1", "labels": {"pool": "plain"},
   "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-res", "address": "127.0.0.1", "labels": {"pool": "reserved"},
   "taints": [{"key": "gpu", "value": "reserved", "effect": "NoSchedule"}],
   "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 4}]}
]}
JSON
sed 's/"taints": \[/"taints": [{"key": "maint", "effect": "NoExecute"}, /' "$T/evict0.json" >"$T/evict1.json"
start_kilnd "$T/e" --node-config "$T/evict0.json"
api POST /v1/projects/p1/jobs "$(gjob fill 2)"
check "fill runs" wait_st p1 fill RUNNING
check_eq "fill on gpu-plain" "$(nodes_of p1 fill)" gpu-plain
STOL='[{"key":"gpu","value":"reserved","effect":"NoSchedule"},{"key":"maint","operator":"Exists","effect":"NoExecute","tolerationSeconds":4}]'
FTOL='[{"key":"gpu","value":"reserved","effect":"NoSchedule"},{"key":"maint","operator":"Exists"}]'
api POST /v1/projects/p1/jobs "$(gjob ev 1 "$TOL")"
check_eq "ev accepted" "$STATUS" 200
# st keeps to gpu-res (its selector), so that its second run is there too
api POST /v1/projects/p1/jobs "$(gjob st 1 "$STOL" '{"pool":"reserved"}' ',"runPolicy":{"backoffLimit":1}')"
check_eq "st accepted" "$STATUS" 200
api POST /v1/projects/p1/jobs "$(gjob fv 1 "$FTOL")"
check_eq "fv accepted" "$STATUS" 200
for j in ev st fv; do
    check "$j runs" wait_st p1 $j RUNNING
    check_eq "$j on gpu-res" "$(nodes_of p1 $j)" gpu-res
done
stop_kilnd
t0=$(date +%s)
start_kilnd "$T/e" --node-config "$T/evict1.json"
check "ev is evicted at once and waits (gpu-plain is full)" wait_st p1 ev QUEUED 10
check "ev's log names the node and the taint" grep -q "evicted from node gpu-res: the node has the taint maint:NoExecute" "$T/e/jobs/p1/ev/log.tsv"
check_eq "st still runs: it tolerates the taint for 4 s" "$(st p1 st)" RUNNING
check "st's log says for how long" grep -q "Node gpu-res has the taint maint:NoExecute: the master-replica-0 replica tolerates it for 4s (tolerationSeconds), then the job is evicted" "$T/e/jobs/p1/st/log.tsv"
# ev runs elsewhere once there is room (and no longer holds st's V100s back)
api POST /v1/projects/p1/jobs/fill:cancel '{}'
check "ev runs once gpu-plain is free" wait_st p1 ev RUNNING 15
check_eq "ev on gpu-plain" "$(nodes_of p1 ev)" gpu-plain
check "st, evicted twice (placed on gpu-res again), fails past backoffLimit 1" wait_st p1 st FAILED 30
t1=$(date +%s)
check "that took two tolerationSeconds at least ($((t1 - t0)) s)" test $((t1 - t0)) -ge 8
api GET /v1/projects/p1/jobs/st
check "its error says why ($(printf '%s' "$BODY" | jget errorMessage | head -c 300))" \
    grep -q "its taint maint:NoExecute is tolerated for 4s (tolerationSeconds), and that time is up (runPolicy.backoffLimit reached)" <<<"$BODY"
check_eq "fv stays" "$(st p1 fv)" RUNNING
api GET /v1/projects/p1/jobs/fv
check_eq "fv was not restarted" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 0
api GET /metrics
check "kiln_restarts_total counts the requeues" grep -q 'kiln_restarts_total{reason="taint_eviction"} 2' <<<"$BODY"
check "kiln_job_failures_total counts st" grep -q 'kiln_job_failures_total{reason="taint_eviction"} 1' <<<"$BODY"
for j in ev fv; do api POST "/v1/projects/p1/jobs/$j:cancel" '{}'; done

finish
