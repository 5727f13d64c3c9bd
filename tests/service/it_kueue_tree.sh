#!/bin/bash
# tests/service/it_kueue_tree.sh - hierarchical cohorts (docs/queues.md) on a
# live kilnd with simulated GPUs (2 nodes x 4 V100 = 8): Cohort org over
# Cohorts team-x and team-y over ClusterQueues x1, x2 (team-x) and y1, y2
# (team-y), 2 GPUs each, reclaimWithinCohort Any. x1 borrows along the tree
# until it holds all 8 (x2's through team-x, team-y's through org); x2's and
# then y1's jobs, each within its own quota, reclaim 2 each from x1 (its
# newest jobs preempted, queued again). Sampled throughout: never more GPUs held than
# exist; nothing lost (every job RUNNING or QUEUED, then CANCELLED). x2's
# job reclaims x2's lent 2 within team-x first, then y1's across org.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 4}]},
  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 4}]}
]}
JSON
{
    printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: v100\n'
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: org\n'
    for t in team-x team-y; do
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata:\n  name: %s\nspec:\n  parentName: org\n' "$t"
    done
    for c in "x1 team-x" "x2 team-x" "y1 team-y" "y2 team-y"; do
        set -- $c
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  cohortName: %s\n  namespaceSelector: {}\n  preemption:\n    reclaimWithinCohort: Any\n  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 2\n' "$1" "$2"
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$1"
    done
} >"$T/queues.yaml"
start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

gjob() { # gjob ID: 2 V100 for two minutes
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"2","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 120"]}}}' "$1"
}
st() { api GET "/v1/projects/$1/jobs/$2"; printf '%s' "$BODY" | jget state; }
wait_st() { # wait_st PROJECT JOB STATE [SECONDS]
    local i
    for i in $(seq 1 $(( ${4:-20} * 10 ))); do
        [ "$(st "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
    done
    echo "  $1/$2 is '$(st "$1" "$2")', waited for '$3'" >&2
    return 1
}
nodes_held() {
    api GET /v1/nodes
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(n["capacity"].get("NVIDIA_TESLA_V100", 0) - n["allocatable"].get("NVIDIA_TESLA_V100", 0)
          for n in d["nodes"]))'
}
( while [ ! -e "$T/stop-sampling" ]; do nodes_held >>"$T/held"; sleep 0.1; done ) &
SAMPLER=$!

for j in j1 j2 j3 j4; do
    api POST /v1/projects/x1/jobs "$(gjob $j)"
    check_eq "x1/$j accepted" "$STATUS" 200
    check "x1/$j runs (borrowing along the tree)" wait_st x1 $j RUNNING 15
    sleep 0.3 # distinct creation times: j4 is the newest
done
api GET /v1/queues/x1
check_eq "x1 holds 8 GPUs, 6 borrowed" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); f=d["resourceGroups"][0]["flavors"][0]["resources"][0]; print(f["usage"], f["borrowed"])')" "8 6"
# x2 asks its own 2 (lent to x1 within team-x): reclaimed from x1's newest
api GET /v1/queues
check_eq "GET /v1/queues: the cohort tree (parents; org: quota 8, all 8 drawn, all by team-x)" "$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = {c["name"]: c for c in json.load(sys.stdin)["cohorts"]}
r = lambda c: (c["resources"] or [{"subtreeQuota": "0", "usage": "0"}])[0]
print(d["team-x"]["parentName"], d["team-y"]["parentName"], "parentName" in d["org"],
      r(d["org"])["subtreeQuota"], r(d["org"])["usage"], r(d["team-x"])["usage"], r(d["team-y"])["usage"])')" "org org False 8 8 8 0"
api POST /v1/projects/x2/jobs "$(gjob k1)"
check "x2/k1 runs once x1's newest borrower stopped (reclaim within team-x)" wait_st x2 k1 RUNNING 20
api GET /v1/projects/x1/jobs/j4
check_eq "x1/j4 (the newest) is queued again" "$(printf '%s' "$BODY" | jget state)" QUEUED
check_eq "its condition: InCohortReclamation" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.reason)" InCohortReclamation
# y1 asks its own 2 (lent through team-y and org): reclaimed across the tree
api POST /v1/projects/y1/jobs "$(gjob m1)"
check "y1/m1 runs once x1's next borrower stopped (reclaim across org)" wait_st y1 m1 RUNNING 20
api GET /v1/projects/x1/jobs/j3
check_eq "x1/j3 is queued again" "$(printf '%s' "$BODY" | jget state)" QUEUED
check "naming y1's job" grep -q "y1/m1" <<<"$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.message)"
for j in j1 j2; do check_eq "x1/$j kept running" "$(st x1 $j)" RUNNING; done
api GET /v1/queues/x1
check_eq "x1 holds 4 GPUs now, 2 borrowed" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); f=d["resourceGroups"][0]["flavors"][0]["resources"][0]; print(f["usage"], f["borrowed"])')" "4 2"
touch "$T/stop-sampling"
wait "$SAMPLER"
max=$(sort -n "$T/held" | tail -1)
echo "  GPUs held, $(wc -l <"$T/held") samples: at most $max of 8"
check "never more GPUs held than exist" test "$max" -le 8
check "all 8 were used" test "$max" -eq 8

# nothing lost: every job there, then cancelled
for pj in "x1 j1" "x1 j2" "x1 j3" "x1 j4" "x2 k1" "y1 m1"; do
    set -- $pj
    api POST "/v1/projects/$1/jobs/$2:cancel" '{}'
done
for pj in "x1 j1" "x1 j2" "x1 j3" "x1 j4" "x2 k1" "y1 m1"; do
    set -- $pj
    check "$1/$2 cancelled" wait_st "$1" "$2" CANCELLED 20
done
finish
