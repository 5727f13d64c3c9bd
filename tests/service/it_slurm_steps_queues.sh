#!/bin/bash
# tests/service/it_slurm_steps_queues.sh - kilnd --executor slurm
# --slurm-launch steps --queues FILE: kiln's own admission (Kueue's
# ClusterQueue quota, as on one machine) decides what runs, Slurm places
# what was admitted, on the two-node test cluster (n1, n2: 2 fake T4 each).
# A ClusterQueue of 2 GPUs (LocalQueue p1/training, preemption within it of
# lower priorities), 1-GPU jobs:
#   - three jobs: two run, the third waits for quota with kiln's reason and
#     nothing asked of Slurm; it starts when one ends;
#   - the cluster taken by a Slurm job of its own: three jobs, the first two
#     admitted (their quota held while Slurm keeps their allocations
#     pending: kilnStatus.queue says so), the third waits for quota, not for
#     Slurm; one cancelled while pending gives its quota and allocation back
#     at once, the third admitted in its place; at no time more than 2
#     allocations of the queue pending or running in Slurm, nor more than 2
#     running, and the two finish once the blocker is gone;
#   - preemption: a high-priority job preempts a low one whose allocation
#     is still pending (cancelled at once, the quota given back, it waits
#     again), then one that runs (stopped, queued again);
#   - tuning: with the cluster taken, a trial's allocation pending in Slurm
#     holds its GPU (a plain job is admitted beside it, the next waits for
#     quota); never more than 2 allocations at once; all SUCCEEDED.
#   - a flavor's nodeLabels: one Slurm has no meaning for stops kilnd's start,
#     named; kubernetes.io/hostname pins what the flavor admits to its node.
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=18000-18799 # the cluster's own daemons listen on 18900-18992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod # the cluster's fake GPUs are device nodes
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 18900 18992

cat >"$T/queues.yaml" <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: t4
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq-a
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: t4
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 2
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: p1
  name: training
spec:
  clusterQueue: cq-a
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata:
  name: low
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata:
  name: high
value: 1000
YAML
KILND_STEPS=(--executor slurm --slurm-launch steps --slurm-partition kiln
    --slurm-gpu-type NVIDIA_TESLA_T4=t4 --kiln-train "$BUILD/bin/kiln-train")

# a flavor with nodeLabels means nothing to a Slurm partition's nodes: refused at start
sed 's/^  name: t4$/  name: t4\nspec:\n  nodeLabels:\n    gpu: t4/' "$T/queues.yaml" >"$T/labels.yaml"
root_ok=()
[ "$(id -u)" = 0 ] && root_ok=(--allow-root-replicas yes)
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/refused" "${root_ok[@]}" "${KILND_STEPS[@]}" \
    --queues "$T/labels.yaml" >"$T/refused.out" 2>&1
check_eq "a flavor's nodeLabels under steps: kilnd refuses to start" "$?" 1
check "naming the field" grep -q 'spec.nodeLabels.gpu' "$T/refused.out"

start_kilnd "$T/d" "${KILND_STEPS[@]}" --queues "$T/queues.yaml"

q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# gjob JOB PRIORITY-CLASS: one T4, LocalQueue training; runs until $T/go-JOB
gjob() {
    local pc=""
    [ -n "${2:-}" ] && pc=",\"kueue.x-k8s.io/priority-class\":\"$2\""
    printf '{"jobId":"%s","labels":{"kueue.x-k8s.io/queue-name":"training"%s},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]}}}' \
        "$1" "$pc" "$(q "echo \"up \$SLURM_JOB_ID\"; while [ ! -e $T/go-$1 ]; do sleep 0.2; done; echo done")"
}
# live NAME: Slurm jobs of that name pending or running
live() { squeue -h -n "$1" -t PENDING,CONFIGURING,RUNNING -o %i 2>/dev/null | sort -u | wc -l; }
reason() { # reason JOB: kilnStatus.queue.reason
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.queue.reason
}
wait_reason() { # wait_reason JOB PATTERN [SECONDS]
    local r=""
    for _ in $(seq 1 $((${3:-20} * 5))); do
        r=$(reason "$1")
        grep -q -- "$2" <<<"$r" && return 0
        sleep 0.2
    done
    echo "  $1's reason is '$r', waited for '$2'" >&2
    return 1
}
queue_counts() { # usage admitted pending of cq-a
    api GET /v1/queues/cq-a
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
c = json.load(sys.stdin)
print(c["resourceGroups"][0]["flavors"][0]["resources"][0]["usage"], c["admittedWorkloads"], c["pendingWorkloads"])'
}
wait_gone() { # wait_gone NAME [SECONDS]
    for _ in $(seq 1 $((${2:-10} * 5))); do
        [ "$(live "$1")" = 0 ] && return 0
        sleep 0.2
    done
    return 1
}

# ---- quota: two run, the third waits for kiln's quota ----
for j in q1 q2 q3; do
    api POST /v1/projects/p1/jobs "$(gjob $j)"
    check_eq "$j created" "$STATUS" 200
    [ $j = q2 ] && { check "q1 RUNNING" wait_state q1 RUNNING 60; check "q2 RUNNING" wait_state q2 RUNNING 60; }
done
sleep 2
check_eq "q3 waits" "$(job_state q3)" QUEUED
r=$(reason q3)
check "q3 waits for ClusterQueue cq-a's quota ($r)" grep -q 'ClusterQueue cq-a: .*nvidia.com/gpu' <<<"$r"
check "not for Slurm" test -z "$(grep 'waiting for Slurm' <<<"$r")"
check_eq "nothing asked of Slurm for q3" "$(live kiln-p1-q3)" 0
check_eq "GET /v1/queues/cq-a: 2 GPUs used, 2 admitted, 1 pending" "$(queue_counts)" "2 2 1"
touch "$T/go-q1"
check "q1 SUCCEEDED" wait_state q1 SUCCEEDED 30
check "q3 starts when q1 ends" wait_state q3 RUNNING 60
touch "$T/go-q2" "$T/go-q3"
check "q2 SUCCEEDED" wait_state q2 SUCCEEDED 30
check "q3 SUCCEEDED" wait_state q3 SUCCEEDED 30

# ---- Slurm busy: admitted jobs hold their quota while Slurm keeps them pending ----
blocker=$(sbatch --parsable -p kiln -N2 --exclusive -o /dev/null --wrap 'sleep 300')
for _ in $(seq 1 50); do [ "$(squeue -h -j "$blocker" -o %T)" = RUNNING ] && break; sleep 0.2; done
check_eq "the blocker runs on both nodes" "$(squeue -h -j "$blocker" -o %T)" RUNNING
# the sampler: the queue's allocations pending or running in Slurm, and
# those running; kilnd's jobs RUNNING
: >"$T/samples"
(
    while [ ! -e "$T/stop-sampling" ]; do
        a=$(squeue -h -t PENDING,CONFIGURING,RUNNING -o '%j' 2>/dev/null | grep -c '^kiln-p1-o[123]$')
        r=$(squeue -h -t RUNNING -o '%j' 2>/dev/null | grep -c '^kiln-p1-o[123]$')
        echo "$a $r" >>"$T/samples"
        sleep 0.1
    done
) &
SAMPLER=$!
for j in o1 o2 o3; do
    api POST /v1/projects/p1/jobs "$(gjob $j)"
    check_eq "$j created" "$STATUS" 200
done
check "o1 admitted, waiting for Slurm" wait_reason o1 'admitted by ClusterQueue cq-a (flavor t4); waiting for Slurm: allocation [0-9]* is pending' 30
check "o2 admitted, waiting for Slurm" wait_reason o2 'admitted by ClusterQueue cq-a (flavor t4); waiting for Slurm: allocation [0-9]* is pending' 30
sleep 2 # passes go on (every 0.5 s squeue is read again)
r=$(reason o3)
check "o3 waits for quota ($r)" grep -q 'ClusterQueue cq-a: .*nvidia.com/gpu' <<<"$r"
check "not for Slurm" test -z "$(grep 'waiting for Slurm' <<<"$r")"
check_eq "o1's allocation pending in Slurm" "$(squeue -h -n kiln-p1-o1 -o %T | head -1)" PENDING
check_eq "o2's allocation pending in Slurm" "$(squeue -h -n kiln-p1-o2 -o %T | head -1)" PENDING
check_eq "nothing asked of Slurm for o3" "$(live kiln-p1-o3)" 0
check_eq "GET /v1/queues/cq-a: 2 GPUs charged, 2 admitted, 1 pending" "$(queue_counts)" "2 2 1"
api GET /v1/projects/p1/jobs/o1
check_eq "o1 is QUEUED" "$(printf '%s' "$BODY" | jget state)" QUEUED
# cancelled while its allocation is pending: the quota and the allocation go back
api POST /v1/projects/p1/jobs/o2:cancel '{}'
check "o2 CANCELLED" wait_state o2 CANCELLED 30
check "o2's pending allocation cancelled within 2 s" wait_gone kiln-p1-o2 2
check "o3 admitted in its place, waiting for Slurm" wait_reason o3 'admitted by ClusterQueue cq-a (flavor t4); waiting for Slurm' 10
scancel "$blocker"
check "o1 RUNNING" wait_state o1 RUNNING 60
check "o3 RUNNING" wait_state o3 RUNNING 60
for j in o1 o3; do
    touch "$T/go-$j"
    check "$j SUCCEEDED" wait_state $j SUCCEEDED 60
done
touch "$T/stop-sampling"
wait "$SAMPLER" 2>/dev/null
read -r most_alloc most_run < <(awk 'BEGIN{a=0;r=0} {if($1>a)a=$1; if($2>r)r=$2} END{print a, r}' "$T/samples")
check_eq "at most 2 of the queue's allocations pending or running in Slurm at once ($(wc -l <"$T/samples") samples)" "$most_alloc" 2
check_eq "at most 2 running at once" "$most_run" 2
check_eq "o3 ran in one allocation" "$(ls "$T/d/jobs/p1/o3/slurm/kiln-p1-o3"/layout.* 2>/dev/null | wc -l)" 1

# ---- preemption: of a job whose allocation is pending, then of a running one ----
blocker=$(sbatch --parsable -p kiln -N2 --exclusive -o /dev/null --wrap 'sleep 300')
for _ in $(seq 1 50); do [ "$(squeue -h -j "$blocker" -o %T)" = RUNNING ] && break; sleep 0.2; done
api POST /v1/projects/p1/jobs "$(gjob low1 low)"
check "low1 admitted, waiting for Slurm" wait_reason low1 'waiting for Slurm' 30
api POST /v1/projects/p1/jobs "$(gjob low2 low)"
check "low2 admitted, waiting for Slurm" wait_reason low2 'waiting for Slurm' 30
api POST /v1/projects/p1/jobs "$(gjob high1 high)"
check "high1 admitted in low2's place" wait_reason high1 'admitted by ClusterQueue cq-a' 30
api GET "/v1/projects/p1/jobs/low2:logs"
check "low2's log: preempted while pending" grep -q 'Preempted: preempted while its Slurm allocation was pending, to accommodate p1/high1' <<<"$BODY"
r=$(reason low2)
check "low2 waits for quota again ($r)" grep -q 'ClusterQueue cq-a: .*nvidia.com/gpu' <<<"$r"
check "low2's allocation cancelled" wait_gone kiln-p1-low2 10
check_eq "low1 still admitted" "$(reason low1 | grep -c 'waiting for Slurm')" 1
check_eq "GET /v1/queues/cq-a: 2 GPUs charged, 2 admitted, 1 pending" "$(queue_counts)" "2 2 1"
scancel "$blocker"
check "low1 RUNNING" wait_state low1 RUNNING 60
check "high1 RUNNING" wait_state high1 RUNNING 60
check_eq "low2 still waits" "$(job_state low2)" QUEUED
api POST /v1/projects/p1/jobs "$(gjob high2 high)"
check "high2 RUNNING, low1 preempted" wait_state high2 RUNNING 60
check "low1 queued again" wait_state low1 QUEUED 30
touch "$T/go-high1" "$T/go-high2" "$T/go-low1" "$T/go-low2"
for j in high1 high2 low1 low2; do
    check "$j SUCCEEDED" wait_state $j SUCCEEDED 60
done
check_eq "low2 ran in one allocation (the cancelled one wrote no layout)" \
    "$(ls "$T/d/jobs/p1/low2/slurm/kiln-p1-low2"/layout.* 2>/dev/null | wc -l)" 1
check "no allocation of kiln's left in Slurm" wait_gone kiln-p1-low1 10

# ---- tuning: each trial a workload of its own, charged while its allocation is pending ----
blocker=$(sbatch --parsable -p kiln -N2 --exclusive -o /dev/null --wrap 'sleep 300')
for _ in $(seq 1 50); do [ "$(squeue -h -j "$blocker" -o %T)" = RUNNING ] && break; sleep 0.2; done
: >"$T/tsamples"
(
    while [ ! -e "$T/stop-tsampling" ]; do
        squeue -h -t PENDING,CONFIGURING,RUNNING -o '%j' 2>/dev/null | grep -c '^kiln-p1-\(tq1-t[0-9]*\|pa\|pb\)$' >>"$T/tsamples"
        sleep 0.1
    done
) &
SAMPLER=$!
cmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"3\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "trial $CLOUD_ML_TRIAL_ID in $SLURM_JOB_ID"; sleep 1'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":3,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"tq1","labels":{"kueue.x-k8s.io/queue-name":"training"},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]}%s}}' "$(q "$cmd")" "$hp")"
check_eq "tq1 created" "$STATUS" 200
for _ in $(seq 1 50); do [ "$(live kiln-p1-tq1-t1)" = 1 ] && break; sleep 0.2; done
check_eq "its first trial's allocation pending in Slurm" "$(squeue -h -n kiln-p1-tq1-t1 -o %T | head -1)" PENDING
api GET /v1/projects/p1/jobs/tq1
check "the trial: admitted, waiting for Slurm" grep -q 'admitted by ClusterQueue cq-a (flavor t4); waiting for Slurm: allocation' <<<"$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)"
for j in pa pb; do
    api POST /v1/projects/p1/jobs "$(gjob $j)"
    check_eq "$j created" "$STATUS" 200
done
check "pa admitted, waiting for Slurm" wait_reason pa 'waiting for Slurm' 30
sleep 2
r=$(reason pb)
check "pb waits for quota: the pending trial holds its GPU ($r)" grep -q 'ClusterQueue cq-a: .*nvidia.com/gpu' <<<"$r"
check_eq "nothing asked of Slurm for pb" "$(live kiln-p1-pb)" 0
check_eq "GET /v1/queues/cq-a: 2 GPUs charged" "$(queue_counts | cut -d' ' -f1)" 2
scancel "$blocker"
touch "$T/go-pa" "$T/go-pb"
for _ in $(seq 1 600); do
    case "$(job_state tq1)" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 0.1
done
check_eq "tq1 SUCCEEDED" "$(job_state tq1)" SUCCEEDED
check "pa SUCCEEDED" wait_state pa SUCCEEDED 60
check "pb SUCCEEDED" wait_state pb SUCCEEDED 60
touch "$T/stop-tsampling"
wait "$SAMPLER" 2>/dev/null
check_eq "never more than 2 of the trials' and pa/pb's allocations at once ($(wc -l <"$T/tsamples") samples)" "$(sort -n "$T/tsamples" | tail -1)" 2
api GET /v1/projects/p1/jobs/tq1
check_eq "3 trials reported" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["trainingOutput"]["trials"]))')" 3

# a flavor whose nodeLabels name a node pins what it admits there (a label
# Slurm has no meaning for is refused at start, above)
stop_kilnd
sed 's/^  name: t4$/  name: t4\nspec:\n  nodeLabels:\n    kubernetes.io\/hostname: n2/' "$T/queues.yaml" >"$T/pinned.yaml"
start_kilnd "$T/d2" "${KILND_STEPS[@]}" --queues "$T/pinned.yaml"
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"pin1","labels":{"kueue.x-k8s.io/queue-name":"training"},"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c","echo \\"on $SLURMD_NODENAME\\""]}}}')"
check_eq "pin1 created (a flavor pinned to n2)" "$STATUS" 200
check "pin1 SUCCEEDED" wait_state pin1 SUCCEEDED 60
check "it ran on the flavor's node n2" grep -q 'on n2' "$T/d2/jobs/p1/pin1/log.tsv"

finish
