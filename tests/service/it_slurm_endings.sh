#!/bin/bash
# tests/service/it_slurm_endings.sh - one rule for the end of a replica
# under --executor slurm, each ending made on the test cluster
# (tests/service/slurm_cluster.sh) from outside kiln, as Slurm or its admin
# would, and told apart by Slurm's own record of the allocation:
#   - requeued (scontrol requeue): Slurm took the allocation away; the job
#     is queued again and runs to SUCCEEDED, no failure counted;
#   - cancelled (scancel of the allocation by someone else): the same;
#   - node down (scontrol update state=down): the same (Slurm requeues it);
#   - the allocation's own script ended (its batch step killed: Slurm says
#     FAILED, JobLaunchFailure): not Slurm's doing but a set-up that cannot
#     work: it counts for the restart policy (OnFailure, backoffLimit 1): the
#     job is queued again for a new allocation, and the second time it is
#     FAILED, naming Slurm's record;
#   - a replica that exits non-zero at once, every time: FAILED after
#     backoffLimit restarts, never queued again;
#   - a node DOWN mid-job (then drained): the job is queued again and
#     resumes from its checkpoint on the other node.
# (Preemption and time limits end an allocation as PREEMPTED and TIMEOUT:
# svc_test_slurm_alloc reads those states; this cluster has no preemption
# and checks time limits only every 30 s.)
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=15000-15799 # the cluster's own daemons listen on 15900-15992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 15900 15992
start_kilnd "$T/d" --executor slurm --grace-period 2 --slurm-partition kiln \
    --allow-root-replicas yes

# kst, alloc_of, waiter: slurm_lib.sh
# taken JOB HOW...: Slurm takes JOB's running allocation away by HOW (a
# command given the allocation's id); the job runs again and SUCCEEDS with
# no failure counted, its log naming Slurm's state
taken() {
    local job=$1 want=$2 id
    shift 2
    api POST /v1/projects/p1/jobs "$(job_json "$job" "$(waiter "$job")")"
    check "$job RUNNING" wait_state "$job" RUNNING 60
    check "$job up" wait_file "$T/d/jobs/p1/$job/log.tsv" "	up$" 30
    id=$(alloc_of "$job")
    check "$job has an allocation ($id)" test -n "$id"
    "$@" "$id"
    check "$job queued again, naming Slurm's $want" \
        wait_file "$T/d/jobs/p1/$job/log.tsv" "Slurm ended allocation $id of .*(\($want\).*the job is queued again (free requeue 1 of at most 10)" 30
    check "$job runs again" wait_file "$T/d/jobs/p1/$job/log.tsv" "	up$" 60
    for _ in $(seq 1 600); do
        [ "$(grep -c '	up$' "$T/d/jobs/p1/$job/log.tsv")" -ge 2 ] && break
        sleep 0.1
    done
    check "$job up a second time" test "$(grep -c '	up$' "$T/d/jobs/p1/$job/log.tsv")" -ge 2
    touch "$T/go.$job"
    check "$job SUCCEEDED" wait_state "$job" SUCCEEDED 60
    check_eq "$job failures" "$(kst "$job" failures)" 0
    check_eq "$job restarts" "$(kst "$job" restarts)" 1
}

# ---- Slurm takes the allocation away: queued again, no charge ----
taken req_1 "PENDING\\|REQUEUED" scontrol requeue
taken cancel_1 "CANCELLED" scancel
node_down() {
    local node
    node=$(squeue -h -j "$1" -o %N)
    echo "$node" >"$T/downed"
    scontrol update nodename="$node" state=down reason=kiln-test
}
taken down_1 "NODE_FAIL\\|PENDING" node_down
# (Slurm requeues a job whose node failed: PENDING; ReturnToService=2 may
# have the node back before the job runs again, so either node may take it)
down=$(cat "$T/downed")
scontrol update nodename="$down" state=resume 2>/dev/null
check "$down back" sh -c "for i in \$(seq 1 300); do sinfo -h -n $down -o %t | grep -q idle && exit 0; sleep 0.1; done; exit 1"

# ---- a node goes DOWN mid-job: the job resumes from its checkpoint elsewhere ----
# (the replica checkpoints its step to its working directory, on the file
# system every node sees, every 0.2 s; its node is downed, then drained so
# that Slurm's ReturnToService cannot hand it straight back)
CK='i=$(cat ckpt 2>/dev/null || echo 0); echo "start at step $i on $SLURMD_NODENAME"; while [ $i -lt 40 ]; do sleep 0.2; i=$((i+1)); echo $i >ckpt.tmp; mv ckpt.tmp ckpt; done; echo finished at step $i'
api POST /v1/projects/p1/jobs "$(job_json ck_1 "$CK")"
check "ck_1 RUNNING" wait_state ck_1 RUNNING 60
check "ck_1 started at step 0" wait_file "$T/d/jobs/p1/ck_1/log.tsv" "start at step 0 on n[0-9]" 30
first=$(grep -o 'start at step 0 on n[0-9]*' "$T/d/jobs/p1/ck_1/log.tsv" | awk '{print $NF}')
for _ in $(seq 1 100); do
    [ "$(cat "$T/d/jobs/p1/ck_1/work/ckpt" 2>/dev/null || echo 0)" -ge 5 ] 2>/dev/null && break
    sleep 0.1
done
scontrol update nodename="$first" state=down reason=kiln-test
scontrol update nodename="$first" state=drain reason=kiln-test 2>/dev/null
check "ck_1 SUCCEEDED" wait_state ck_1 SUCCEEDED 90
starts=$(grep -o 'start at step [0-9]* on n[0-9]*' "$T/d/jobs/p1/ck_1/log.tsv" | tr '\n' ';')
check "ck_1 resumed from its checkpoint on the other node ($starts)" "$PY" -c "
s = [x.split() for x in '$starts'.split(';') if x]
import sys; sys.exit(0 if len(s) == 2 and s[0][3] == '0' and int(s[1][3]) > 0 and s[1][5] != s[0][5] else 1)"
check "ck_1 finished at step 40" grep -q "finished at step 40" "$T/d/jobs/p1/ck_1/log.tsv"
check_eq "ck_1: a restart, no failure" "$(kst ck_1 restarts)/$(kst ck_1 failures)" 1/0
scontrol update nodename="$first" state=resume 2>/dev/null
check "$first back" sh -c "for i in \$(seq 1 300); do sinfo -h -n $first -o %t | grep -q idle && exit 0; sleep 0.1; done; exit 1"

# ---- the allocation's own script ends: the restart policy decides ----
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"script_2","trainingInput":{"scaleTier":"BASIC","region":"us-central1","runPolicy":{"backoffLimit":"1"},"masterConfig":{"restartPolicy":"OnFailure","containerCommand":["sh","-c","echo up; sleep 1000"]}}}')"
kill_script() { # the batch step's script, killed: Slurm records FAILED; sets id
    check "$1 RUNNING" wait_state "$1" RUNNING 60
    check "$1 up" wait_file "$T/d/jobs/p1/$1/log.tsv" "	up$" 30
    id=$(alloc_of "$1")
    check "$1 has an allocation ($id)" test -n "$id"
    scancel --batch --signal=KILL "$id"
}
kill_script script_2
check "script_2 queued again for a new allocation by its policy, naming Slurm's record" \
    wait_file "$T/d/jobs/p1/script_2/log.tsv" "(allocation $id of master-replica-0 ended by itself (FAILED.*queued again for a new allocation (restart policy OnFailure, restart 1 of at most 1)" 30
for _ in $(seq 1 600); do
    [ "$(grep -c '	up$' "$T/d/jobs/p1/script_2/log.tsv")" -ge 2 ] && break
    sleep 0.1
done
old=$id
kill_script script_2
check "script_2 ran in a new allocation ($old -> $id)" test "$id" != "$old"
check "script_2 FAILED" wait_state script_2 FAILED 60
api GET /v1/projects/p1/jobs/script_2
msg=$(printf '%s' "$BODY" | jget errorMessage)
check "script_2 names the limit and Slurm's record ($msg)" \
    grep -q "ended by itself (FAILED.*backoff limit (1 restarts) is reached" <<<"$msg"
check_eq "script_2 failures" "$(kst script_2 failures)" 1

# ---- a replica that exits at start every time: bounded, FAILED ----
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"start_1","trainingInput":{"scaleTier":"BASIC","region":"us-central1","runPolicy":{"backoffLimit":"2"},"masterConfig":{"restartPolicy":"OnFailure","containerCommand":["sh","-c","exit 127"]}}}')"
check "start_1 FAILED" wait_state start_1 FAILED 90
check_eq "start_1 restarts" "$(kst start_1 restarts)" 2
check "start_1 never queued again" sh -c "! grep -q 'queued again' '$T/d/jobs/p1/start_1/log.tsv'"
api GET /v1/projects/p1/jobs/start_1
check "start_1 names the exit" grep -q 'status of 127; the backoff limit (2 restarts) is reached' \
    <<<"$(printf '%s' "$BODY" | jget errorMessage)"
finish
