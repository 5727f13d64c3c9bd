#!/bin/bash
# tests/service/it_slurm_elastic.sh - elastic PyTorchJobs under
# `kilnd --executor slurm` (kiln's one
# supervisor, Slurm placing) on the two-node test cluster
# (tests/service/slurm_cluster.sh): the gang (minReplicas workers, Worker 0
# first) is one allocation kiln-P-J, each further worker up to maxReplicas an
# allocation of its own kiln-P-J-wK (K its worker index), every worker an
# srun step, all with Worker 0's node as their rendezvous endpoint:
#   - min 1 / max 2 workers: the job RUNS, both workers run (in two
#     allocations) and see the same PET_RDZV_ENDPOINT (Worker 0's node and
#     port) and PET_RDZV_ID, and PET_NNODES=1:2;
#   - worker 1's step cancelled: it starts again alone in its allocation
#     (restart 1) while Worker 0 runs on;
#   - scancel of worker 1's allocation: that worker leaves, another comes in
#     an allocation of its own (-w1) with the same endpoint, Worker 0 runs on;
#   - kill -9 of kilnd mid-job: the next kilnd adopts both workers (their
#     monitors and srun outlived it), asking Slurm for nothing new;
#   - Worker 0's step cancelled: it starts again alone in the gang's
#     allocation with the same endpoint (its port kept) while the other
#     worker runs on; the job SUCCEEDS when Worker 0's program ends with 0,
#     every allocation given back;
#   - with torch (it_pytorchjob's elastic.py through torchrun.py): torchrun's
#     c10d rendezvous forms one group of two across the two allocations, and
#     re-forms it when worker 1's step is cancelled and it starts again alone
#     in its allocation (it_slurm_steps checks the group re-formed with a
#     worker in a new allocation after its allocation was cancelled);
#   - workers asking a whole node's GPUs, one node held by another job: the
#     job RUNS with 1 worker, worker 1's allocation PENDING in Slurm until
#     the node frees; kilnd killed (-9) meanwhile: the next one takes that
#     pending allocation over by its name, asking for none twice;
#   - scontrol requeue of worker 1's allocation: the worker leaves and
#     another comes; the requeued allocation is not left behind in Slurm;
#   - cancel: every worker's allocation is gone, the job CANCELLED;
#   - Worker 0's allocation scancelled, its node drained (n2 given
#     127.0.0.2): the job is queued again, placed on the other node, and
#     every worker gets Worker 0's new endpoint.
# Ported from --slurm-launch batch (src/exec/slurm/slurm.c), which is gone.
# Dropped with it, as they described its internals or refusals only: the
# refusals of an elastic job with a Master and of elasticPolicy.metrics
# (steps runs both: it_slurm_steps checks metrics, and its refusal of GPU
# utilisation); KILN_TEST_DIE_AFTER_SBATCH, batch's test hook (steps' answer
# to a kilnd dying with an allocation asked for, taking it over by name, is
# checked with the pending worker instead); batch's restart of a worker as
# a new Slurm job kiln.P.J.worker-K.N (steps restarts a worker's step in
# its allocation, and a worker whose allocation Slurm ends leaves for
# another, both checked); "Slurm requeued its job ... not counted as a
# restart" and "Worker 0 moved ... submitting it again" (steps: a requeued
# worker allocation is a worker leaving, Worker 0's allocation ending queues
# the job again, both checked).
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
KILND_SLURM=(--executor slurm --slurm-partition kiln --slurm-gpu-type NVIDIA_TESLA_T4=t4
    --kiln-train "$BUILD/bin/kiln-train")
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
# sid NAME [STATE]: the Slurm job id of the allocation of that name (in that state)
sid() { squeue -h -n "$1" ${2:+-t "$2"} -o %i 2>/dev/null | head -1; }
# wait_sid NAME STATE [SECONDS]
wait_sid() {
    for _ in $(seq 1 $(( ${3:-30} * 5 ))); do
        [ -n "$(sid "$1" "$2")" ] && return 0
        sleep 0.2
    done
    echo "  no Slurm allocation $1 in state $2" >&2
    squeue -h -o '%i %j %T' >&2
    return 1
}
# step ALLOC: the id (A.S) of the step running in allocation ALLOC
step() { squeue -h -s -j "$1" -o %i 2>/dev/null | grep -E '^[0-9]+\.[0-9]+$' | head -1; }
# wait_step ALLOC [NOT]: until a step (other than NOT) runs in ALLOC; prints it
wait_step() {
    local st
    for _ in $(seq 1 100); do
        st=$(step "$1")
        [ -n "$st" ] && [ "$st" != "${2:-}" ] && { echo "$st"; return 0; }
        sleep 0.2
    done
    return 1
}
# left JOB: the job's allocations (kiln-p1-JOB, kiln-p1-JOB-wK) Slurm still has
left() { squeue -h -o '%j' 2>/dev/null | grep -cE "^kiln-p1-$1(-w[0-9]+)?$"; }
wait_none_left() { # wait_none_left JOB
    for _ in $(seq 1 50); do
        [ "$(left "$1")" = 0 ] && return 0
        sleep 0.2
    done
    squeue -h -o '%i %j %T' >&2
    return 1
}
current() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.elasticWorkers.current
}
asked() { grep -c 'Asked for Slurm allocation' "$T/d/jobs/p1/$1/log.tsv"; }
LOG=$T/d/jobs/p1/el_1/log.tsv

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
n0=$(sid kiln-p1-el_1 RUNNING)
n1=$(sid kiln-p1-el_1-w0 RUNNING)
check "worker 0 runs in the gang's allocation (kiln-p1-el_1)" test -n "$n0"
check "worker 1 runs in an allocation of its own (kiln-p1-el_1-w0)" test -n "$n1"
check "two allocations" test -n "$n0" -a -n "$n1" -a "$n0" != "$n1"
check_eq "each worker ran in its allocation (SLURM_JOB_ID)" \
    "$(cat "$T/el_1.master-replica-0.runs" "$T/el_1.worker-replica-0.runs" 2>/dev/null | tr '\n' ' ')" "$n0 $n1 "
cur=""
for _ in $(seq 1 50); do cur=$(current el_1); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "elasticWorkers.current" "$cur" 2

# ---- worker 1's step cancelled: it starts again alone, in its allocation ----
s1=$(step "$n1")
check "worker 1 is a step of its allocation" test -n "$s1"
scancel "$s1"
check "worker 1 started again alone" wait_file "$LOG" "worker-replica-0 exited with status [0-9]*: starting it again alone (restart 1 of at most 3" 30
for _ in $(seq 1 100); do [ "$(wc -l <"$T/el_1.worker-replica-0.runs")" -ge 2 ] && break; sleep 0.1; done
check_eq "worker 1 ran twice, both in allocation $n1" "$(sort -u "$T/el_1.worker-replica-0.runs" | tr '\n' ' ')$(wc -l <"$T/el_1.worker-replica-0.runs")" "$n1 2"
check_eq "worker 0's allocation ran on" "$(sid kiln-p1-el_1 RUNNING)" "$n0"
check "worker 0 ran once" test "$(wc -l <"$T/el_1.master-replica-0.runs")" -eq 1

# ---- worker 1's allocation scancelled: it leaves, another worker comes ----
scancel "$n1"
check "the loss is said, the worker leaves" wait_file "$LOG" "Slurm ended allocation $n1 of worker-replica-0.*the worker leaves the job" 30
check "its leaving says why" wait_file "$LOG" "worker-replica-0 left the job (Slurm ended its allocation)" 30
check "another worker asked for, in an allocation of its own (kiln-p1-el_1-w1)" wait_sid kiln-p1-el_1-w1 RUNNING 40
check "the new worker said what it got" wait_file "$LOG" "worker-replica-1	ENV" 30
check_eq "with Worker 0's rendezvous" "$(grep -o 'worker-replica-1	ENV .*' "$LOG" | head -1 | cut -d' ' -f3-)" "$w0"
check_eq "worker 0's allocation ran on" "$(sid kiln-p1-el_1 RUNNING)" "$n0"
check "worker 0 still ran once" test "$(wc -l <"$T/el_1.master-replica-0.runs")" -eq 1
cur=""
for _ in $(seq 1 50); do cur=$(current el_1); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "elasticWorkers.current 2 again" "$cur" 2

# ---- kill -9 of kilnd: the next one adopts the workers ----
nw=$(sid kiln-p1-el_1-w1 RUNNING)
a0=$(asked el_1)
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 2
start_kilnd "$T/d" "${KILND_SLURM[@]}"
check "both workers adopted" wait_file "$LOG" "kilnd restarted: adopted the job's 2 running replicas" 10
sleep 2
check_eq "nothing new asked of Slurm" "$(asked el_1)" "$a0"
check_eq "the same two allocations run" "$(sid kiln-p1-el_1 RUNNING) $(sid kiln-p1-el_1-w1 RUNNING)" "$n0 $nw"
check "el_1 still RUNNING" wait_state el_1 RUNNING 5

# ---- Worker 0 (the rendezvous host)'s step cancelled: again alone, same endpoint ----
s0=$(step "$n0")
check "worker 0 is a step of the gang's allocation" test -n "$s0"
scancel "$s0"
check "worker 0's restart is logged" wait_file "$LOG" "master-replica-0 exited with status [0-9]*: starting it again alone (restart 1 of at most 3" 30
for _ in $(seq 1 100); do [ "$(wc -l <"$T/el_1.master-replica-0.runs")" -ge 2 ] && break; sleep 0.1; done
check_eq "worker 0 ran again in the gang's allocation" "$(sort -u "$T/el_1.master-replica-0.runs" | tr '\n' ' ')$(wc -l <"$T/el_1.master-replica-0.runs")" "$n0 2"
sleep 1
check_eq "worker 0 kept its endpoint (its port; both nodes are 127.0.0.1)" \
    "$(grep -o 'master-replica-0	ENV .*' "$LOG" | tail -1 | cut -d' ' -f3-)" "$w0"
check_eq "the other worker's allocation ran on" "$(sid kiln-p1-el_1-w1 RUNNING)" "$nw"
check_eq "... and it ran once" "$(wc -l <"$T/el_1.worker-replica-1.runs")" 1
touch "$T/el_1.stop"
check "el_1 SUCCEEDED when worker 0 ended with 0" wait_state el_1 SUCCEEDED 60
check "worker 0 finished" grep -q "master-replica-0	worker done" "$LOG"
check "no allocation of el_1 left" wait_none_left el_1

# ---- torchrun's c10d rendezvous across the workers' allocations ----
# (it_pytorchjob's program and launcher, with Debian's python3-torch)
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
TORCH_WHY=$(torchrun_group_why "$SYSPY")
if [ -n "$TORCH_WHY" ]; then
    echo "SKIP (torchrun case only): $TORCH_WHY" >&2
else
    mkdir -p "$T/el_t" "$T/el_tk"
    # tcmd STATEDIR STEPS: each worker's command, torchrun over elastic.py
    tcmd() { printf '["env","KILN_ELASTIC_STATE=%s","%s","%s","%s","%s"]' "$1" "$SYSPY" \
        "$HERE/pytorchjob/torchrun.py" "$HERE/pytorchjob/elastic.py" "$2"; }
    tjob() { # tjob ID STATEDIR STEPS
        printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":%s},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":%s},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"rdzvBackend":"c10d","minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' \
            "$1" "$(tcmd "$2" "$3")" "$(tcmd "$2" "$3")"
    }
    api POST /v1/projects/p1/jobs "$(tjob el_t "$T/el_t" 6)"
    check_eq "el_t (torchrun) accepted" "$STATUS" 200
    check "el_t SUCCEEDED" wait_state el_t SUCCEEDED 120
    LT=$T/d/jobs/p1/el_t/log.tsv
    check "worker 0 (the gang's allocation) was in torchrun's group of two" grep -q "master-replica-0	rank [01] done in a group of 2" "$LT"
    check "worker 1 (an allocation of its own) was in the group of two" grep -q "worker-replica-0	rank [01] done in a group of 2" "$LT"
    check "no group of one" test "$(grep -c 'group of 1' "$LT")" -eq 0
    check "two allocations ran it" grep -q "Asked for Slurm allocation [0-9]* (kiln-p1-el_t-w0)" "$LT"
    # worker 1's step cancelled mid-run: it starts again alone in its
    # allocation, and torchrun's group re-forms with it
    api POST /v1/projects/p1/jobs "$(tjob el_tk "$T/el_tk" 40)"
    check_eq "el_tk accepted" "$STATUS" 200
    LK=$T/d/jobs/p1/el_tk/log.tsv
    check "el_tk: the group of two took 3 steps" wait_file "$LK" "step 3: all-reduced across 2" 60
    k1=$(sid kiln-p1-el_tk-w0 RUNNING)
    scancel "$(step "$k1")"
    check "el_tk SUCCEEDED after worker 1's step was cancelled" wait_state el_tk SUCCEEDED 150
    check "worker 1 started again alone" grep -q "worker-replica-0 exited with status [0-9]*: starting it again alone" "$LK"
    check_eq "in its allocation: no other asked for" "$(grep -c 'Asked for Slurm allocation' "$LK")" 2
    check "the group re-formed with it (agent restart)" grep -q "joined a group of 2 at step [1-9][0-9]* (restart [1-9])" "$LK"
    check "both finished in a group of two" test "$(grep -c 'done in a group of 2' "$LK")" -eq 2
fi

# ---- workers past minReplicas wait in Slurm's queue, join when granted ----
# each worker asks for 2 GPUs (a whole node); a plain job holds one node
api POST /v1/projects/p1/jobs '{"jobId":"blocker","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"2","type":"NVIDIA_TESLA_T4"},"containerCommand":["sleep","120"]}}}'
check_eq "blocker accepted" "$STATUS" 200
check "blocker RUNNING on one node" wait_state blocker RUNNING 60
api POST /v1/projects/p1/jobs "$(el_job el_3 | sed 's/"containerCommand"/"acceleratorConfig":{"count":"2","type":"NVIDIA_TESLA_T4"},"containerCommand"/g')"
check_eq "el_3 accepted" "$STATUS" 200
check "el_3 RUNNING with minReplicas (1) workers" wait_state el_3 RUNNING 60
check "its worker 1's allocation waits in Slurm's queue" wait_sid kiln-p1-el_3-w0 PENDING 20
p3=$(sid kiln-p1-el_3-w0 PENDING)
sleep 2
check_eq "still pending while the node is held" "$(sid kiln-p1-el_3-w0 RUNNING)" ""
check_eq "elasticWorkers.current 1" "$(current el_3)" 1
# kilnd killed while that allocation waits: the next one takes it over.
# (n2 gets an address of its own meanwhile, 127.0.0.2, loopback too, for
# the moved Worker 0 below: kilnd reads the nodes' addresses at its start)
scontrol update NodeName=n2 NodeAddr=127.0.0.2
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 1
start_kilnd "$T/d" "${KILND_SLURM[@]}"
check "el_3 RUNNING after the kilnd restart" wait_state el_3 RUNNING 10
sleep 2
check "the new kilnd took it over by its name" wait_file "$T/d/jobs/p1/el_3/log.tsv" "Taking over the Slurm allocation $p3 (kiln-p1-el_3-w0)" 5
check_eq "the same pending allocation, none asked twice" "$(squeue -h -n kiln-p1-el_3-w0 -o %i | tr '\n' ' ')" "$p3 "
api POST /v1/projects/p1/jobs/blocker:cancel '{}'
check "worker 1 granted once the node frees up" wait_sid kiln-p1-el_3-w0 RUNNING 40
check_eq "in that allocation" "$(sid kiln-p1-el_3-w0 RUNNING)" "$p3"
cur=""
for _ in $(seq 1 50); do cur=$(current el_3); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "elasticWorkers.current 2" "$cur" 2
check "the added worker got the endpoint" wait_file "$T/d/jobs/p1/el_3/log.tsv" "worker-replica-0	ENV worker-replica-0 ep=" 20

# ---- Slurm requeues worker 1's allocation; cancel: every allocation goes ----
api POST /v1/projects/p1/jobs "$(el_job el_2)"
check_eq "el_2 accepted" "$STATUS" 200
check "el_2 RUNNING" wait_state el_2 RUNNING 60
check "el_2's worker 1 runs" wait_sid kiln-p1-el_2-w0 RUNNING 40
L2=$T/d/jobs/p1/el_2/log.tsv
q0=$(sid kiln-p1-el_2 RUNNING)
q1=$(sid kiln-p1-el_2-w0 RUNNING)
check "el_2's worker 1 said what it got" wait_file "$L2" "worker-replica-0	ENV" 20
scontrol requeue "$q1"
check "the requeued worker leaves" wait_file "$L2" "Slurm ended allocation $q1 of worker-replica-0.*the worker leaves the job" 30
check "another comes (kiln-p1-el_2-w1)" wait_sid kiln-p1-el_2-w1 RUNNING 40
for _ in $(seq 1 50); do [ -z "$(squeue -h -j "$q1" -t PENDING,RUNNING -o %i 2>/dev/null)" ] && break; sleep 0.2; done
check_eq "the requeued allocation is not left in Slurm" "$(squeue -h -j "$q1" -t PENDING,CONFIGURING,RUNNING -o %i 2>/dev/null)" ""
check_eq "Worker 0's allocation ran on" "$(sid kiln-p1-el_2 RUNNING)" "$q0"
cur=""
for _ in $(seq 1 50); do cur=$(current el_2); [ "$cur" = 2 ] && break; sleep 0.1; done
check_eq "el_2: elasticWorkers.current 2 again" "$cur" 2
api POST /v1/projects/p1/jobs/el_2:cancel '{}'
api POST /v1/projects/p1/jobs/el_3:cancel '{}'
check "el_2 CANCELLED" wait_state el_2 CANCELLED 30
check "el_3 CANCELLED" wait_state el_3 CANCELLED 30
check "no allocation of el_2 left" wait_none_left el_2
check "no allocation of el_3 left" wait_none_left el_3
check "el_2's workers were stopped, not finished" test "$(grep -c 'worker done' "$L2")" -eq 0

# ---- Worker 0's allocation lost, its node drained: the job is queued
# again, placed on the other node, every worker with the new endpoint ----
# (a Workers-only job with minReplicas 1 has Worker 0 alone in the gang's
# allocation: it is still the rendezvous host, not a worker that may leave;
# before the fix in on_exit_of the job FAILED here with status 143)
# (n2's address is 127.0.0.2 since the kilnd restart above)
api POST /v1/projects/p1/jobs "$(el_job el_5)"
check_eq "el_5 accepted" "$STATUS" 200
check "el_5's worker 1 runs" wait_sid kiln-p1-el_5-w0 RUNNING 40
L5=$T/d/jobs/p1/el_5/log.tsv
check "el_5's worker 1 said what it got" wait_file "$L5" "worker-replica-0	ENV" 20
m0=$(sid kiln-p1-el_5 RUNNING)
node0=$(squeue -h -j "$m0" -o %N)
ep_old=$(grep -o 'master-replica-0	ENV .*' "$L5" | head -1 | grep -o 'ep=[^ ]*')
scontrol update NodeName="$node0" State=DRAIN Reason=it_slurm_elastic
scancel "$m0"
check "the job is queued again" wait_file "$L5" "Slurm ended allocation $m0 of master-replica-0.*the job is queued again" 30
m0b=""
for _ in $(seq 1 200); do
    m0b=$(sid kiln-p1-el_5 RUNNING)
    [ -n "$m0b" ] && [ "$m0b" != "$m0" ] && break
    m0b=""
    sleep 0.2
done
check "a new gang allocation runs" test -n "$m0b"
node0b=$(squeue -h -j "${m0b:-0}" -o %N 2>/dev/null)
check "on the other node ($node0 drained, now ${node0b:-none})" test -n "$node0b" -a "$node0b" != "$node0"
check "worker 0 said what it got again, in it" wait_file "$T/el_5.master-replica-0.runs" "^${m0b:-none}$" 20
for _ in $(seq 1 100); do [ "$(grep -c 'worker-replica-[0-9]	ENV' "$L5")" -ge 2 ] && break; sleep 0.2; done
check_eq "a worker 1 said what it got again" "$(grep -c 'worker-replica-[0-9]	ENV' "$L5")" 2
sleep 1
ep_w0=$(grep -o 'master-replica-0	ENV .*' "$L5" | tail -1 | grep -o 'ep=[^ ]*')
ep_w1=$(grep -o 'worker-replica-[0-9]	ENV .*' "$L5" | tail -1 | grep -o 'ep=[^ ]*')
check "Worker 0's endpoint changed" test -n "$ep_w0" -a "$ep_w0" != "$ep_old"
check_eq "worker 1 got Worker 0's new one" "$ep_w1" "$ep_w0"
scontrol update NodeName="$node0" State=RESUME
touch "$T/el_5.stop"
check "el_5 SUCCEEDED" wait_state el_5 SUCCEEDED 60
check "no allocation of el_5 left" wait_none_left el_5
finish
