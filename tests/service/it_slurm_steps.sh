#!/bin/bash
# tests/service/it_slurm_steps.sh - kilnd --executor slurm --slurm-launch
# steps: kiln's one supervisor over Slurm, on the two-node test cluster
# (tests/service/slurm_cluster.sh: n1 and n2, 2 fake GPUs each). Slurm places
# each gang as one allocation (a component per role), every replica is a
# step in it (srun --jobid --het-group), and everything else is decided by
# the same supervisor as on one machine:
#   - a master and two workers with a GPU each across both nodes: SUCCEEDED,
#     each worker its own GPU of n2 (Slurm's CUDA_VISIBLE_DEVICES), TF_CONFIG
#     with the nodes' addresses, the allocation gone after;
#   - kiln-train's multi_worker_mirrored mnist and an unmodified PyTorch DDP
#     script (when torch is there) across both nodes;
#   - restartPolicy Always: the gang restarted in its allocation;
#   - what can never fit fails at once with kiln's reason; a nodeSelector
#     label Slurm has no meaning for is refused at create, named;
#   - OnFailure restarts in the same allocation (one sbatch);
#   - cancel: SIGTERM reaches the program (scancel --signal of its step);
#   - activeDeadlineSeconds fails the job, the allocation given back;
#     ttlSecondsAfterFinished cleans the job's files, its Slurm files too;
#   - kilnd killed (-9) mid-job: the next one adopts the replicas, one
#     allocation; killed while its allocation waits in Slurm: the next one
#     takes the same allocation by name;
#   - an allocation Slurm ends under a running job (scancel by hand): the job
#     is queued again and runs in a new one;
#   - elastic PyTorchJob: minReplicas in the gang, the next worker an
#     allocation of its own that joins when Slurm grants it;
#   - torchrun's c10d group of two across the gang's allocation and a
#     worker's own (with torch); that worker's allocation cancelled: it
#     leaves, another comes in an allocation of its own, the group re-forms;
#   - elasticPolicy.metrics (cpu): Slurm's job accounting (sstat) measures
#     the workers; busy, a worker is added in an allocation of its own, idle,
#     taken away and its allocation given back; GPU utilisation refused;
#   - tuning: each trial an allocation of its own, 2 at once;
#   - `kiln nodes drain` of a running job's node: requeued onto the other;
#   - a container replica with a GPU: podman on the node, the GPU Slurm chose
#     given through CDI (--device nvidia.com/gpu=N) and renumbered inside.
#   - elastic workers in containers (the host's Python and torch): torchrun's
#     c10d group of two across the gang's allocation and a worker's own;
#     that worker's allocation cancelled, the group re-forms with another.
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=17000-17799 # the cluster's own daemons listen on 17900-17992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod # the cluster's fake GPUs are device nodes
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 17900 17992

# podman through a wrapper that records each command line and leaves out
# --device (the cluster's GPUs are fake: no CDI spec on these nodes)
slurm_podman_wrap
KILND_STEPS=(--executor slurm --slurm-launch steps --slurm-partition kiln
    --slurm-gpu-type NVIDIA_TESLA_T4=t4 --kiln-train "$BUILD/bin/kiln-train"
    --container-runtime "$T/podman-wrap" --hpa-sync-period 1 --hpa-downscale-stabilization 2
    --grace-period 3)
# (a grace of 3 s, not lib.sh's 1: a cancelled step's last words travel
# slurmctld, slurmd and srun before they reach the log, which under ASan on
# a loaded CI machine took over a second; every program here ends on TERM,
# so nothing waits the grace out)
start_kilnd "$T/d" "${KILND_STEPS[@]}"

q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }
# gang JOB MASTER_CMD WORKER_CMD [extra trainingInput members]: a master with
# 1 T4 and two workers with 1 T4 each
gang() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"2","workerConfig":{"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$(q "$2")" "$(q "$3")" "${4:-}"
}
# allocs JOB [TAG]: how many allocations kilnd asked Slurm for (each writes
# its layout once it runs)
allocs() { ls "$T/d/jobs/p1/$1/slurm/kiln-p1-$1${2:-}"/layout.* 2>/dev/null | wc -l; }
# live NAME: Slurm jobs of that name still pending or running
live() { squeue -h -n "$1" -t PENDING,CONFIGURING,RUNNING,COMPLETING -o %i 2>/dev/null | sort -u | wc -l; }
wait_gone() { # wait_gone NAME [SECONDS]
    for _ in $(seq 1 $((${2:-10} * 5))); do
        [ "$(live "$1")" = 0 ] && return 0
        sleep 0.2
    done
    squeue -h -o '%i %j %T' >&2
    return 1
}
# LOGS JOB: a finished job's log lines (stream-logs follows a running job)
LOGS() { "$KILN" jobs stream-logs "$1" 2>&1; }

# ---- nodes: Slurm's, in kiln's book ----
"$KILN" nodes list >"$T/nodes" 2>&1
check "nodes list shows n1 and n2" grep -q '^n2 ' "$T/nodes"
check "their GPUs as kiln's type" grep -q 'NVIDIA_TESLA_T4=2' "$T/nodes"

# ---- a gang across both nodes ----
prog='echo "ME $KILN_TASK_NAME node=$SLURMD_NODENAME cvd=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID"; echo "TFC $TF_CONFIG"; sleep 2'
t0=$(date +%s.%N)
api POST /v1/projects/p1/jobs "$(gang g1 "$prog" "$prog")"
check_eq "g1 created" "$STATUS" 200
check "g1 RUNNING" wait_state g1 RUNNING 60
t1=$(date +%s.%N)
echo "create to RUNNING, Slurm placing: $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s" >&2
check "g1 SUCCEEDED" wait_state g1 SUCCEEDED 60
LOGS g1 >"$T/g1.logs"
check "the master ran on a node of its own (n1)" grep -q 'ME master-replica-0 node=n1 cvd=0' "$T/g1.logs"
check "its nodes read from squeue (each component on one node: no wait for the batch script)" \
    grep -q 'runs (.*its nodes from squeue' "$T/g1.logs"
w0=$(grep -o 'ME worker-replica-0 node=[^ ]* cvd=[^ ]*' "$T/g1.logs")
w1=$(grep -o 'ME worker-replica-1 node=[^ ]* cvd=[^ ]*' "$T/g1.logs")
check "worker 0 on n2 ($w0)" grep -q 'node=n2' <<<"$w0"
check "worker 1 on n2 ($w1)" grep -q 'node=n2' <<<"$w1"
check "the workers hold different GPUs" test "${w0##*cvd=}" != "${w1##*cvd=}"
check "TF_CONFIG names the nodes' addresses and kiln's ports" \
    grep -q 'TFC {"cluster":{"master":\["127.0.0.1:17[0-9]*"\],"worker":\["127.0.0.1:17[0-9]*","127.0.0.1:17[0-9]*"\]}' "$T/g1.logs"
check_eq "one allocation asked for" "$(allocs g1)" 1
check "the allocation is given back" wait_gone kiln-p1-g1 10
api GET /v1/projects/p1/jobs/g1
check "kilnStatus names the Slurm allocation" grep -q '"slurmAllocation"' <<<"$BODY"

# ---- real training across both nodes: kiln-train's multi_worker_mirrored
# mnist, and an unmodified PyTorch DDP script ----
mnist='"pythonModule":"kiln.mnist","args":["--model=mlp","--train_epochs=1","--train_examples=512","--max_steps=4","--batch_size=96","--distribution_strategy=multi_worker_mirrored"]'
api POST /v1/projects/p1/jobs "$(gang mnist1 x x | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
for c in ("masterConfig", "workerConfig"):
    del j["trainingInput"][c]["containerCommand"]
j["trainingInput"].update(json.loads("{" + sys.argv[1] + "}"))
j["trainingInput"]["jobDir"] = sys.argv[2]
print(json.dumps(j))' "$mnist" "$T/mnistdir")"
check_eq "mnist1 created" "$STATUS" 200
check "mnist1 SUCCEEDED" wait_state mnist1 SUCCEEDED 180
LOGS mnist1 >"$T/mnist.logs"
check "the replicas all-reduced (world of 3)" grep -qiE 'world.?size[ =:]*3|3 replicas|of 3' "$T/mnist.logs"
if probe_torch >/dev/null 2>&1; then
    SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
    api POST /v1/projects/p1/jobs "$(gang ddp1 "cd $HERE && exec $SYSPY -m ddp.train" "cd $HERE && exec $SYSPY -m ddp.train")"
    check_eq "ddp1 created" "$STATUS" 200
    check "ddp1 SUCCEEDED" wait_state ddp1 SUCCEEDED 180
    LOGS ddp1 >"$T/ddp.logs"
    [ "$(job_state ddp1)" = SUCCEEDED ] || tail -n 40 "$T/ddp.logs" >&2
    for r in 0 1 2; do
        check "ddp rank $r in sync" grep -q "rank $r of 3 in sync: True" "$T/ddp.logs"
    done
else
    echo "SKIPPED the DDP part: probe torch: $(probe_torch 2>&1)" >&2
fi

# ---- restartPolicy Always: a worker ending with 0 before the master
# restarts the gang in its allocation; the master's success ends it ----
always_cmd() { # always_cmd WHO FIRST_TIME LATER: by attempt, from a count file
    printf 'n=$(cat %s/always.%s 2>/dev/null || echo 0); echo $((n + 1)) >%s/always.%s; if [ "$n" = 0 ]; then %s; else %s; fi' \
        "$T" "$1" "$T" "$1" "$2" "$3"
}
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"always1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"restartPolicy":"Always","containerCommand":["sh","-c",%s]}}}' \
    "$(q "$(always_cmd master 'sleep 300' 'sleep 2; echo master done')")" "$(q "$(always_cmd worker 'echo worker done' 'echo worker again; sleep 300')")")"
check_eq "always1 created" "$STATUS" 200
check "always1 SUCCEEDED (its worker still running when the master ended)" wait_state always1 SUCCEEDED 60
api GET /v1/projects/p1/jobs/always1
check_eq "always1 restarts" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 1
LOGS always1 >"$T/always.logs"
check "the master finished on the second attempt" grep -q 'master done' "$T/always.logs"
check_eq "one allocation for both attempts" "$(allocs always1)" 1

# ---- never fits, and what Slurm has no meaning for ----
api POST /v1/projects/p1/jobs "$(gang big1 true true | sed 's/"count":"1","type"/"count":"4","type"/g')"
check_eq "big1 created" "$STATUS" 200
check "big1 FAILED" wait_state big1 FAILED 10
api GET /v1/projects/p1/jobs/big1
check "the reason is kiln's" grep -q 'can never run on this cluster' <<<"$(printf '%s' "$BODY" | jget errorMessage)"
check_eq "and nothing went to Slurm" "$(live kiln-p1-big1)" 0
api POST /v1/projects/p1/jobs '{"jobId":"sel1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"],"nodeSelector":{"disk":"ssd"}}}}'
check_eq "a label selector refused at create" "$STATUS" 400
check "naming the field" grep -q 'masterConfig.nodeSelector.disk' <<<"$(printf '%s' "$BODY" | jget error.message)"
api POST /v1/projects/p1/jobs "$(job_json pin1 'echo "pinned $SLURMD_NODENAME"' '' | sed 's/"masterConfig":{/"masterConfig":{"nodeSelector":{"kubernetes.io\/hostname":"n2"},/')"
check_eq "a hostname selector accepted" "$STATUS" 200
check "pin1 SUCCEEDED" wait_state pin1 SUCCEEDED 60
check "on the node it named" grep -q 'pinned n2' <<<"$(LOGS pin1)"

# ---- OnFailure: the same allocation, a second attempt ----
api POST /v1/projects/p1/jobs "$(job_json retry1 "n=\$(cat $T/retry.n 2>/dev/null || echo 0); echo \$((n+1)) >$T/retry.n; echo \"attempt \$n in \$SLURM_JOB_ID\"; [ \$n -ge 1 ]" | sed 's/"masterConfig":{/"masterConfig":{"restartPolicy":"OnFailure",/')"
check_eq "retry1 created" "$STATUS" 200
check "retry1 SUCCEEDED" wait_state retry1 SUCCEEDED 60
api GET /v1/projects/p1/jobs/retry1
check_eq "retry1 restarts" "$(printf '%s' "$BODY" | jget kilnStatus.restarts)" 1
check_eq "both attempts in one allocation" "$(LOGS retry1 | grep -o 'attempt [01] in [0-9]*' | awk '{print $4}' | sort -u | wc -l)" 1

# ---- cancel: SIGTERM reaches the program ----
api POST /v1/projects/p1/jobs "$(job_json sleepy1 "trap \"echo got TERM; echo TERM >$T/sleepy1.term; exit 143\" TERM; echo up; sleep 300 & wait")"
check "sleepy1 RUNNING" wait_state sleepy1 RUNNING 60
check "sleepy1's replica is up" wait_file "$T/d/jobs/p1/sleepy1/log.tsv" "	up$" 30
"$KILN" jobs cancel sleepy1 >/dev/null 2>&1
check "sleepy1 CANCELLED" wait_state sleepy1 CANCELLED 30
check "the program got SIGTERM" wait_file "$T/sleepy1.term" "TERM" 10
check "and what it said then reached the log" grep -q 'got TERM' <<<"$(LOGS sleepy1)"
check "its allocation is given back" wait_gone kiln-p1-sleepy1 10

# ---- activeDeadlineSeconds ----
api POST /v1/projects/p1/jobs "$(job_json dl1 'echo up; sleep 300' ',"runPolicy":{"activeDeadlineSeconds":"2"}')"
check_eq "dl1 created" "$STATUS" 200
check "dl1 FAILED" wait_state dl1 FAILED 30
api GET /v1/projects/p1/jobs/dl1
check "by its deadline" grep -q 'DeadlineExceeded' <<<"$(printf '%s' "$BODY" | jget errorMessage)"
check "dl1's allocation is given back" wait_gone kiln-p1-dl1 10

# ---- ttlSecondsAfterFinished: the job's files go, its Slurm files with them ----
api POST /v1/projects/p1/jobs "$(job_json ttl1 'echo ttl-ran' ',"runPolicy":{"ttlSecondsAfterFinished":"2"}')"
check_eq "ttl1 created" "$STATUS" 200
check "ttl1 SUCCEEDED" wait_state ttl1 SUCCEEDED 60
cleaned=""
for _ in $(seq 1 150); do
    [ ! -e "$T/d/jobs/p1/ttl1/work" ] && [ ! -e "$T/d/jobs/p1/ttl1/slurm" ] && cleaned=1 && break
    sleep 0.1
done
check "ttl1's files, its allocation's included, were cleaned after the TTL" test -n "$cleaned"
check "its log stays" grep -q "	ttl-ran$" "$T/d/jobs/p1/ttl1/log.tsv"

# ---- kill -9 of kilnd mid-job: the replicas run on, the next one adopts them ----
api POST /v1/projects/p1/jobs "$(job_json late1 'echo start; sleep 4; echo done')"
check "late1 RUNNING" wait_state late1 RUNNING 60
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
sleep 1
start_kilnd "$T/d" "${KILND_STEPS[@]}"
check "late1 SUCCEEDED after the kilnd restart" wait_state late1 SUCCEEDED 30
check "late1's replica finished" grep -q 'done' <<<"$(LOGS late1)"
check_eq "one allocation for late1" "$(allocs late1)" 1

# ---- kilnd killed while its allocation waits: the next one takes it ----
blocker=$(sbatch --parsable -p kiln -N2 --exclusive -o /dev/null --wrap 'sleep 300')
api POST /v1/projects/p1/jobs "$(job_json wait1 'echo ran')"
for _ in $(seq 1 50); do [ "$(live kiln-p1-wait1)" = 1 ] && break; sleep 0.2; done
check_eq "wait1's allocation waits in Slurm" "$(squeue -h -n kiln-p1-wait1 -o %T | head -1)" PENDING
api GET /v1/projects/p1/jobs/wait1
check "its state is QUEUED" test "$(printf '%s' "$BODY" | jget state)" = QUEUED
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
start_kilnd "$T/d" "${KILND_STEPS[@]}"
sleep 2
scancel "$blocker"
check "wait1 SUCCEEDED" wait_state wait1 SUCCEEDED 60
check_eq "one allocation for wait1" "$(allocs wait1)" 1

# ---- Slurm ends an allocation under a running job: queued again ----
api POST /v1/projects/p1/jobs "$(job_json lost1 "n=\$(cat $T/lost.n 2>/dev/null || echo 0); echo \$((n+1)) >$T/lost.n; echo up \$n; if [ \$n = 0 ]; then exec sleep 300; fi; echo done")"
check "lost1 RUNNING" wait_state lost1 RUNNING 60
check "lost1 is up" wait_file "$T/d/jobs/p1/lost1/log.tsv" "up 0" 30
scancel -n kiln-p1-lost1
check "lost1 SUCCEEDED in a new allocation" wait_state lost1 SUCCEEDED 60
LOGS lost1 >"$T/lost.logs"
check "the loss is said" grep -q 'Slurm ended allocation' "$T/lost.logs"
check_eq "two allocations for lost1" "$(allocs lost1)" 2

# ---- elastic: the gang is minReplicas, a worker joins as Slurm grants it ----
el_prog="echo \"EL \$KILN_TASK_NAME nn=\$PET_NNODES job=\$SLURM_JOB_ID\"; while [ ! -e $T/el.stop ]; do sleep 0.2; done"
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"el1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":["sh","-c",%s]},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' "$(q "$el_prog")" "$(q "$el_prog")")"
check_eq "el1 created" "$STATUS" 200
check "el1 RUNNING" wait_state el1 RUNNING 60
# (Workers only: kiln's master is PyTorch's Worker 0, the next is worker-replica-0)
check "a second worker joins" wait_file "$T/d/jobs/p1/el1/log.tsv" "EL worker-replica-0" 30
cp "$T/d/jobs/p1/el1/log.tsv" "$T/el.logs" # (stream-logs would follow it to its end)
check "in an allocation of its own (kiln-p1-el1-w0)" test "$(allocs el1 -w0)" = 1
check_eq "the workers are in two Slurm jobs" "$(grep -o 'EL [a-z]*-replica-0 nn=[^ ]* job=[0-9]*' "$T/el.logs" | grep -o 'job=[0-9]*' | sort -u | wc -l)" 2
check "the rendezvous bounds are 1:2" grep -q 'nn=1:2' "$T/el.logs"
touch "$T/el.stop"
check "el1 SUCCEEDED" wait_state el1 SUCCEEDED 30
check "el1's allocations are given back" wait_gone kiln-p1-el1-w0 10

# ---- torchrun's c10d rendezvous across the workers' allocations ----
# (it_pytorchjob's program and launcher, with Debian's python3-torch)
SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
TORCH_WHY=$(torchrun_group_why "$SYSPY")
if [ -z "$TORCH_WHY" ]; then
    mkdir -p "$T/el_t" "$T/el_tk"
    # tcmd STATEDIR STEPS: each worker's command, torchrun over elastic.py
    tcmd() { printf '["env","KILN_ELASTIC_STATE=%s","%s","%s","%s","%s"]' "$1" "$SYSPY" \
        "$HERE/pytorchjob/torchrun.py" "$HERE/pytorchjob/elastic.py" "$2"; }
    tjob() { # tjob ID STATEDIR STEPS
        printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":%s},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"containerCommand":%s},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"rdzvBackend":"c10d","minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' \
            "$1" "$(tcmd "$2" "$3")" "$(tcmd "$2" "$3")"
    }
    api POST /v1/projects/p1/jobs "$(tjob elt1 "$T/el_t" 6)"
    check_eq "elt1 (torchrun) created" "$STATUS" 200
    check "elt1 SUCCEEDED" wait_state elt1 SUCCEEDED 120
    LT=$T/d/jobs/p1/elt1/log.tsv
    check "worker 0 (the gang's allocation) was in torchrun's group of two" grep -q "master-replica-0	rank [01] done in a group of 2" "$LT"
    check "worker 1 (an allocation of its own) was in the group of two" grep -q "worker-replica-0	rank [01] done in a group of 2" "$LT"
    check "no group of one" test "$(grep -c 'group of 1' "$LT")" -eq 0
    # worker 1's allocation cancelled mid-run: it leaves, another is asked
    # of Slurm, and the group re-forms with it
    api POST /v1/projects/p1/jobs "$(tjob eltk "$T/el_tk" 40)"
    check_eq "eltk created" "$STATUS" 200
    LK=$T/d/jobs/p1/eltk/log.tsv
    check "eltk: the group of two took 3 steps" wait_file "$LK" "step 3: all-reduced across 2" 60
    scancel -n kiln-p1-eltk-w0
    check "eltk SUCCEEDED after worker 1's allocation was cancelled" wait_state eltk SUCCEEDED 150
    check "the loss is said" grep -q "Slurm ended allocation [0-9]* of worker-replica-0.*the worker leaves the job" "$LK"
    check "another worker came, in an allocation of its own" test "$(allocs eltk -w1)" = 1
    check "the group re-formed with it" grep -q "joined a group of 2 at step [1-9][0-9]* (restart [1-9])" "$LK"
else
    echo "SKIP (torchrun cases only): $TORCH_WHY" >&2
fi

# ---- elasticPolicy.metrics: Slurm's job accounting measures the workers ----
# (a busy worker is 1000m of its 4 vCPUs' 4000m: 25% against a 10% target)
hpa_prog="echo \"HPA \$KILN_TASK_NAME\"; while :; do if [ -e $T/hpa.busy ]; then :; else sleep 0.2; fi; [ -e $T/hpa.stop ] && exit 0; done"
touch "$T/hpa.busy"
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"hpa1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"minReplicas":"1","maxReplicas":"2","metrics":[{"resource":"cpu","targetType":"Utilization","averageUtilization":"10"}]}}}}' "$(q "$hpa_prog")")"
check_eq "hpa1 created (cpu metrics under Slurm)" "$STATUS" 200
check "the autoscaler adds a worker for the busy one" wait_file "$T/d/jobs/p1/hpa1/log.tsv" "Adding worker-replica-0: the autoscaler wants more workers" 60
check "which runs in an allocation of its own" wait_file "$T/d/jobs/p1/hpa1/log.tsv" "	HPA worker-replica-0" 30
api GET /v1/projects/p1/jobs/hpa1
check "kilnStatus.autoscaler shows Slurm's figure" grep -q '"autoscaler"' <<<"$BODY"
rm -f "$T/hpa.busy"
check "idle, it takes the worker away again" wait_file "$T/d/jobs/p1/hpa1/log.tsv" "Removing worker-replica-0: the autoscaler wants 1 workers" 60
check "and Slurm gets that allocation back" wait_gone kiln-p1-hpa1-w0 20
touch "$T/hpa.stop"
check "hpa1 SUCCEEDED" wait_state hpa1 SUCCEEDED 30
api POST /v1/projects/p1/jobs '{"jobId":"hpagpu","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["true"],"acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"}},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"minReplicas":"1","maxReplicas":"2","metrics":[{"resource":"nvidia.com/gpu","targetType":"Utilization","averageUtilization":"50"}]}}}}'
check_eq "GPU utilisation metrics refused under Slurm" "$STATUS" 400
check "naming the metric" grep -q 'elasticPolicy.metrics\[0\].resource' <<<"$(printf '%s' "$BODY" | jget error.message)"

# ---- tuning: each trial an allocation of its own, 2 at once ----
cmd='lr=${0#--lr=}; echo "{\"loss\": $lr, \"global_step\": \"3\"}" >>"$CLOUD_ML_HP_METRIC_FILE"; echo "trial $CLOUD_ML_TRIAL_ID in $SLURM_JOB_ID"; sleep 2'
hp=',"hyperparameters":{"goal":"MINIMIZE","hyperparameterMetricTag":"loss","maxTrials":4,"maxParallelTrials":2,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}'
api POST /v1/projects/p1/jobs "$(job_json tune1 "$cmd" "$hp")"
check_eq "tune1 created" "$STATUS" 200
most=0
for _ in $(seq 1 600); do
    n=$(squeue -h -t RUNNING -o '%j' 2>/dev/null | grep -c '^kiln-p1-tune1-t')
    [ "$n" -gt "$most" ] && most=$n
    case "$(job_state tune1)" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    sleep 0.1
done
check_eq "tune1 SUCCEEDED" "$(job_state tune1)" SUCCEEDED
check_eq "2 trials' allocations ran at once, never more" "$most" 2
api GET /v1/projects/p1/jobs/tune1
check_eq "4 trials reported" "$(printf '%s' "$BODY" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["trainingOutput"]["trials"]))')" 4
check_eq "each in its own Slurm job" "$(LOGS tune1 | grep -o 'trial [0-9]* in [0-9]*' | awk '{print $4}' | sort -u | wc -l)" 4

# ---- drain: the job moves to the other node ----
api POST /v1/projects/p1/jobs "$(job_json dr1 "echo \"on \$SLURMD_NODENAME\"; n=\$(cat $T/dr.n 2>/dev/null || echo 0); echo \$((n+1)) >$T/dr.n; if [ \$n = 0 ]; then sleep 300; fi" | sed 's/"masterConfig":{/"masterConfig":{"nodeSelector":{"kubernetes.io\/hostname":"n1"},/')"
check "dr1 RUNNING on n1" wait_file "$T/d/jobs/p1/dr1/log.tsv" "on n1" 60
api POST /v1/projects/p1/jobs "$(job_json dr2 "echo \"on \$SLURMD_NODENAME\"; n=\$(cat $T/dr2.n 2>/dev/null || echo 0); echo \$((n+1)) >$T/dr2.n; if [ \$n = 0 ]; then sleep 300; fi")"
check "dr2 RUNNING" wait_file "$T/d/jobs/p1/dr2/log.tsv" "	on n" 60
node2=$(grep -o '	on n[12]' "$T/d/jobs/p1/dr2/log.tsv" | head -1 | tr -d '\t' | awk '{print $2}')
"$KILN" nodes drain "$node2" >/dev/null 2>&1
check "dr2 runs again on the other node" wait_file "$T/d/jobs/p1/dr2/log.tsv" "	on $([ "$node2" = n1 ] && echo n2 || echo n1)" 60
check "dr2 SUCCEEDED" wait_state dr2 SUCCEEDED 30
check "Slurm drained $node2" grep -qi 'drain' <<<"$(sinfo -h -n "$node2" -o %T)"
"$KILN" nodes uncordon "$node2" >/dev/null 2>&1
"$KILN" jobs cancel dr1 >/dev/null 2>&1
check "dr1 CANCELLED" wait_state dr1 CANCELLED 30

# ---- a container replica with a GPU ----
if probe_podman >/dev/null 2>&1; then
    make_image kiln-test-steps
    api POST /v1/projects/p1/jobs "$(printf '{"jobId":"ctr1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"imageUri":"localhost/kiln-test-steps","imagePullPolicy":"Never","acceleratorConfig":{"count":"1","type":"NVIDIA_TESLA_T4"},"containerCommand":["sh","-c","echo \\"in $(hostname) cvd=$CUDA_VISIBLE_DEVICES\\""]}}}')"
    check_eq "ctr1 created" "$STATUS" 200
    check "ctr1 SUCCEEDED" wait_state ctr1 SUCCEEDED 90
    check "the program ran in its container, CUDA counting from 0" grep -q 'in kiln-p1-ctr1-master-replica-0 cvd=0' <<<"$(LOGS ctr1)"
    check "podman got the GPU Slurm gave the step" grep -qE -- '--device nvidia.com/gpu=[01] .*kiln-test-steps.* CVD=0$' "$T/podman-args.log"
    # elastic workers in containers under steps: torchrun's c10d group of two
    # forms across the gang's allocation and a worker's own, each container
    # a node of its own name (the image is the host's: /usr and /etc mounted
    # read-only by the wrapper, as it_pytorchjob's node config does)
    if "$SYSPY" -c 'import torch.distributed.run' 2>/dev/null && host_image localhost/kiln-test-elastic; then
        mkdir -p "$T/el_c"
        elc() { printf '["env","KILN_ELASTIC_STATE=%s","%s","%s","%s","6"]' "$T/el_c" "$SYSPY" \
            "$HERE/pytorchjob/torchrun.py" "$HERE/pytorchjob/elastic.py"; }
        img='"imageUri":"localhost/kiln-test-elastic","imagePullPolicy":"Never"'
        api POST /v1/projects/p1/jobs "$(printf '{"jobId":"elc1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{%s,"containerCommand":%s},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{%s,"containerCommand":%s},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"rdzvBackend":"c10d","minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' \
            "$img" "$(elc)" "$img" "$(elc)")"
        check_eq "elc1 (torchrun in containers) created" "$STATUS" 200
        check "elc1 SUCCEEDED" wait_state elc1 SUCCEEDED 150
        LC=$T/d/jobs/p1/elc1/log.tsv
        check "its workers ran in containers" test "$(grep -c 'container kiln-p1-elc1-.* of image localhost/kiln-test-elastic' "$LC")" -ge 2
        check "worker 0 (the gang's allocation) was in the group of two" grep -q "master-replica-0	rank [01] done in a group of 2" "$LC"
        check "worker 1 (an allocation of its own) was in the group of two" grep -q "worker-replica-0	rank [01] done in a group of 2" "$LC"
        check "no group of one" test "$(grep -c 'group of 1' "$LC")" -eq 0
        grep -q "worker-replica-0	rank [01] done in a group of 2" "$LC" || tail -n 30 "$LC" >&2
        # and shrinks: worker 1's allocation cancelled mid-run, its container
        # leaves, another comes in an allocation of its own, the group re-forms
        mkdir -p "$T/el_ck"
        elk() { printf '["env","KILN_ELASTIC_STATE=%s","%s","%s","%s","40"]' "$T/el_ck" "$SYSPY" \
            "$HERE/pytorchjob/torchrun.py" "$HERE/pytorchjob/elastic.py"; }
        api POST /v1/projects/p1/jobs "$(printf '{"jobId":"elck","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{%s,"containerCommand":%s},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{%s,"containerCommand":%s},"pytorchJob":{"workersOnly":true,"elasticPolicy":{"rdzvBackend":"c10d","minReplicas":"1","maxReplicas":"2","maxRestarts":"3"}}}}' \
            "$img" "$(elk)" "$img" "$(elk)")"
        check_eq "elck created" "$STATUS" 200
        LCK=$T/d/jobs/p1/elck/log.tsv
        check "elck: the containers' group of two took 3 steps" wait_file "$LCK" "step 3: all-reduced across 2" 90
        scancel -n kiln-p1-elck-w0
        check "elck SUCCEEDED after worker 1's allocation was cancelled" wait_state elck SUCCEEDED 150
        check "another worker came, in an allocation of its own" test "$(allocs elck -w1)" = 1
        check "the containers' group re-formed with it" grep -q "joined a group of 2 at step [1-9][0-9]* (restart [1-9])" "$LCK"
    else
        echo "SKIPPED elastic containers: no torch.distributed in $SYSPY, or the host image failed" >&2
    fi
else
    echo "SKIPPED the container part: probe podman: $(probe_podman 2>&1)" >&2
fi

# ---- a project's own user: its allocation and its replicas are the user's ----
if probe_runas >/dev/null 2>&1; then
    chmod 711 "$CLUSTER/munge" # the user's srun reaches munged's socket (the key stays root's)
    U=kilnsteps$$
    if useradd -r -M -s /usr/sbin/nologin "$U"; then
        AT_EXIT="$AT_EXIT; userdel $U >/dev/null 2>&1"
        uid=$(id -u "$U") gid=$(id -g "$U")
        chmod 755 "$T" # the user's replicas reach the data dir below it
        TOKEN=tok-editor-0123456789abcdef
        printf '%s * editor\nproject p1 user %s\n' "$TOKEN" "$U" >"$T/tokens"
        chmod 600 "$T/tokens"
        export TOKEN
        stop_kilnd
        NO_ROOT_OK=1 start_kilnd "$T/d" "${KILND_STEPS[@]}" --tokens "$T/tokens"
        api POST /v1/projects/p1/jobs "$(job_json user1 'echo "IDS $(id -u) $(id -g)"; touch made-by-replica')"
        check_eq "user1 created" "$STATUS" 200
        check "user1 SUCCEEDED" wait_state user1 SUCCEEDED 60
        J=$T/d/jobs/p1/user1
        check "the replica ran as the project's user" grep -q "	IDS $uid $gid$" "$J/log.tsv"
        check_eq "its file is the user's" "$(stat -c %u "$J/work/made-by-replica" 2>/dev/null)" "$uid"
        check_eq "the allocation was the user's (its batch script wrote the layout)" \
            "$(stat -c %u "$J"/slurm/kiln-p1-user1/layout.* 2>/dev/null)" "$uid"
    else
        fail "useradd $U"
    fi
else
    echo "SKIPPED the project-user part: probe runas: $(probe_runas 2>&1)" >&2
fi

finish
