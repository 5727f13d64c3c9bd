#!/bin/bash
# tests/service/it_slurm_elastic.sh - elastic PyTorchJobs under
# `kilnd --executor slurm --slurm-launch batch` on the two-node test cluster
# (tests/service/slurm_cluster.sh): each worker is a Slurm job of its own
# (kiln.P.J.worker-K.N, N its Slurm jobs so far), Worker 0 first, the others with its node as their
# rendezvous endpoint:
#   - min 1 / max 2 workers: the job RUNS, both workers run and see the same
#     PET_RDZV_ENDPOINT (Worker 0's node and port) and PET_RDZV_ID, and
#     PET_NNODES=1:2;
#   - scancel of worker 1's Slurm job: it is submitted again alone (a new
#     Slurm job, restart 1) while worker 0's Slurm job runs on;
#   - kill -9 of kilnd mid-job: the next kilnd follows the workers' Slurm
#     jobs again, submitting none twice; scancel of Worker 0's Slurm job
#     starts it again alone with the same endpoint (its port kept) while
#     worker 1 runs on; the job SUCCEEDS when Worker 0's program ends with 0;
#   - a kilnd dying right after Worker 0's sbatch: the next one adopts that
#     Slurm job by its name (one Slurm job, the program ran once);
#   - with torch (it_pytorchjob's elastic.py through torchrun.py): torchrun's
#     c10d rendezvous forms one group of two across the two Slurm jobs, and
#     re-forms it when worker 1's Slurm job is cancelled and comes back alone;
#   - workers asking a whole node's GPUs, one node held by another job: the
#     job RUNS with 1 worker, worker 1 PENDING in Slurm until the node frees;
#   - scontrol requeue of Worker 0's Slurm job: cancelled and submitted anew,
#     not counted as a restart, worker 1 runs on;
#   - cancel: every worker's Slurm job is gone, the job CANCELLED;
#   - Worker 0 started again on the other node (n2 given 127.0.0.2): worker 1
#     is stopped and submitted again with the new endpoint;
#   - an elastic job with a Master replica, and elasticPolicy.metrics, are
#     refused at create naming the field.
# The workers are small shell programs where what kilnd gives them is
# checked. Skipped (77) with the reason where Slurm cannot run here (probe
# `slurm`); the torchrun cases alone say SKIP without python3-torch.
PORT_RANGE=64000-64799 # the cluster's own daemons listen on 64900-64992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 64900 64992
KILND_SLURM=(--executor slurm --slurm-launch batch --slurm-partition kiln --kiln-train "$BUILD/bin/kiln-train")
start_kilnd "$T/d" "${KILND_SLURM[@]}"

# el_job ID: Workers only (kiln's master is Worker 0), min 1, max 2; each
# worker says what it was given and runs until $T/ID.stop exists
el_job() {
    local prog cmd
    prog="echo \"ENV \$KILN_TASK_NAME ep=\$PET_RDZV_ENDPOINT id=\$PET_RDZV_ID nn=\$PET_NNODES\"; echo \$SLURM_JOB_ID >>$T/$1.\$KILN_TASK_NAME.runs; while [ ! -e $T/$1.stop ]; do sleep 0.2; done; echo worker done"
    cmd=$(printf '%s' "$prog" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["sh","-c",%s]},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' \
        "$1" "$cmd" "$cmd"
}
# sid NAME [STATE]: the Slurm job id of that name (in that state)
sid() { squeue -h -n "$1" ${2:+-t "$2"} -o %i 2>/dev/null | head -1; }
# wait_sid NAME STATE [SECONDS]
wait_sid() {
    for _ in $(seq 1 $(( ${3:-30} * 5 ))); do
        [ -n "$(sid "$1" "$2")" ] && return 0
        sleep 0.2
    done
    echo "  no Slurm job $1 in state $2" >&2
    squeue -h -o '%i %j %T' >&2
    return 1
}
current() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current
}
LOG=$T/d/jobs/p1/el_1/log.tsv

# ---- refused at create ----
api POST /v1/projects/p1/jobs '{"jobId":"el_master","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["true"]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["true"]},"pytorchJob":{"elasticPolicy":{"minReplicas":"1","maxReplicas":"2"}}}}'
check_eq "an elastic job with a Master is refused" "$STATUS" 400
check "naming elasticPolicy" grep -q "trainingInput.pytorchJob.elasticPolicy.*Workers only" <<<"$(printf '%s' "$BODY" | jget error.message)"
api POST /v1/projects/p1/jobs '{"jobId":"el_hpa","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["true"]},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"minReplicas":"1","maxReplicas":"2","metrics":[{"resource":"cpu","targetType":"Utilization","averageUtilization":"50"}]}}}}'
check_eq "elasticPolicy.metrics is refused" "$STATUS" 400
check "naming the metrics" grep -q "trainingInput.pytorchJob.elasticPolicy.metrics" <<<"$(printf '%s' "$BODY" | jget error.message)"

# ---- min 1 / max 2: both workers, one rendezvous ----
api POST /v1/projects/p1/jobs "$(el_job el_1)"
check_eq "el_1 accepted" "$STATUS" 200
[ "$STATUS" = 200 ] || printf '%s\n' "$BODY" >&2
check "el_1 RUNNING" wait_state el_1 RUNNING 60
check "worker 0 said what it got" wait_file "$LOG" "master-replica-0	ENV" 30
check "worker 1 said what it got" wait_file "$LOG" "worker-replica-0	ENV" 30
w0=$(grep -o 'master-replica-0	ENV .*' "$LOG" | head -1 | cut -d' ' -f3-)
w1=$(grep -o 'worker-replica-0	ENV .*' "$LOG" | head -1 | cut -d' ' -f3-)
ep0=$(printf '%s' "$w0" | grep -o 'ep=[^ ]*')
check "worker 0's endpoint is an address and a port" grep -Eq '^ep=[^@: ]+:64[0-7][0-9]{2}$' <<<"$ep0"
check_eq "both workers got one rendezvous (endpoint, id, nnodes)" "$w1" "$w0"
check_eq "the rendezvous id is the job's, nnodes min:max" "$(printf '%s' "$w0" | cut -d' ' -f2-)" "id=el_1 nn=1:2"
n0=$(sid kiln.p1.el_1.worker-0.0 RUNNING)
n1=$(sid kiln.p1.el_1.worker-1.0 RUNNING)
check "worker 0 is a Slurm job of its own" test -n "$n0"
check "worker 1 is a Slurm job of its own" test -n "$n1"
check "two Slurm jobs" test -n "$n0" -a -n "$n1" -a "$n0" != "$n1"
cur=""
for _ in $(seq 1 50); do cur=$(current el_1); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "elasticWorkers.current" "$cur" 2

# ---- worker 1's Slurm job scancelled: restarted alone ----
scancel "$n1"
check "worker 1 submitted again (kiln.p1.el_1.worker-1.1)" wait_sid kiln.p1.el_1.worker-1.1 RUNNING 40
check_eq "worker 0's Slurm job ran on" "$(sid kiln.p1.el_1.worker-0.0 RUNNING)" "$n0"
check "the restart is logged" grep -q "Worker 1 (worker-replica-0, Slurm job $n1 ended CANCELLED.*starting it again alone (restart 1 of at most 3" "$LOG"
check "worker 0 ran once" test "$(wc -l <"$T/el_1.master-replica-0.runs")" -eq 1
check "worker 1 ran twice" wait_file "$T/el_1.worker-replica-0.runs" "$(sid kiln.p1.el_1.worker-1.1)" 20

# ---- kill -9 of kilnd: the next one follows the workers again ----
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 2
start_kilnd "$T/d" "${KILND_SLURM[@]}"
check "worker 0 followed again" wait_file "$LOG" "following worker 0's Slurm job $n0 again" 10
check "worker 1 followed again" wait_file "$LOG" "following worker 1's Slurm job" 10
sleep 2
check_eq "no new Slurm job for worker 0" "$(squeue -h -n kiln.p1.el_1.worker-0.1 -o %i | wc -l)" 0
check_eq "no new Slurm job for worker 1" "$(squeue -h -n kiln.p1.el_1.worker-1.2 -o %i | wc -l)" 0
check "el_1 still RUNNING" wait_state el_1 RUNNING 5

# ---- Worker 0 (the rendezvous host) scancelled: restarted alone, same endpoint ----
n1b=$(sid kiln.p1.el_1.worker-1.1 RUNNING)
scancel "$n0"
check "worker 0 submitted again (kiln.p1.el_1.worker-0.1)" wait_sid kiln.p1.el_1.worker-0.1 RUNNING 40
check "worker 0's restart is logged" wait_file "$LOG" "Worker 0 (master-replica-0, Slurm job $n0 ended CANCELLED.*starting it again alone (restart 1 of at most 3" 10
check "worker 0 said what it got again" wait_file "$T/el_1.master-replica-0.runs" "$(sid kiln.p1.el_1.worker-0.1)" 20
check_eq "worker 0 kept its endpoint (its port; both nodes are 127.0.0.1)" \
    "$(grep -o 'master-replica-0	ENV .*' "$LOG" | tail -1 | cut -d' ' -f3-)" "$w0"
check_eq "worker 1's Slurm job ran on" "$(sid kiln.p1.el_1.worker-1.1 RUNNING)" "$n1b"
check "not moved" test "$(grep -c 'Worker 0 moved' "$LOG")" -eq 0
touch "$T/el_1.stop"
check "el_1 SUCCEEDED when worker 0 ended with 0" wait_state el_1 SUCCEEDED 60
check "worker 0 finished" grep -q "master-replica-0	worker done" "$LOG"
check_eq "worker 0 ran twice in all" "$(wc -l <"$T/el_1.master-replica-0.runs")" 2
check_eq "worker 1 ran twice in all" "$(wc -l <"$T/el_1.worker-replica-0.runs")" 2
left=""
for _ in $(seq 1 50); do
    left=$(squeue -h -o '%j' | grep -c '^kiln\.p1\.el_1\.')
    [ "$left" = 0 ] && break
    sleep 0.2
done
check_eq "no Slurm job of el_1 left" "$left" 0

# ---- a kilnd dying between a worker's sbatch and its record submits nothing twice ----
# (KILN_TEST_DIE_AFTER_SBATCH=1 is a test-only hook: kilnd _exits(70) right after sbatch)
stop_kilnd
KILN_TEST_DIE_AFTER_SBATCH=1 start_kilnd "$T/d" "${KILND_SLURM[@]}"
api POST /v1/projects/p1/jobs "$(el_job el_4)"
for _ in $(seq 1 400); do kill -0 "$KPID" 2>/dev/null || break; sleep 0.05; done
wait "$KPID" 2>/dev/null
check_eq "kilnd died right after worker 0's sbatch (test hook)" "$?" 70
start_kilnd "$T/d" "${KILND_SLURM[@]}"
check "el_4 RUNNING" wait_state el_4 RUNNING 60
check "the new kilnd adopted worker 0's Slurm job" wait_file "$T/d/jobs/p1/el_4/log.tsv" "kiln.p1.el_4.worker-0.0, [A-Z]*) was submitted by a kilnd that stopped before recording it: following it" 10
check "el_4's worker 1 runs" wait_sid kiln.p1.el_4.worker-1.0 RUNNING 40
check_eq "one Slurm job kiln.p1.el_4.worker-0.0" "$(squeue -h -t all -n kiln.p1.el_4.worker-0.0 -o %i | wc -l)" 1
check_eq "worker 0's program ran once" "$(wc -l <"$T/el_4.master-replica-0.runs")" 1
touch "$T/el_4.stop"
check "el_4 SUCCEEDED" wait_state el_4 SUCCEEDED 60

# ---- torchrun's c10d rendezvous across the workers' Slurm jobs ----
# (it_pytorchjob's program and launcher, with Debian's python3-torch)
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
if "$SYSPY" -c 'import torch.distributed.run' 2>/dev/null; then
    mkdir -p "$T/el_t"
    # tcmd STATEDIR STEPS: each worker's command, torchrun over elastic.py
    tcmd() { printf '["env","KILN_ELASTIC_STATE=%s","%s","%s","%s","%s"]' "$1" "$SYSPY" \
        "$HERE/pytorchjob/torchrun.py" "$HERE/pytorchjob/elastic.py" "$2"; }
    api POST /v1/projects/p1/jobs "{\"jobId\":\"el_t\",\"trainingInput\":{\"scaleTier\":\"CUSTOM\",\"region\":\"us-central1\",\"masterType\":\"n1-standard-4\",\"masterConfig\":{\"containerCommand\":$(tcmd "$T/el_t" 6)},\"workerType\":\"n1-standard-4\",\"workerCount\":\"1\",\"workerConfig\":{\"containerCommand\":$(tcmd "$T/el_t" 6)},\"pytorchJob\":{\"workersOnly\":true,\"elasticPolicy\":{\"rdzvBackend\":\"c10d\",\"minReplicas\":\"1\",\"maxReplicas\":\"2\"}}}}"
    check_eq "el_t (torchrun) accepted" "$STATUS" 200
    check "el_t SUCCEEDED" wait_state el_t SUCCEEDED 120
    LT=$T/d/jobs/p1/el_t/log.tsv
    check "worker 0 (its own Slurm job) was in torchrun's group of two" grep -q "master-replica-0	rank [01] done in a group of 2" "$LT"
    check "worker 1 (its own Slurm job) was in the group of two" grep -q "worker-replica-0	rank [01] done in a group of 2" "$LT"
    check "no group of one" test "$(grep -c 'group of 1' "$LT")" -eq 0
    check "two Slurm jobs ran it" test -n "$(squeue -h -t all -n kiln.p1.el_t.worker-1.0 -o %i)"
    # worker 1's Slurm job cancelled mid-run: it comes back alone, the group re-forms
    mkdir -p "$T/el_tk"
    api POST /v1/projects/p1/jobs "{\"jobId\":\"el_tk\",\"trainingInput\":{\"scaleTier\":\"CUSTOM\",\"region\":\"us-central1\",\"masterType\":\"n1-standard-4\",\"masterConfig\":{\"containerCommand\":$(tcmd "$T/el_tk" 40)},\"workerType\":\"n1-standard-4\",\"workerCount\":\"1\",\"workerConfig\":{\"containerCommand\":$(tcmd "$T/el_tk" 40)},\"pytorchJob\":{\"workersOnly\":true,\"elasticPolicy\":{\"rdzvBackend\":\"c10d\",\"minReplicas\":\"1\",\"maxReplicas\":\"2\",\"maxRestarts\":\"3\"}}}}"
    check_eq "el_tk accepted" "$STATUS" 200
    LK=$T/d/jobs/p1/el_tk/log.tsv
    check "el_tk: the group of two took 3 steps" wait_file "$LK" "step 3: all-reduced across 2" 60
    scancel "$(sid kiln.p1.el_tk.worker-1.0 RUNNING)"
    check "el_tk SUCCEEDED after worker 1's Slurm job was cancelled" wait_state el_tk SUCCEEDED 150
    check "worker 1 came back alone" grep -q "Worker 1 (worker-replica-0, Slurm job [0-9]* ended CANCELLED.*starting it again alone" "$LK"
    check "the group re-formed with it (agent restart)" grep -q "joined a group of 2 at step [1-9][0-9]* (restart [1-9])" "$LK"
    check "both finished in a group of two" test "$(grep -c 'done in a group of 2' "$LK")" -eq 2
else
    echo "SKIP (torchrun case only): $SYSPY has no torch.distributed (python3-torch)" >&2
fi

# ---- workers past minReplicas wait in Slurm's queue, join when granted ----
# each worker asks for 2 GPUs (a whole node); a plain job holds one node
api POST /v1/projects/p1/jobs '{"jobId":"blocker","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"2","type":"NVIDIA_TESLA_T4"},"containerCommand":["sleep","120"]}}}'
check_eq "blocker accepted" "$STATUS" 200
check "blocker RUNNING on one node" wait_state blocker RUNNING 60
api POST /v1/projects/p1/jobs "$(el_job el_3 | sed 's/"containerCommand"/"acceleratorConfig":{"count":"2","type":"NVIDIA_TESLA_T4"},"containerCommand"/g')"
check_eq "el_3 accepted" "$STATUS" 200
check "el_3 RUNNING with minReplicas (1) workers" wait_state el_3 RUNNING 60
check "its worker 1 waits in Slurm's queue" wait_sid kiln.p1.el_3.worker-1.0 PENDING 20
sleep 2
check_eq "still pending while the node is held" "$(sid kiln.p1.el_3.worker-1.0 RUNNING)" ""
check_eq "elasticWorkers.current 1" "$(current el_3)" 1
api POST /v1/projects/p1/jobs/blocker:cancel '{}'
check "worker 1 granted once the node frees up" wait_sid kiln.p1.el_3.worker-1.0 RUNNING 40
cur=""
for _ in $(seq 1 50); do cur=$(current el_3); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "elasticWorkers.current 2" "$cur" 2
check "the added worker got the endpoint" wait_file "$T/d/jobs/p1/el_3/log.tsv" "worker-replica-0	ENV worker-replica-0 ep=" 20

# ---- cancel: every worker's Slurm job goes ----
api POST /v1/projects/p1/jobs "$(el_job el_2)"
check_eq "el_2 accepted" "$STATUS" 200
check "el_2 RUNNING" wait_state el_2 RUNNING 60
check "el_2's worker 1 runs" wait_sid kiln.p1.el_2.worker-1.0 RUNNING 40
# Slurm requeues worker 0 (preemption's way): kilnd cancels that Slurm job
# and submits worker 0 anew, not counted as a restart; the endpoint did not
# move (same address, same port), so worker 1 runs on
q0=$(sid kiln.p1.el_2.worker-0.0 RUNNING)
q1=$(sid kiln.p1.el_2.worker-1.0 RUNNING)
scontrol requeue "$q0"
check "el_2's worker 0 submitted anew (kiln.p1.el_2.worker-0.1)" wait_sid kiln.p1.el_2.worker-0.1 RUNNING 40 ||
    grep 'service' "$T/d/jobs/p1/el_2/log.tsv" >&2
check_eq "the requeued Slurm job is gone" "$(squeue -h -j "$q0" -t PENDING,RUNNING -o %i 2>/dev/null)" ""
check "the requeue is logged" grep -q "Worker 0 (master-replica-0): Slurm job $q0: Slurm requeued its job" "$T/d/jobs/p1/el_2/log.tsv"
check_eq "worker 1's Slurm job ran on (the endpoint did not move)" "$(sid kiln.p1.el_2.worker-1.0 RUNNING)" "$q1"
check_eq "no restart counted" "$(grep -c 'starting it again alone' "$T/d/jobs/p1/el_2/log.tsv")" 0
cur=""
for _ in $(seq 1 50); do cur=$(current el_2); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "el_2: elasticWorkers.current 2 again" "$cur" 2
api POST /v1/projects/p1/jobs/el_2:cancel '{}'
api POST /v1/projects/p1/jobs/el_3:cancel '{}'
check "el_2 CANCELLED" wait_state el_2 CANCELLED 30
check "el_3 CANCELLED" wait_state el_3 CANCELLED 30
check_eq "no Slurm job of el_2 left" "$(squeue -h -o '%j' | grep -c '^kiln\.p1\.el_2\.')" 0
check_eq "no Slurm job of el_3 left" "$(squeue -h -o '%j' | grep -c '^kiln\.p1\.el_3\.')" 0
check "el_2's workers were stopped, not finished" test "$(grep -c 'worker done' "$T/d/jobs/p1/el_2/log.tsv")" -eq 0
check "el_2's worker 1 was told to stop" grep -q "Worker 1 (worker-replica-0): Slurm job [0-9]* ended" "$T/d/jobs/p1/el_2/log.tsv"
# ---- Worker 0 started again on another node: the others get its new endpoint ----
# n2 gets an address of its own (127.0.0.2 is loopback too), and Worker 0's
# node is drained before its Slurm job is cancelled, so that Slurm places
# it on the other node
scontrol update NodeName=n2 NodeAddr=127.0.0.2
api POST /v1/projects/p1/jobs "$(el_job el_5)"
check_eq "el_5 accepted" "$STATUS" 200
check "el_5's worker 1 runs" wait_sid kiln.p1.el_5.worker-1.0 RUNNING 40
L5=$T/d/jobs/p1/el_5/log.tsv
check "el_5's worker 1 said what it got" wait_file "$L5" "worker-replica-0	ENV" 20
m0=$(sid kiln.p1.el_5.worker-0.0 RUNNING)
node0=$(squeue -h -j "$m0" -o %N)
ep_old=$(grep -o 'worker-replica-0	ENV .*' "$L5" | head -1 | grep -o 'ep=[^ ]*')
scontrol update NodeName="$node0" State=DRAIN Reason=it_slurm_elastic
scancel "$m0"
check "el_5's worker 0 submitted again" wait_sid kiln.p1.el_5.worker-0.1 RUNNING 40
check "it runs on the other node" test "$(squeue -h -n kiln.p1.el_5.worker-0.1 -o %N)" != "$node0"
check "the move is logged" wait_file "$L5" "Worker 0 moved to 127.0.0." 20
check "worker 1 submitted again with the new endpoint" wait_sid kiln.p1.el_5.worker-1.1 RUNNING 40
check "worker 1 said what it got again" wait_file "$T/el_5.worker-replica-0.runs" "$(sid kiln.p1.el_5.worker-1.1)" 20
sleep 1
ep_new=$(grep -o 'worker-replica-0	ENV .*' "$L5" | tail -1 | grep -o 'ep=[^ ]*')
ep_w0=$(grep -o 'master-replica-0	ENV .*' "$L5" | tail -1 | grep -o 'ep=[^ ]*')
check "worker 1's endpoint changed" test -n "$ep_new" -a "$ep_new" != "$ep_old"
check_eq "to Worker 0's new one" "$ep_new" "$ep_w0"
check "worker 1's stop is not a restart of its own" grep -q "Worker 1 (worker-replica-0): Slurm job [0-9]* ended [A-Z]*; submitting it again with Worker 0's new rendezvous endpoint" "$L5"
check_eq "the one restart counted is worker 0's" "$(grep -c 'starting it again alone' "$L5")" 1
scontrol update NodeName="$node0" State=RESUME
touch "$T/el_5.stop"
check "el_5 SUCCEEDED" wait_state el_5 SUCCEEDED 60
finish
