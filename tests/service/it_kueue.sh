#!/bin/bash
# tests/service/it_kueue.sh - Kueue's admission (kilnd --queues, docs/queues.md)
# on simulated GPUs (2 nodes x 2 V100) with a real kilnd: two teams'
# ClusterQueues of 2 GPUs each in one cohort (examples/queues/two-teams.yaml).
# Jobs are routed by label or the project's default LocalQueue, refused at
# submit when they route nowhere; team A borrows team B's idle GPUs; a
# waiting job says why (kilnStatus.queue); jobs that need not borrow are
# admitted before borrowers; SIGHUP reloads the file, a bad one is kept out;
# team B reclaims its GPUs by preemption within a pass plus the grace period,
# A's preempted job resumes from its checkpoint; a kill -9 of kilnd while
# B reclaims loses and double-runs nothing; never more than 4 GPUs held;
# borrowWithinCohort: a higher-priority job of a queue with no quota of its
# own preempts another queue's lower-priority borrower (not when only
# reclaimWithinCohort is set, not above maxPriorityThreshold), and no loop;
# stopPolicy HoldAndDrain on SIGHUP evicts a queue's running job, holds it,
# and lifted lets it resume;
# StrictFIFO holds back a job that BestEffortFIFO lets past its head.
. "$(dirname "$0")/lib.sh"

cat >"$T/nodes.json" <<'JSON'
{"nodes": [
  {"name": "gpu-a", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]},
  {"name": "gpu-b", "address": "127.0.0.1", "accelerators": [{"type": "NVIDIA_TESLA_V100", "count": 2}]}
]}
JSON
cp "$(dirname "$0")/../../examples/queues/two-teams.yaml" "$T/queues.yaml"

# a bad queues file stops kilnd at start, naming the field
printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: x\nspec:\n  admissionChecks: [a]\n' >"$T/bad.yaml"
"$KILND" --listen 127.0.0.1:0 --data-dir "$T/bad" --queues "$T/bad.yaml" 2>"$T/bad.err"
check_eq "a bad queues file: kilnd does not start" "$?" 1
check "it names the field" grep -q "ClusterQueue x: spec.admissionChecks" "$T/bad.err"

start_kilnd "$T/d" --node-config "$T/nodes.json" --queues "$T/queues.yaml"

# gjob ID GPUS [LABELS_JSON] [CMD]: a master with GPUS V100s
gjob() {
    printf '{"jobId":"%s","labels":%s,"trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_V100"},"containerCommand":["sh","-c","%s"]}}}' \
        "$1" "${3:-{\}}" "$2" "${4:-sleep 60}"
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
held_gpus() { # GPUs held by running replicas, over both projects
    local n=0 p j
    for p in team-a team-b; do
        api GET "/v1/projects/$p/jobs"
        n=$((n + $(printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(len(r.get("gpus", [])) for j in d.get("jobs", []) if j["state"] in ("PREPARING", "RUNNING")
          for r in j.get("kilnStatus", {}).get("replicas", [])))')))
    done
    echo "$n"
}
nodes_held() { # GPUs the scheduler has handed out, all nodes at one instant
    api GET /v1/nodes
    printf '%s' "$BODY" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(n["capacity"].get("NVIDIA_TESLA_V100", 0) - n["allocatable"].get("NVIDIA_TESLA_V100", 0)
          for n in d["nodes"]))'
}
B='{"kueue.x-k8s.io/queue-name":"training"}'

# routing refusals, at submit
api POST /v1/projects/team-b/jobs "$(gjob nolabel 1)"
check_eq "team-b without a queue label: refused" "$STATUS" 400
check "it says there is no default LocalQueue" grep -q "no LocalQueue named 'default'" <<<"$BODY"
api POST /v1/projects/team-a/jobs "$(gjob wrongns 1 "$B")"
check_eq "a LocalQueue of another project: refused" "$STATUS" 400
check "it says so" grep -q "another project" <<<"$BODY"
api POST /v1/projects/team-a/jobs "$(gjob toobig 8)"
check_eq "more GPUs than the queue can ever hold: refused" "$STATUS" 400
check "it names the limit" grep -q "can never hold more than 4" <<<"$BODY"
# a tuning job is admitted trial by trial (it_kueue_tuning.sh): one whose
# trial asks more than the queue could ever hold is refused as a job is
api POST /v1/projects/team-a/jobs '{"jobId":"tune","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"8","type":"NVIDIA_TESLA_V100"},"containerCommand":["true"]},"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"acc","maxTrials":"2","params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.01,"maxValue":0.1}]}}}'
check_eq "a tuning job whose trial the queue can never hold: refused" "$STATUS" 400
check "it names the limit" grep -q "can never hold more than 4" <<<"$BODY"
api POST /v1/projects/team-a/jobs "$(gjob badpc 1 '{"kueue.x-k8s.io/priority-class":"nope"}')"
check_eq "an unknown WorkloadPriorityClass: refused" "$STATUS" 400

# team A: 2 GPUs of its own, then 2 borrowed from team B's idle quota
api POST /v1/projects/team-a/jobs "$(gjob a1 2)"
check_eq "a1 accepted (the project's default LocalQueue)" "$STATUS" 200
check "the audit line of the create names the new job" \
    grep -q '"requestURI":"/v1/projects/team-a/jobs".*"objectRef":{"resource":"jobs","namespace":"team-a","name":"a1"}' "$T/d/audit.log"
check "a1 runs" wait_st team-a a1 RUNNING 10
api POST /v1/projects/team-a/jobs "$(gjob a2 2)"
check "a2 runs, borrowing" wait_st team-a a2 RUNNING 10
api GET "/v1/projects/team-a/jobs/a2:logs"
check "a2's log says it borrowed" grep -q "Admitted by ClusterQueue team-a (LocalQueue default, flavor v100, borrowing from cohort lab)" <<<"$BODY"
api GET "/v1/projects/team-a/jobs/a1:logs"
check "a1's log says it did not" grep -q "Admitted by ClusterQueue team-a (LocalQueue default, flavor v100)" <<<"$BODY"
check_eq "4 GPUs held" "$(held_gpus)" 4

# a3 waits: the cohort has nothing left to lend; it says why and where it stands
api POST /v1/projects/team-a/jobs "$(gjob a3 2)"
sleep 0.5
check_eq "a3 queued" "$(st team-a a3)" QUEUED
api GET /v1/projects/team-a/jobs/a3
reason=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
check "a3's reason names the cohort ($reason)" grep -q "cohort lab has 0 left to lend" <<<"$reason"
check_eq "a3's ClusterQueue" "$(printf '%s' "$BODY" | jget kilnStatus.queue.clusterQueue)" team-a
check_eq "a3's LocalQueue" "$(printf '%s' "$BODY" | jget kilnStatus.queue.localQueue)" default
check_eq "a3 first in its ClusterQueue" "$(printf '%s' "$BODY" | jget kilnStatus.queue.positionInClusterQueue)" 1
check "kiln jobs describe shows it" grep -q "cohort lab has 0 left to lend" <<<"$(KILN_PROJECT=team-a "$KILN" jobs describe a3)"
# the queues as kiln queues / GET /v1/queues / /metrics show them
api GET /v1/queues/team-a
check_eq "team-a: 2 admitted" "$(printf '%s' "$BODY" | jget admittedWorkloads)" 2
check_eq "team-a: 1 pending" "$(printf '%s' "$BODY" | jget pendingWorkloads)" 1
check_eq "team-a: 2 GPUs borrowed" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["borrowed"]["nvidia.com/gpu"])')" 2
check_eq "team-a: usage 4 of flavor v100" "$(printf '%s' "$BODY" | jget resourceGroups.0.flavors.0.resources.0.usage)" 4
check_eq "team-a: weighted share 2/4 borrowed" "$(printf '%s' "$BODY" | jget weightedShare)" 500
"$KILN" queues list >"$T/ql"
check "kiln queues list: team-a 4 of 2 GPUs, 2 borrowed" grep -Eq "^team-a +lab +1 +2 +4/2 +2 +500" "$T/ql"
check "kiln queues list: team-b idle" grep -Eq "^team-b +lab +0 +0 +0/2 +0 +0" "$T/ql"
"$KILN" queues describe team-a --format table >"$T/qd"
check "kiln queues describe --format table: team-a's one row" grep -Eq "^team-a +lab +1 +2 +4/2 +2 +500" "$T/qd"
check_eq "kiln queues describe --format table: a header and one row" "$(wc -l <"$T/qd")" 2
"$KILN" queues describe team-a >"$T/qd"
check "kiln queues describe: YAML by default, a v1beta2 ClusterQueue" grep -q "^apiVersion: kueue.x-k8s.io/v1beta2$" "$T/qd"
check "kiln queues describe: status.admittedWorkloads" grep -q "^  admittedWorkloads: 2$" "$T/qd"
check "kiln queues describe: spec.cohortName (v1beta2's name)" grep -q "^  cohortName: lab$" "$T/qd"
check "kiln queues describe: defaults spelt out" grep -q "whenCanBorrow: MayStopSearch" "$T/qd"
api GET /v1/queues/nope
check_eq "an unknown ClusterQueue: 404" "$STATUS" 404
api GET /metrics
check "kueue_cluster_queue_resource_usage" grep -q '^kueue_cluster_queue_resource_usage{cohort="lab",cluster_queue="team-a",flavor="v100",resource="nvidia.com/gpu"} 4$' <<<"$BODY"
check "kueue_cluster_queue_nominal_quota" grep -q '^kueue_cluster_queue_nominal_quota{cohort="lab",cluster_queue="team-b",flavor="v100",resource="nvidia.com/gpu"} 2$' <<<"$BODY"
check "kueue_pending_workloads" grep -q '^kueue_pending_workloads{cluster_queue="team-a",status="active"} 1$' <<<"$BODY"
check "kueue_admitted_active_workloads" grep -q '^kueue_admitted_active_workloads{cluster_queue="team-a"} 2$' <<<"$BODY"
check "kueue_cluster_queue_weighted_share" grep -q '^kueue_cluster_queue_weighted_share{cluster_queue="team-a"} 500$' <<<"$BODY"

# the queue label moves a waiting job only, and only to a queue of its project
api PATCH "/v1/projects/team-a/jobs/a3?updateMask=labels" "{\"labels\":$B}"
check_eq "a3 relabelled to another project's queue: refused" "$STATUS" 400
api PATCH "/v1/projects/team-a/jobs/a1?updateMask=labels" "{\"labels\":$B}"
check_eq "a running job's queue label: refused" "$STATUS" 400
check "it says why" grep -q "only while the job is QUEUED" <<<"$BODY"
api PATCH "/v1/projects/team-a/jobs/a3?updateMask=labels" '{"labels":{"kueue.x-k8s.io/priority-class":"urgent"}}'
check_eq "a3 gets a WorkloadPriorityClass while it waits" "$STATUS" 200

# team B's b1 (1 GPU, within its nominal quota) waits too: A borrowed it all
# and nothing preempts yet
api POST /v1/projects/team-b/jobs "$(gjob b1 1 "$B")"
check_eq "b1 accepted (label)" "$STATUS" 200
sleep 0.5
check_eq "b1 queued" "$(st team-b b1)" QUEUED
check_eq "still 4 GPUs held" "$(held_gpus)" 4

# a2 ends: b1 (no borrowing) is admitted before a3 (older, but borrowing);
# then the cohort has 1 GPU to lend, not the 2 a3 asks
api POST /v1/projects/team-a/jobs/a2:cancel '{}'
check "a2 cancelled" wait_st team-a a2 CANCELLED 10
check "b1 runs" wait_st team-b b1 RUNNING 10
sleep 0.5
check_eq "a3 still queued" "$(st team-a a3)" QUEUED
api GET /v1/projects/team-a/jobs/a3
check "a3 waits for the cohort ($(printf '%s' "$BODY" | jget kilnStatus.queue.reason))" \
    grep -q "cohort lab has 1 left" <<<"$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)"
check_eq "3 GPUs held" "$(held_gpus)" 3

# SIGHUP: a bad file is kept out (the old queues go on), a good one is used
printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: Nonsense\n' >"$T/queues.yaml"
kill -HUP "$KPID"
check "a bad reload is logged" wait_file "$T/d/kilnd.err" "do not load; still admitting with the old set" 5
api POST /v1/projects/team-a/jobs "$(gjob a4 1)"
check_eq "the old queues still route" "$STATUS" 200
api POST /v1/projects/team-a/jobs/a4:cancel '{}'
cp "$(dirname "$0")/../../examples/queues/two-teams.yaml" "$T/queues.yaml"
cat >>"$T/queues.yaml" <<'YAML'
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: team-b
  name: default
spec:
  clusterQueue: team-b
YAML
kill -HUP "$KPID"
check "the reload is logged" wait_file "$T/d/kilnd.err" "reloaded the queues file" 5
api POST /v1/projects/team-b/jobs "$(gjob b2 1)"
check_eq "team-b's new default LocalQueue routes" "$STATUS" 200
api POST /v1/projects/team-b/jobs/b2:cancel '{}'
check "a4 cancelled" wait_st team-a a4 CANCELLED 10
check "b2 cancelled" wait_st team-b b2 CANCELLED 10

# b1 ends: A may borrow again; a3 (2) runs, and never more than 4 GPUs
api POST /v1/projects/team-b/jobs/b1:cancel '{}'
check "b1 cancelled" wait_st team-b b1 CANCELLED 10
check "a3 runs" wait_st team-a a3 RUNNING 10
check "at most 4 GPUs held" test "$(held_gpus)" -le 4
for j in a1 a3; do api POST "/v1/projects/team-a/jobs/$j:cancel" '{}'; done
stop_kilnd

# ---- preemption: team B takes back what team A borrowed ----
# the same teams, each queue reclaiming what it lent (reclaimWithinCohort)
# and preempting its own lower-priority jobs (withinClusterQueue)
sed 's/^  cohortName: lab$/  cohortName: lab\n  preemption:\n    reclaimWithinCohort: Any\n    withinClusterQueue: LowerPriority/' \
    "$(dirname "$0")/../../examples/queues/two-teams.yaml" >"$T/preempt.yaml"
check "the preemption file has both policies" test "$(grep -c reclaimWithinCohort "$T/preempt.yaml")" = 2
start_kilnd "$T/p" --node-config "$T/nodes.json" --queues "$T/preempt.yaml"
# a job that checkpoints its step to its working directory (kept across
# runs) every 0.2 s and resumes from it: 30 steps
CK='i=$(cat ckpt 2>/dev/null || echo 0); echo start at step $i; while [ $i -lt 30 ]; do sleep 0.2; i=$((i+1)); echo $i > ckpt.tmp; mv ckpt.tmp ckpt; done; echo finished at step $i'
# a1 runs 80 steps (16 s): it must outlast the reclaim below, or on a busy
# machine its end frees quota that admits a2 again before a2 is looked at
CK80=${CK//-lt 30/-lt 80}
api POST /v1/projects/team-a/jobs "$(gjob a1 2 '{}' "$CK80")"
check "a1 runs" wait_st team-a a1 RUNNING 10
sleep 0.1
api POST /v1/projects/team-a/jobs "$(gjob a2 2 '{}' "$CK")"
check "a2 runs, borrowing team B's idle GPUs" wait_st team-a a2 RUNNING 10
# sample the GPUs held while B reclaims: never more than 4
( while [ ! -e "$T/stop-sampling" ]; do nodes_held >>"$T/held"; sleep 0.1; done ) &
SAMPLER=$!
sleep 1
t0=$(date +%s.%N)
api POST /v1/projects/team-b/jobs "$(gjob b1 2 "$B" 'sleep 6')"
check_eq "b1 accepted" "$STATUS" 200
check "b1 runs once A's borrower stopped" wait_st team-b b1 RUNNING 15
t1=$(date +%s.%N)
took=$("$PY" -c "print(round($t1 - $t0, 2))")
echo "  b1 got its 2 GPUs back in ${took} s (grace period 1 s)"
check "within a pass plus the grace period, with slack (${took} s <= 5)" "$PY" -c "import sys; sys.exit(0 if $took <= 5 else 1)"
check_eq "a1 (older) kept running" "$(st team-a a1)" RUNNING
api GET /v1/projects/team-a/jobs/a2
check_eq "a2 (the newest borrower) is queued again" "$(printf '%s' "$BODY" | jget state)" QUEUED
check_eq "a2's condition: Preempted" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.type)" Preempted
check_eq "its reason" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.reason)" InCohortReclamation
check "it names who preempted it" grep -q "team-b/b1" <<<"$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.message)"
check_eq "a restart, not a failure" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)/$(printf '%s' "$BODY" | jget kilnStatus.failures)" 1/0
check "the audit log has the preemption, naming the job" \
    grep -q '"verb":"PREEMPT".*"objectRef":{"resource":"jobs","namespace":"team-a","name":"a2"}' "$T/p/audit.log"
api GET /metrics
check "kiln_restarts_total counts it" grep -q 'kiln_restarts_total{reason="preempted"} 1' <<<"$BODY"
check "kueue_preempted_workloads_total counts it" grep -q '^kueue_preempted_workloads_total{reason="InCohortReclamation"} 1$' <<<"$BODY"
# b1 ends; a2 is admitted again and resumes from its checkpoint
check "b1 succeeds" wait_st team-b b1 SUCCEEDED 15
check "a1 succeeds" wait_st team-a a1 SUCCEEDED 30
check "a2 succeeds" wait_st team-a a2 SUCCEEDED 30
touch "$T/stop-sampling"
wait "$SAMPLER"
api GET "/v1/projects/team-a/jobs/a2:logs"
starts=$(printf '%s' "$BODY" | grep -o 'start at step [0-9]*' | awk '{print $4}' | tr '\n' ' ')
check "a2 started at step 0, then resumed past it ($starts)" "$PY" -c "
s = [int(x) for x in '$starts'.split()]
import sys; sys.exit(0 if len(s) == 2 and s[0] == 0 and s[1] > 0 else 1)"
check "a2 finished at step 30" grep -q "finished at step 30" <<<"$BODY"
max=$(sort -n "$T/held" | tail -1)
check "never more than 4 GPUs held ($(wc -l <"$T/held") samples, most $max)" test "${max:-99}" -le 4

# withinClusterQueue LowerPriority: with A using its own 2, B's urgent job
# (WorkloadPriorityClass urgent, 1000) preempts B's own priority-0 job
api POST /v1/projects/team-a/jobs "$(gjob a5 2 '{}' 'sleep 30')"
check "a5 runs" wait_st team-a a5 RUNNING 10
api POST /v1/projects/team-b/jobs "$(gjob blow 2 "$B" "$CK")"
check "blow runs" wait_st team-b blow RUNNING 10
api POST /v1/projects/team-b/jobs "$(gjob burgent 2 '{"kueue.x-k8s.io/queue-name":"training","kueue.x-k8s.io/priority-class":"urgent"}' 'sleep 2')"
check "the urgent job runs" wait_st team-b burgent RUNNING 10
check_eq "a5 (another queue, not borrowing) untouched" "$(st team-a a5)" RUNNING
api GET /v1/projects/team-b/jobs/blow
check_eq "blow preempted within its ClusterQueue" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.reason)" InClusterQueue
check "blow resumes and succeeds" wait_st team-b blow SUCCEEDED 40
api POST /v1/projects/team-a/jobs/a5:cancel '{}'
api GET /metrics
check "kueue_preempted_workloads_total{InClusterQueue} 1" grep -q '^kueue_preempted_workloads_total{reason="InClusterQueue"} 1$' <<<"$BODY"
stop_kilnd

# ---- borrowWithinCohort: a borrower of higher priority preempts another
# queue's lower-priority borrower; maxPriorityThreshold bounds whom ----
# team-a (nominal 2) borrows team-b's idle 2 with priority-10 jobs; team-c,
# team-d and team-e have no quota of their own (nominal 0), so every job of
# theirs borrows and reclaimWithinCohort alone (team-e) never preempts for
# it: only borrowWithinCohort (team-c; team-d with a threshold of 5) does
{
    printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: v100\n'
    for cq in "team-a 2 none" "team-b 2 none" "team-c 0 bwc" "team-d 0 bwc5" "team-e 0 reclaim"; do
        set -- $cq
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n  cohort: lab\n' "$1"
        case $3 in
        bwc) printf '  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n      policy: LowerPriority\n' ;;
        bwc5) printf '  preemption:\n    reclaimWithinCohort: Any\n    borrowWithinCohort:\n      policy: LowerPriority\n      maxPriorityThreshold: 5\n' ;;
        reclaim) printf '  preemption:\n    reclaimWithinCohort: Any\n' ;;
        esac
        printf '  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: %s\n' "$2"
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$1"
    done
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata:\n  name: low\nvalue: 10\n'
    printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata:\n  name: high\nvalue: 1000\n'
} >"$T/bwc.yaml"
start_kilnd "$T/bw" --node-config "$T/nodes.json" --queues "$T/bwc.yaml"
LOW='{"kueue.x-k8s.io/priority-class":"low"}'
HIGH='{"kueue.x-k8s.io/priority-class":"high"}'
# the jobs here run until the test lets them end (a file appears), however
# slowly a shared machine answers the test's requests
CKL="$CK; while [ ! -e $T/w-go ]; do sleep 0.1; done"
api POST /v1/projects/team-a/jobs "$(gjob w1 2 "$LOW" "$CKL")"
check "w1 runs" wait_st team-a w1 RUNNING 10
sleep 0.1
api POST /v1/projects/team-a/jobs "$(gjob w2 2 "$LOW" "$CKL")"
check "w2 runs, borrowing team-b's idle GPUs" wait_st team-a w2 RUNNING 10
: >"$T/held3"
( while [ ! -e "$T/stop-sampling3" ]; do nodes_held >>"$T/held3"; sleep 0.1; done ) &
SAMPLER=$!
# team-e: reclaimWithinCohort only; its job would borrow: nothing preempted
api POST /v1/projects/team-e/jobs "$(gjob e1 2 "$HIGH" 'sleep 2')"
check_eq "e1 accepted" "$STATUS" 200
sleep 1
check_eq "e1 (reclaimWithinCohort only, would borrow) waits" "$(st team-e e1)" QUEUED
check_eq "w2 untouched by it" "$(st team-a w2)" RUNNING
api POST /v1/projects/team-e/jobs/e1:cancel '{}'
check "e1 cancelled" wait_st team-e e1 CANCELLED 10
# team-d: borrowWithinCohort with maxPriorityThreshold 5; w1/w2 are at 10
api POST /v1/projects/team-d/jobs "$(gjob d1 2 "$HIGH" 'sleep 2')"
sleep 1
check_eq "d1 (threshold 5, victims at 10) waits" "$(st team-d d1)" QUEUED
check_eq "w2 untouched by it" "$(st team-a w2)" RUNNING
api GET /v1/projects/team-d/jobs/d1
reason=$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)
check "d1's reason names the threshold ($reason)" grep -q "above maxPriorityThreshold 5" <<<"$reason"
api POST /v1/projects/team-d/jobs/d1:cancel '{}'
check "d1 cancelled" wait_st team-d d1 CANCELLED 10
# team-c: borrowWithinCohort LowerPriority: c1 (1000) takes w2's place
api POST /v1/projects/team-c/jobs "$(gjob c1 2 "$HIGH" "while [ ! -e $T/c-go ]; do sleep 0.1; done")"
check "c1 runs, borrowing, once w2 stopped" wait_st team-c c1 RUNNING 15
check_eq "w1 (older) kept running" "$(st team-a w1)" RUNNING
check_eq "w2 (the newest borrower) is queued again" "$(st team-a w2)" QUEUED
api GET /v1/projects/team-a/jobs/w2
check_eq "w2's condition: Preempted" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.type)" Preempted
check_eq "its reason" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.reason)" InCohortReclaimWhileBorrowing
check "it names who and why" grep -q "team-c/c1 of ClusterQueue team-c (borrowing within cohort lab: priority 1000 over this job's 10)" <<<"$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.message)"
check_eq "a restart, not a failure" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)/$(printf '%s' "$BODY" | jget kilnStatus.failures)" 1/0
check "the audit log has it" \
    grep -q '"verb":"PREEMPT".*"objectRef":{"resource":"jobs","namespace":"team-a","name":"w2"}.*InCohortReclaimWhileBorrowing' "$T/bw/audit.log"
api GET /v1/projects/team-c/jobs/c1:logs
check "c1's log says it borrowed" grep -q "Admitted by ClusterQueue team-c (LocalQueue default, flavor v100, borrowing from cohort lab)" <<<"$BODY"
# no loop: the requeued w2 (lower priority, its queue at its nominal 2)
# preempts nothing back while c1 runs
sleep 1
check_eq "c1 still runs" "$(st team-c c1)" RUNNING
check_eq "w2 still waits" "$(st team-a w2)" QUEUED
api GET /metrics
check "kueue_preempted_workloads_total{InCohortReclaimWhileBorrowing} 1" grep -q '^kueue_preempted_workloads_total{reason="InCohortReclaimWhileBorrowing"} 1$' <<<"$BODY"
check "nothing counted as reclamation" grep -q '^kueue_preempted_workloads_total{reason="InCohortReclamation"} 0$' <<<"$BODY"
touch "$T/c-go" "$T/w-go"
check "c1 succeeds" wait_st team-c c1 SUCCEEDED 15
check "w2 resumes and succeeds" wait_st team-a w2 SUCCEEDED 30
check "w1 succeeds" wait_st team-a w1 SUCCEEDED 30
touch "$T/stop-sampling3"
wait "$SAMPLER"
api GET "/v1/projects/team-a/jobs/w2:logs"
starts=$(printf '%s' "$BODY" | grep -o 'start at step [0-9]*' | awk '{print $4}' | tr '\n' ' ')
check "w2 started at step 0, then resumed past it ($starts)" "$PY" -c "
s = [int(x) for x in '$starts'.split()]
import sys; sys.exit(0 if len(s) == 2 and s[0] == 0 and s[1] > 0 else 1)"
max=$(sort -n "$T/held3" | tail -1)
check "never more than 4 GPUs held ($(wc -l <"$T/held3") samples, most ${max:-none})" test "${max:-99}" -le 4
stop_kilnd

# ---- kill -9 of kilnd while B reclaims: nothing lost, nothing run twice ----
# the job notes its shell's pid while it runs: a second copy of it running
# at the same time says DOUBLE RUN
CK2='if [ -e running ] && kill -0 $(cat running) 2>/dev/null; then echo DOUBLE RUN; fi; echo $$ > running; '"$CK"
start_kilnd "$T/k" --node-config "$T/nodes.json" --queues "$T/preempt.yaml"
api POST /v1/projects/team-a/jobs "$(gjob k1 2 '{}' "$CK2")"
check "k1 runs" wait_st team-a k1 RUNNING 10
sleep 0.1
api POST /v1/projects/team-a/jobs "$(gjob k2 2 '{}' "$CK2")"
check "k2 runs, borrowing" wait_st team-a k2 RUNNING 10
sleep 1
api POST /v1/projects/team-b/jobs "$(gjob kb 2 "$B" "$CK2")"
check_eq "kb accepted" "$STATUS" 200
sleep "0.$((RANDOM % 5))"
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
start_kilnd "$T/k" --node-config "$T/nodes.json" --queues "$T/preempt.yaml"
: >"$T/held2"
( while [ ! -e "$T/stop-sampling2" ]; do nodes_held >>"$T/held2"; sleep 0.1; done ) &
SAMPLER=$!
check "kb succeeds after the kill" wait_st team-b kb SUCCEEDED 40
check "k1 succeeds after the kill" wait_st team-a k1 SUCCEEDED 40
check "k2 succeeds after the kill" wait_st team-a k2 SUCCEEDED 40
touch "$T/stop-sampling2"
wait "$SAMPLER"
for p in team-a/k1 team-a/k2 team-b/kb; do
    api GET "/v1/projects/${p%/*}/jobs/${p#*/}:logs"
    check_eq "$p finished once" "$(printf '%s' "$BODY" | grep -o 'finished at step 30' | wc -l)" 1
    check "$p never ran twice at once" test "$(printf '%s' "$BODY" | grep -c 'DOUBLE RUN')" = 0
done
max=$(sort -n "$T/held2" | tail -1)
check "never more than 4 GPUs held after the restart (most ${max:-none})" test "${max:-99}" -le 4
stop_kilnd

# ---- kill -9 of kilnd just after it sent the victim SIGTERM: the victim
# exits while no kilnd runs (status 143), and the next kilnd must finish the
# preemption (requeue, resume) instead of judging that exit a failure.
# Without the record of the preemption (admit.c's save_runtime before the
# SIGTERM), this passes only when the next kilnd's admission pass preempts
# again before its first tick judges the exit: the order CI once lost ----
start_kilnd "$T/k3" --node-config "$T/nodes.json" --queues "$T/preempt.yaml"
api POST /v1/projects/team-a/jobs "$(gjob m1 2 '{}' "$CK")"
check "m1 runs" wait_st team-a m1 RUNNING 10
api POST /v1/projects/team-a/jobs "$(gjob m2 2 '{}' "$CK")"
check "m2 runs, borrowing" wait_st team-a m2 RUNNING 10
sleep 1
api POST /v1/projects/team-b/jobs "$(gjob mb 2 "$B" "$CK")"
seen=""
for _ in $(seq 1 200); do
    api GET "/v1/projects/team-a/jobs/m2:logs"
    grep -q "Preempted to accommodate" <<<"$BODY" && seen=1 && break
    sleep 0.02
done
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
check "m2 was being preempted when kilnd died" test -n "$seen"
sleep 1.5 # past the grace period: m2's replica has had its SIGTERM and exited
start_kilnd "$T/k3" --node-config "$T/nodes.json" --queues "$T/preempt.yaml"
check "mb succeeds after the kill" wait_st team-b mb SUCCEEDED 40
check "m2, preempted across the restart, resumes and succeeds" wait_st team-a m2 SUCCEEDED 40
check "m1 succeeds" wait_st team-a m1 SUCCEEDED 40
api GET /v1/projects/team-a/jobs/m2
check_eq "m2's preemption was not charged as a failure" "$(printf '%s' "$BODY" | jget kilnStatus.failures)" 0
stop_kilnd

# ---- stopPolicy HoldAndDrain, set by SIGHUP: team-a's running job is
# evicted (stopped as a preemption stops it, back to QUEUED with a condition
# naming the hold, not charged), nothing of team-a is admitted while the
# hold lasts, team-b runs on; the hold lifted, the job resumes ----
cp "$(dirname "$0")/../../examples/queues/two-teams.yaml" "$T/drain.yaml"
start_kilnd "$T/h" --node-config "$T/nodes.json" --queues "$T/drain.yaml"
CKH="$CK; while [ ! -e $T/h-go ]; do sleep 0.1; done"
api POST /v1/projects/team-a/jobs "$(gjob h1 2 '{}' "$CKH")"
check "h1 runs" wait_st team-a h1 RUNNING 10
api POST /v1/projects/team-b/jobs "$(gjob hb 1 "$B" "while [ ! -e $T/h-go ]; do sleep 0.1; done")"
check "hb runs" wait_st team-b hb RUNNING 10
sleep 1
sed 's/^  queueingStrategy: BestEffortFIFO$/&\n  stopPolicy: HoldAndDrain/' \
    "$(dirname "$0")/../../examples/queues/two-teams.yaml" >"$T/drain.yaml"
check "the file holds and drains team-a" test "$(grep -c HoldAndDrain "$T/drain.yaml")" = 1
kill -HUP "$KPID"
check "the reload is logged" wait_file "$T/h/kilnd.err" "reloaded the queues file" 5
check "h1 is evicted, back to QUEUED" wait_st team-a h1 QUEUED 10
api GET /v1/projects/team-a/jobs/h1
check_eq "h1's condition: Evicted" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.type)" Evicted
check_eq "its reason" "$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.reason)" ClusterQueueStopped
check "it names the hold" grep -q "ClusterQueue team-a has stopPolicy HoldAndDrain" <<<"$(printf '%s' "$BODY" | jget kilnStatus.conditions.0.message)"
check "h1 waits for the hold ($(printf '%s' "$BODY" | jget kilnStatus.queue.reason))" \
    grep -q "ClusterQueue team-a has stopPolicy HoldAndDrain: it admits nothing" <<<"$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)"
check_eq "a restart, not a failure" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)/$(printf '%s' "$BODY" | jget kilnStatus.failures)" 1/0
check "the audit log has the eviction, naming the job" \
    grep -q '"verb":"EVICT".*"objectRef":{"resource":"jobs","namespace":"team-a","name":"h1"}' "$T/h/audit.log"
api GET /v1/queues/team-a
check_eq "GET /v1/queues: stopPolicy HoldAndDrain" "$(printf '%s' "$BODY" | jget stopPolicy)" HoldAndDrain
sleep 1
check_eq "h1 stays QUEUED while the hold lasts" "$(st team-a h1)" QUEUED
check_eq "team-b's hb runs on" "$(st team-b hb)" RUNNING
# the hold lifted: h1 is admitted again and resumes from its checkpoint
cp "$(dirname "$0")/../../examples/queues/two-teams.yaml" "$T/drain.yaml"
kill -HUP "$KPID"
check "h1 runs again once the hold is lifted" wait_st team-a h1 RUNNING 10
touch "$T/h-go"
check "h1 succeeds" wait_st team-a h1 SUCCEEDED 30
check "hb succeeds" wait_st team-b hb SUCCEEDED 10
api GET "/v1/projects/team-a/jobs/h1:logs"
starts=$(printf '%s' "$BODY" | grep -o 'start at step [0-9]*' | awk '{print $4}' | tr '\n' ' ')
check "h1 started at step 0, then resumed past it ($starts)" "$PY" -c "
s = [int(x) for x in '$starts'.split()]
import sys; sys.exit(0 if len(s) == 2 and s[0] == 0 and s[1] > 0 else 1)"
stop_kilnd

# ---- StrictFIFO holds back what BestEffortFIFO lets past ----
{
    printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: v100\n'
    for cq in "strict StrictFIFO" "besteffort BestEffortFIFO"; do
        set -- $cq
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata:\n  name: %s\nspec:\n  namespaceSelector: {}\n  queueingStrategy: %s\n  resourceGroups:\n  - coveredResources: ["nvidia.com/gpu"]\n    flavors:\n    - name: v100\n      resources:\n      - name: nvidia.com/gpu\n        nominalQuota: 2\n' "$1" "$2"
        printf -- '---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata:\n  namespace: %s\n  name: default\nspec:\n  clusterQueue: %s\n' "$1" "$1"
    done
} >"$T/fifo.yaml"
start_kilnd "$T/f" --node-config "$T/nodes.json" --queues "$T/fifo.yaml"
for p in strict besteffort; do
    api POST "/v1/projects/$p/jobs" "$(gjob x1 1 '{}' 'sleep 30')"
    check "$p: x1 runs" wait_st "$p" x1 RUNNING 10
    api POST "/v1/projects/$p/jobs" "$(gjob x2 2 '{}' 'sleep 1')"
    sleep 0.1
    api POST "/v1/projects/$p/jobs" "$(gjob x3 1 '{}' 'sleep 30')"
done
check "besteffort: x3 passes the head that does not fit" wait_st besteffort x3 RUNNING 10
check_eq "besteffort: x2 waits" "$(st besteffort x2)" QUEUED
check_eq "strict: x3 waits behind the head" "$(st strict x3)" QUEUED
api GET /v1/projects/strict/jobs/x3
check "strict: x3 says why ($(printf '%s' "$BODY" | jget kilnStatus.queue.reason))" \
    grep -q "StrictFIFO" <<<"$(printf '%s' "$BODY" | jget kilnStatus.queue.reason)"
check_eq "strict: x3 second in its ClusterQueue" "$(printf '%s' "$BODY" | jget kilnStatus.queue.positionInClusterQueue)" 2
for p in strict besteffort; do for j in x1 x2 x3; do api POST "/v1/projects/$p/jobs/$j:cancel" '{}'; done; done
finish
