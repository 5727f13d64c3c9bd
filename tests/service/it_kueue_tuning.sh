#!/bin/bash
# tests/service/it_kueue_tuning.sh - a tuning job under kilnd --queues
# (docs/queues.md): each trial is its own workload, admitted against its
# job's ClusterQueue quota. Simulated GPUs (1 node x 2 V100), a ClusterQueue
# with a nominal quota of 1 GPU and no cohort (nothing to borrow); a study
# of 3 trials, 2 at once, 1 GPU each: the devices could hold 2 trials, the
# quota holds 1, so never more than 1 trial runs; every trial ends, the job
# SUCCEEDED. Then a plain 1-GPU job of the same queue, submitted while a
# trial holds the quota, waits for it (kilnStatus.queue says why). While
# the study's second trial waits for the quota, the tuning job (RUNNING)
# says why in its kilnStatus.queue and kiln jobs describe shows it.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON
cat >"$T/queues.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: v100
spec:
  nodeLabels:
    cloud.google.com/gke-accelerator: nvidia-tesla-v100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: tune
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: v100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 1
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: team-t
  name: default
spec:
  clusterQueue: tune
YAML

start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

# each trial appends its start and end (ns) to one trace, and reports a loss;
# it runs 3 s: each look of the loop below is several requests and Python
# starts, and on a loaded machine a shorter trial ended between two looks
trace="$T/trace"
cmd='lr=${0#--lr=}; echo "start $(date +%s%N) $CLOUD_ML_TRIAL_ID" >>'"$trace"'; sleep 3; echo "{\"loss\": $lr, \"global_step\": \"3\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "end $(date +%s%N) $CLOUD_ML_TRIAL_ID" >>'"$trace"
cmdj=$(printf '%s' "$cmd" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
hp='"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":3,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
tjob='{"jobId":"study1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c",'"$cmdj"']},'"$hp"'}}'

nodes_held() { # GPUs the scheduler has handed out, at one instant
    api GET /v1/nodes
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(n["capacity"].get("NVIDIA_TESLA_V100", 0) - n["allocatable"].get("NVIDIA_TESLA_V100", 0)
          for n in d["nodes"]))'
}
state() {
    api GET "/v1/projects/team-t/jobs/$1"
    printf '%s' "$BODY" | jget state
}

api POST /v1/projects/team-t/jobs "$tjob"
check_eq "a tuning job under --queues: created (no longer refused)" "$STATUS" 200
[ "$STATUS" = 200 ] || { echo "$BODY" >&2; finish; }

# while the study runs: GPUs held sampled every 0.1 s; a plain job submitted
# once a trial runs waits for the quota the trial holds
max=0 s="" plain=0 why="" twhy="" tdesc="" lastq=""
for i in $(seq 1 300); do
    h=$(nodes_held)
    [ "$h" -gt "$max" ] && max=$h
    if [ "$plain" = 0 ] && [ -s "$trace" ]; then
        api POST /v1/projects/team-t/jobs '{"jobId":"plain1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","sleep 0.5"]}}}'
        check_eq "a plain job of the same queue: created" "$STATUS" 200
        plain=1
    fi
    if [ "$plain" = 1 ] && [ -z "$why" ]; then
        api GET /v1/projects/team-t/jobs/plain1
        why=$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], j.get("kilnStatus",{}).get("queue",{}).get("reason",""))' 2>/dev/null)
        case "$why" in "QUEUED ClusterQueue tune"*) ;; *) why="" ;; esac
    fi
    if [ -z "$twhy" ] && [ -s "$trace" ]; then
        api GET /v1/projects/team-t/jobs/study1
        twhy=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
q = j.get("kilnStatus", {}).get("queue", {})
if j["state"] == "RUNNING" and q.get("waitingFor") == "nextTrial":
    print(q.get("localQueue"), q.get("clusterQueue"), q.get("reason"))' 2>/dev/null)
    fi
    if [ -z "$tdesc" ] && [ -s "$trace" ]; then
        KILN_PROJECT=team-t "$KILN" jobs describe study1 >"$T/desc" 2>&1
        grep -q "waitingFor: nextTrial" "$T/desc" && grep -q "reason: .*ClusterQueue tune: nvidia.com/gpu of flavor v100" "$T/desc" && tdesc=1
    fi
    # the last trial runs: no next trial, so none waits
    if [ -z "$lastq" ] && [ "$(grep -c '^start' "$trace" 2>/dev/null)" = 3 ]; then
        api GET /v1/projects/team-t/jobs/study1
        lastq=$(printf '%s' "$BODY" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
if j["state"] == "RUNNING":
    print(j.get("kilnStatus", {}).get("queue"))' 2>/dev/null)
    fi
    s=$(state study1)
    case "$s" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 0.1
done
check_eq "the study SUCCEEDED" "$s" SUCCEEDED
check_eq "while the last trial ran, no trial was said to wait" "$lastq" None
echo "  while its next trial waited: $twhy"
check "while its next trial waited, the RUNNING job said why ($twhy)" \
    grep -q "^default tune ClusterQueue tune: nvidia.com/gpu of flavor v100: asks 1" <<<"$twhy"
check "kiln jobs describe showed it" test -n "$tdesc"
api GET /v1/projects/team-t/jobs/study1
check_eq "once the study ended, no waiting reason" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(json.load(sys.stdin).get("kilnStatus",{}).get("queue"))')" None
check_eq "never more than 1 GPU held (the quota), though 2 trials could run at once" "$max" 1
check "the plain job waited for the quota a trial held ($why)" test -n "$why"
for i in $(seq 1 200); do
    s=$(state plain1)
    case "$s" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 0.1
done
check_eq "the plain job ends SUCCEEDED" "$s" SUCCEEDED

out=$("$PY" - "$trace" <<'PY'
import sys
ev = []
for line in open(sys.argv[1]):
    k, t, trial = line.split()
    ev.append((int(t), 1 if k == "start" else -1, trial))
ev.sort()
cur = top = 0
for _, d, _ in ev:
    cur += d
    top = max(top, cur)
starts = sorted(t for _, d, t in ev if d == 1)
ends = sorted(t for _, d, t in ev if d == -1)
print(top, starts, ends)
PY
)
check_eq "trials ran one at a time; all 3 started and ended" "$out" "1 ['1', '2', '3'] ['1', '2', '3']"
api GET /v1/projects/team-t/jobs/study1
check_eq "3 trials, each SUCCEEDED" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(sorted((x["trialId"], x["state"]) for x in json.load(sys.stdin)["trainingOutput"]["trials"]))')" \
    "[('1', 'SUCCEEDED'), ('2', 'SUCCEEDED'), ('3', 'SUCCEEDED')]"
finish
