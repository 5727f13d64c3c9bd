#!/bin/bash
# tests/service/it_slurm.sh - kilnd --executor slurm (kiln's one supervisor; each
# job's gang one Slurm allocation, every replica a step in it) on a real Slurm cluster
# started here (tests/service/slurm_cluster.sh: munged, slurmctld, two slurmd
# n1 and n2 with 2 fake GPUs each, all under $T):
#   - kiln-train's multi_worker_mirrored mnist, master + 2 workers with 1 GPU
#     each, runs to SUCCEEDED across both nodes, every replica's lines in
#     `kiln jobs stream-logs`, TF_CONFIG from the allocation;
#   - an unmodified PyTorch DDP script (tests/service/ddp) the same way;
#   - a job asking for more GPUs per replica than any node has fails at once,
#     naming what is missing;
#   - cancel: SIGTERM through scancel, the job CANCELLED, Slurm's job gone;
#   - kilnd killed (-9) while a job runs: its allocation and replicas are
#     untouched, and the next kilnd adopts them to SUCCEEDED (a kilnd killed
#     while the allocation waits: it_slurm_steps.sh);
#   - restart policies: OnFailure fails once then succeeds (restarts 1, in
#     the same allocation), ExitCode 3 fails at once, backoffLimit 1 stops
#     after one restart; scheduling.priority is the allocation's Slurm nice;
#   - `kiln nodes drain` of a running job's node: stopped, a new allocation on
#     the other node, resumed from its checkpoint, SUCCEEDED, restarts 1;
#   - jobPosition is the job's place in Slurm's pending queue (other users'
#     jobs counted) while its allocation waits, and follows Slurm when it
#     reorders;
#   - `kiln nodes list` shows Slurm's nodes, `kiln nodes drain` drains in Slurm.
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=44000-44799 # the cluster's own daemons listen on 44900-44992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod # the cluster's fake GPUs are device nodes
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 44900 44992
# the cluster's GPUs are typed GRES gpu:t4; kiln's NVIDIA_TESLA_T4 maps to them
# --grace-period 5 (after start_kilnd's 1): a loaded box once took longer than
# 1 s from the cancel's SIGTERM to the replica's "got TERM" in the job's log
KILND_SLURM=(--executor slurm --grace-period 5 --slurm-partition kiln --kiln-train "$BUILD/bin/kiln-train"
    --slurm-gpu-type NVIDIA_TESLA_T4=t4)
start_kilnd "$T/d" "${KILND_SLURM[@]}"

gpu_job() { # gpu_job ID GPUS_PER_REPLICA TRAINING_INPUT_MEMBERS [MASTER_CONFIG_MEMBERS]
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1",%s,"masterType":"n1-standard-4","masterConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_T4"}%s},"workerType":"n1-standard-4","workerCount":"2","workerConfig":{"acceleratorConfig":{"count":"%s","type":"NVIDIA_TESLA_T4"}}}}' \
        "$1" "$3" "$2" "${4:+,$4}" "$2"
}

restarts() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.restarts
}

# ---- nodes: Slurm's ----
"$KILN" nodes list >"$T/nodes" 2>&1
check "nodes list shows n1" grep -q '^n1 ' "$T/nodes"
check "nodes list shows n2" grep -q '^n2 ' "$T/nodes"
check "nodes list shows their GPUs as kiln's type" grep -q 'NVIDIA_TESLA_T4=2' "$T/nodes"

# ---- kiln-train's multi_worker_mirrored mnist across both nodes ----
t0=$(date +%s.%N)
api POST /v1/projects/p1/jobs "$(gpu_job mnist_1 1 "\"pythonModule\":\"kiln.mnist\",\"jobDir\":\"$T/jobdir\",\"args\":[\"--model=mlp\",\"--train_epochs=1\",\"--train_examples=512\",\"--max_steps=4\",\"--batch_size=96\",\"--distribution_strategy=multi_worker_mirrored\"]")"
check_eq "mnist created" "$STATUS" 200
check "mnist RUNNING" wait_state mnist_1 RUNNING 60
t1=$(date +%s.%N)
echo "create to RUNNING through Slurm: $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s" >&2
check "mnist SUCCEEDED" wait_state mnist_1 SUCCEEDED 180
"$KILN" jobs stream-logs mnist_1 >"$T/mnist.logs" 2>&1
for t in master-replica-0 worker-replica-0 worker-replica-1; do
    check "$t logged" grep -q "$t" "$T/mnist.logs"
done
check "the replicas all-reduced (world of 3)" grep -qiE 'world.?size[ =:]*3|3 replicas|of 3' "$T/mnist.logs"
api GET /v1/projects/p1/jobs/mnist_1
hosts=$(for r in 0 1 2; do printf '%s' "$BODY" | jget kilnStatus.replicas.$r.node; done | sort -u | tr '\n' ' ')
check_eq "replicas' nodes" "$hosts" "n1 n2 "
check "typed GRES asked for" grep -q -- '--gpus-per-task=t4:1' "$T/d/jobs/p1/mnist_1/slurm/kiln-p1-mnist_1/kiln-p1-mnist_1.sh"

# ---- a GPU type the site did not map is refused at create, named ----
api POST /v1/projects/p1/jobs "$(gpu_job v100_1 1 '"jobDir":"/tmp"' '"containerCommand":["true"]' | sed 's/NVIDIA_TESLA_T4/NVIDIA_TESLA_V100/g')"
check_eq "unmapped GPU type refused" "$STATUS" 400
check "the refusal names it" grep -q 'NVIDIA_TESLA_V100 has no GPU type on this Slurm cluster' <<<"$BODY"

# ---- what Slurm has no meaning for is refused at create, the field named ----
# (container images run: it_slurm_container.sh; runtimeVersion and
# packageUris as on one machine)
api POST /v1/projects/p1/jobs '{"jobId":"sel_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["true"],"nodeSelector":{"cloud.google.com/gke-nodepool":"a"}}}}'
check_eq "a node label refused at create" "$STATUS" 400
check "the refusal names the label" grep -q 'trainingInput.masterConfig.nodeSelector.cloud.google.com/gke-nodepool.*no labels' <<<"$BODY"
# an MPIJob (its ranks as Slurm steps are not done): refused, not failed at start
MPIJOB='{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"mpi-slurm"},"spec":{"slotsPerWorker":1,"mpiReplicaSpecs":{"Launcher":{"replicas":1,"template":{"spec":{"containers":[{"name":"mpi","command":["mpirun","true"]}]}}},"Worker":{"replicas":2,"template":{"spec":{"containers":[{"name":"mpi"}]}}}}}}'
api POST /v1/projects/p1/jobs "$MPIJOB"
check_eq "an MPIJob refused at create" "$STATUS" 400
check "the refusal names MPIJob and the Slurm executor" \
    grep -q 'trainingInput.mpiJob Error: an MPIJob does not run under --executor slurm' <<<"$BODY"
api GET /v1/projects/p1/jobs/mpi_slurm
check_eq "and no such job" "$STATUS" 404
# (ttlSecondsAfterFinished, activeDeadlineSeconds and project users run:
# it_slurm_parity.sh)

# ---- PyTorch DDP, unmodified (gloo) ----
if probe_torch >/dev/null 2>&1; then
    SYSPY=${KILN_TEST_TORCH_PYTHON:-/usr/bin/python3}
    api POST /v1/projects/p1/jobs "$(gpu_job ddp_1 1 "\"jobDir\":\"$T/ddpdir\"" \
        "\"containerCommand\":[\"sh\",\"-c\",\"cd $HERE && exec $SYSPY -m ddp.train\"]")"
    check_eq "ddp created" "$STATUS" 200
    check "ddp SUCCEEDED" wait_state ddp_1 SUCCEEDED 180
    "$KILN" jobs stream-logs ddp_1 >"$T/ddp.logs" 2>&1
    [ "$(job_state ddp_1)" = SUCCEEDED ] || tail -n 40 "$T/ddp.logs" >&2
    for r in 0 1 2; do
        check "ddp rank $r in sync" grep -q "rank $r of 3 in sync: True" "$T/ddp.logs"
    done
else
    echo "SKIPPED the DDP part: probe torch: $(probe_torch 2>&1)" >&2
fi

# ---- never fits: 4 GPUs per replica, nodes have 2 ----
api POST /v1/projects/p1/jobs "$(gpu_job big_1 4 '"jobDir":"/tmp"' '"containerCommand":["true"]')"
check_eq "big job created" "$STATUS" 200
check "big job FAILED" wait_state big_1 FAILED 10
api GET /v1/projects/p1/jobs/big_1
msg=$(printf '%s' "$BODY" | jget errorMessage)
check "never-fits names what is missing ($msg)" grep -q 'the master replica needs 4 x NVIDIA_TESLA_T4 on one node; the most any node has is 2' <<<"$msg"

# ---- <role>Config.env reaches the replica after kiln's own variables ----
api POST /v1/projects/p1/jobs '{"jobId":"env_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","echo \"GREETING=$GREETING TASK=$KILN_TASK_NAME\""],"env":{"GREETING":"hello slurm"}}}}'
check_eq "env_1 created" "$STATUS" 200
check "env_1 SUCCEEDED" wait_state env_1 SUCCEEDED 60
check "the replica saw its env and kiln's" grep -q "GREETING=hello slurm TASK=master-replica-0" "$T/d/jobs/p1/env_1/log.tsv"

# ---- cancel ----
api POST /v1/projects/p1/jobs "$(job_json sleepy_1 'trap "echo got TERM; exit 143" TERM; echo up; sleep 300 & wait')"
check "sleepy RUNNING" wait_state sleepy_1 RUNNING 60
# RUNNING comes once the replica's step is launched; its shell sets its trap
# some time later (kiln-monitor, srun, the step), more than the 1 s this
# waited once in CI on a loaded machine: a TERM before the trap has nothing to
# print. Its "up" comes after the trap.
check "sleepy's replica is up" wait_file "$T/d/jobs/p1/sleepy_1/log.tsv" "	up$" 30
"$KILN" jobs cancel sleepy_1 >/dev/null 2>&1
check "sleepy CANCELLED" wait_state sleepy_1 CANCELLED 30
api GET /v1/projects/p1/jobs/sleepy_1
sid=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.slurmAllocation)
check "the Slurm allocation's id is shown" test -n "$sid"
sleep 1
st=$(squeue -h -j "$sid" -o %T 2>/dev/null | head -1)
case "$st" in "" | CANCELLED | COMPLETED | FAILED) ok ;; *) fail "Slurm job $sid still $st" ;; esac
# its last line crosses slurmstepd, srun and kiln-monitor after the TERM:
# on a loaded machine (CI, once) later than the state's change
check "the replica got SIGTERM" wait_file "$T/d/jobs/p1/sleepy_1/log.tsv" 'got TERM' 15
"$KILN" jobs stream-logs sleepy_1 >"$T/sleepy.logs" 2>&1
check "stream-logs shows it" grep -q 'got TERM' "$T/sleepy.logs"

# ---- jobPosition is Slurm's: its whole partition's pending queue ----
# a job of the cluster's own users holds both nodes, another waits ahead of
# kiln's (nice 0 against kiln's 1000): kiln's own queue would say 1
blocker=$(sbatch --parsable -p kiln -N2 --exclusive -o /dev/null --wrap 'sleep 300')
ahead=$(sbatch --parsable -p kiln -n1 -o /dev/null --wrap 'true')
api POST /v1/projects/p1/jobs "$(job_json queued_1 'echo ran')"
position() { # position JOB WANT SECS: jobPosition reaches WANT
    local i
    for i in $(seq 1 $((${3} * 5))); do
        api GET "/v1/projects/p1/jobs/$1"
        [ "$(printf '%s' "$BODY" | jget jobPosition)" = "$2" ] && return 0
        sleep 0.2
    done
    echo "jobPosition of $1: $(printf '%s' "$BODY" | jget jobPosition), state $(printf '%s' "$BODY" | jget state)" >&2
    return 1
}
check "queued_1 is 2nd in Slurm's queue (behind job $ahead)" position queued_1 2 20
scontrol update JobId="$ahead" Nice=100000 >/dev/null 2>&1
check "queued_1 is 1st once Slurm lowers job $ahead" position queued_1 1 20
scancel "$blocker" "$ahead"
check "queued_1 SUCCEEDED" wait_state queued_1 SUCCEEDED 60

# (restartPolicy Always, kill -9 of kilnd mid-job and while an allocation
# waits: it_slurm_steps.sh)

# ---- restart policies, counted as on one machine; priority is Slurm's nice ----
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"retry_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","scheduling":{"priority":700},"masterConfig":{"restartPolicy":"OnFailure","containerCommand":["sh","-c","if [ -e %s/retry.flag ]; then echo second try; exit 0; fi; touch %s/retry.flag; echo first try; exit 3"]}}}' "$T" "$T")"
check_eq "retry_1 created" "$STATUS" 200
check "OnFailure: retry_1 SUCCEEDED on its second attempt" wait_state retry_1 SUCCEEDED 60
check_eq "retry_1 restarts" "$(restarts retry_1)" 1
check_eq "both attempts in one allocation" "$(squeue -h -t all -n kiln-p1-retry_1 -o %i | wc -l)" 1
check_eq "priority 700 -> Slurm nice 300" "$(squeue -h -t all -n kiln-p1-retry_1 -o %y)" 300
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"permanent_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"restartPolicy":"ExitCode","containerCommand":["sh","-c","exit 3"]}}}')"
check "ExitCode, status 3 (permanent): FAILED" wait_state permanent_1 FAILED 60
check_eq "permanent_1 restarts" "$(restarts permanent_1)" 0
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"backoff_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","runPolicy":{"backoffLimit":"1"},"masterConfig":{"restartPolicy":"OnFailure","containerCommand":["sh","-c","exit 1"]}}}')"
check "backoffLimit 1, always failing: FAILED" wait_state backoff_1 FAILED 60
check_eq "backoff_1 restarts" "$(restarts backoff_1)" 1
api GET /v1/projects/p1/jobs/backoff_1
check "backoff_1 names the limit" grep -q 'backoff limit (1 restarts) is reached' <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# ---- kiln nodes drain: the running job moves off the node and resumes ----
ck=$T/drain.ck
prog="n=0; [ -e $ck ] && n=\$(cat $ck) && echo resumed from \$n; trap 'echo \$n > $ck.tmp && mv $ck.tmp $ck; echo saved \$n; exit 0' TERM; echo up; i=0; while :; do n=\$((n+1)); i=\$((i+1)); if [ -e $ck ] && [ \$i -ge 20 ]; then echo finished at \$n; exit 0; fi; sleep 0.05; done"
api POST /v1/projects/p1/jobs "$(job_json drain_1 "$prog")"
check "drain_1 RUNNING" wait_state drain_1 RUNNING 60
node1=""
for _ in $(seq 1 100); do
    api GET /v1/projects/p1/jobs/drain_1
    node1=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.node)
    [ -n "$node1" ] && break
    sleep 0.1
done
check "drain_1's node is known ($node1)" test -n "$node1"
# as for sleepy_1: drain only once the trap is set (its "up"), or the TERM
# finds a shell with nothing to save
check "drain_1's replica is up" wait_file "$T/d/jobs/p1/drain_1/log.tsv" "	up$" 30
sleep 1 # some steps to save: the resume check wants a count above 0
"$KILN" nodes drain "$node1" >/dev/null 2>&1
check_eq "drain $node1 exit" "$?" 0
check "drain_1 SUCCEEDED after the move" wait_state drain_1 SUCCEEDED 90
check_eq "drain_1 restarts" "$(restarts drain_1)" 1
api GET /v1/projects/p1/jobs/drain_1
node2=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.node)
check "drain_1 ran again on another node ($node1 -> $node2)" test -n "$node2" -a "$node2" != "$node1"
"$KILN" jobs stream-logs drain_1 >"$T/drain.logs" 2>&1
check "drain_1 resumed from its checkpoint" grep -qE 'resumed from [1-9]' "$T/drain.logs"
check "drain_1 finished" grep -q 'finished at' "$T/drain.logs"
check "the drain is in the job's log" grep -q 'being drained' "$T/drain.logs"
check "moved in an allocation of its own" test "$(squeue -h -t all -n kiln-p1-drain_1 -o %i | wc -l)" = 2
"$KILN" nodes uncordon "$node1" >/dev/null 2>&1

# ---- drain in Slurm ----
"$KILN" nodes drain n2 >/dev/null 2>&1
check_eq "drain exit" "$?" 0
check "n2 drained in Slurm" sh -c "sinfo -h -n n2 -o %t | grep -q drain"
"$KILN" nodes list >"$T/nodes2" 2>&1
check "nodes list shows the drain and its reason" grep -qE '^n2 .* yes .*slurm: [a-z]*\+?drain.*: kiln nodes drain' "$T/nodes2"
"$KILN" nodes uncordon n2 >/dev/null 2>&1
check "n2 back" sh -c "sinfo -h -n n2 -o %t | grep -qv drain"

# ---- what kilnd cannot act on keeps it from starting, said ----
refused() { # refused WHAT ARGS...: kilnd exits 1 at once, having made nothing, its words in $T/refused.err
    local what=$1
    shift
    timeout 20 "$KILND" --listen 127.0.0.1:0 --data-dir "$T/refused" "$@" 2>"$T/refused.err"
    check_eq "$what: kilnd exit" "$?" 1
    check "$what: no data dir made" test ! -e "$T/refused"
}
refused "--slurm-partition without --executor slurm" --slurm-partition kiln
check "names the flag" grep -q -- '--slurm-partition needs --executor slurm' "$T/refused.err"
echo '{"nodes": [{"name": "a", "address": "127.0.0.1"}]}' >"$T/nodes.json"
refused "--node-config under Slurm" "${KILND_SLURM[@]}" --allow-root-replicas yes --node-config "$T/nodes.json"
check "names --node-config" grep -q -- "--node-config is the local executor's" "$T/refused.err"
refused "root replicas not allowed" "${KILND_SLURM[@]}"
check "names --allow-root-replicas" grep -q 'would run every replica as root' "$T/refused.err"

# ---- CPU and memory from machine types (--slurm-machine-resources yes) ----
printf 'machineTypes:\n  - {name: slurm-small, family: compute-engine, vcpus: 2, memoryGb: 1.5}\n' >"$T/site.yaml"
stop_kilnd
start_kilnd "$T/d" "${KILND_SLURM[@]}" --slurm-machine-resources yes --catalog "$T/site.yaml"
api POST /v1/projects/p1/jobs '{"jobId":"small_1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"slurm-small","masterConfig":{"containerCommand":["sh","-c","echo cpus $SLURM_CPUS_PER_TASK"]}}}'
check_eq "small_1 created" "$STATUS" 200
check "small_1 SUCCEEDED" wait_state small_1 SUCCEEDED 60
check "2 CPUs and 768 MB per CPU asked for" grep -q -- '--cpus-per-task=2 .*--mem-per-cpu=768' "$T/d/jobs/p1/small_1/slurm/kiln-p1-small_1/kiln-p1-small_1.sh"
"$KILN" jobs stream-logs small_1 >"$T/small.logs" 2>&1
check "Slurm gave the replica 2 CPUs" grep -q 'cpus 2' "$T/small.logs"
api POST /v1/projects/p1/jobs '{"jobId":"wide_1","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-8","masterConfig":{"containerCommand":["true"]}}}'
check "wide_1 never fits" wait_state wide_1 FAILED 20
api GET /v1/projects/p1/jobs/wide_1
check "never-fits names the CPUs" grep -q 'no node has room for the master replica (8 vCPUs' <<<"$(printf '%s' "$BODY" | jget errorMessage)"
finish
