#!/bin/bash
# tests/service/it_kueue_fair.sh - fair sharing (kilnd --queues, docs/queues.md)
# on simulated GPUs (2 nodes x 2 V100) with a real kilnd: three teams with no
# quota of their own borrow a pool of 4 GPUs, fairSharing weights 1:1:2, each
# with a backlog of 1-GPU jobs. Over a short scripted load (the issue's 10
# minutes cut to WINDOW seconds, default 20) the measured GPU-time shares
# must be within 10% of the weights' (25%, 25%, 50%).
. "$(dirname "$0")/lib.sh"
WINDOW=${WINDOW:-20}

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON
# queues HOLD: the teams' ClusterQueues, held (Hold) or not (None)
queues() {
    local hold=$1 t
    printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: v100\n'
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: pool\nspec:\n  cohort: lab\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 4\n'
    for t in "t1 1" "t2 1" "t3 2"; do
        set -- $t "$hold"
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  cohort: lab\n  namespaceSelector: {}\n  stopPolicy: %s\n  fairSharing:\n    weight: %s\n  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 0\n' "$1" "$3" "$2"
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$1"
    done
}
queues Hold >"$T/queues.yaml"
start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

list_all() { # list_all PROJECT: every job of the project (pages of 100), as {"jobs": [...]}
    local tok="" all="[]"
    while :; do
        api GET "/v1/projects/$1/jobs?pageSize=100${tok:+&pageToken=$tok}"
        all=$(printf '%s\n%s' "$all" "$BODY" | "$PY" -c 'import json, sys
a = json.loads(sys.stdin.readline()); b = json.loads(sys.stdin.read())
print(json.dumps(a + b.get("jobs", [])))')
        tok=$(printf '%s' "$BODY" | "$PY" -c 'import json, sys, urllib.parse
print(urllib.parse.quote(json.load(sys.stdin).get("nextPageToken", ""), safe=""))')
        [ -z "$tok" ] && break
    done
    printf '{"jobs":%s}' "$all"
}
job() { # job ID
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 1"]}}}' "$1"
}
# a backlog that outlasts the window: t3 may run twice as many
n=$((WINDOW + 10))
for i in $(seq 1 $((2 * n))); do
    for t in t1 t2 t3; do
        [ "$t" != t3 ] && [ "$i" -gt "$n" ] && continue
        api POST "/v1/projects/$t/jobs" "$(job "j$i")"
        [ "$STATUS" = 200 ] || fail "submit $t/j$i: $STATUS"
    done
done
api GET /v1/queues/t1
check_eq "held: nothing admitted yet" "$(printf '%s' "$BODY" | jget admittedWorkloads)" 0
# release the hold: the load starts now
queues None >"$T/queues.yaml"
t0=$(date +%s.%N)
kill -HUP "$KPID"
sleep "$WINDOW"
api GET /v1/queues
printf '%s' "$BODY" >"$T/queues.json"
for t in t1 t2 t3; do
    list_all "$t" >"$T/$t.json"
done
out=$("$PY" - "$T" "$t0" "$WINDOW" <<'PY'
import datetime, json, sys
T, t0, w = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def ts(s):
    s = s.rstrip("Z")
    base, _, frac = s.partition(".")
    d = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return d.timestamp() + (float("0." + frac) if frac else 0.0)
use = {}
for t in ("t1", "t2", "t3"):
    s = 0.0
    for j in json.load(open(f"{T}/{t}.json")).get("jobs", []):
        if "startTime" not in j:
            continue
        a = max(ts(j["startTime"]), t0)
        b = min(ts(j["endTime"]) if "endTime" in j else t0 + w, t0 + w)
        s += max(0.0, b - a)
    use[t] = s
tot = sum(use.values()) or 1
want = {"t1": 0.25, "t2": 0.25, "t3": 0.5}
print(" ".join(f"{t}={use[t] / tot:.3f}" for t in use), f"total={tot:.1f}")
ok = all(abs(use[t] / tot - want[t]) <= 0.1 * want[t] for t in use)
sys.exit(0 if ok else 1)
PY
)
rc=$?
echo "  GPU-time shares over ${WINDOW} s: $out (weights 1:1:2)"
check "shares within 10% of 25/25/50 ($out)" test "$rc" = 0
check "the cluster was kept busy (total GPU-seconds > 3 x ${WINDOW})" "$PY" -c "import sys; sys.exit(0 if float('$out'.split('total=')[1]) > 3 * $WINDOW else 1)"
for t in t1 t2 t3; do
    for id in $(list_all "$t" | "$PY" -c 'import json,sys; print(" ".join(j["jobId"] for j in json.load(sys.stdin).get("jobs", []) if j["state"] in ("QUEUED", "PREPARING", "RUNNING")))'); do
        api POST "/v1/projects/$t/jobs/$id:cancel" '{}'
    done
done
finish
