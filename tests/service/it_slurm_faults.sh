#!/bin/bash
# tests/service/it_slurm_faults.sh - Slurm's own faults under
# `kilnd --executor slurm`, made on the test cluster
# (tests/service/slurm_cluster.sh) as they happen on a real one:
#   - slurmctld stopped while a job runs, for longer than several of
#     kilnd's squeue polls: the running job keeps RUNNING (no restart, no
#     failure: squeue not answering is not an allocation lost); a job
#     created meanwhile is kept QUEUED; kilnd says in its log, once, that
#     Slurm does not answer, and again when it answers;
#   - slurmctld started again from its saved state (a restart, not a new
#     cluster): the running job carries on and SUCCEEDS in the allocation it
#     had, and the job created meanwhile gets its allocation and SUCCEEDS.
# Skipped (77) with the reason where Slurm cannot run here (probe `slurm`).
PORT_RANGE=14000-14799 # the cluster's own daemons listen on 14900-14992
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need slurm mknod
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/slurm_lib.sh"
slurm_test_cluster 14900 14992
start_kilnd "$T/d" --executor slurm --grace-period 2 --slurm-partition kiln \
    --allow-root-replicas yes

# kst, alloc_of, waiter: slurm_lib.sh
ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

api POST /v1/projects/p1/jobs "$(job_json f1 "$(waiter f1)")"
check "f1 RUNNING" wait_state f1 RUNNING 60
check "f1 up" wait_file "$T/d/jobs/p1/f1/log.tsv" "	up$" 30
id1=$(alloc_of f1)
check "f1 has an allocation ($id1)" test -n "$id1"

# ---- slurmctld stops (it saves its state as it goes) ----
kill "$(cat "$CLUSTER/run/slurmctld.pid")"
for _ in $(seq 1 100); do ctld_up || break; sleep 0.1; done
check "slurmctld is down" sh -c '! scontrol ping 2>/dev/null | grep -q "is UP"'
api POST /v1/projects/p1/jobs "$(job_json f2 "$(waiter f2)")"
check_eq "f2 created while Slurm does not answer" "$STATUS" 200
# squeue itself retries slurmctld for MessageTimeout (10 s by default) before
# it fails, so kilnd hears of the outage only then: the test waits for the
# line rather than for a fixed time, then lets more polls go unanswered
check "kilnd's log says Slurm does not answer" wait_file "$T/d/kilnd.err" "kilnd: Slurm does not answer (squeue failed)" 60
sleep 12
check_eq "f1 still RUNNING" "$(job_state f1)" RUNNING
check_eq "f1: no restart" "$(kst f1 restarts)" 0
check_eq "f1: no failure" "$(kst f1 failures)" 0
check "f1 was never queued again" sh -c "! grep -q 'queued again' '$T/d/jobs/p1/f1/log.tsv'"
check_eq "f2 waits" "$(job_state f2)" QUEUED
check "kilnd's log says Slurm does not answer, once" test "$(grep -c 'kilnd: Slurm does not answer (squeue failed): running jobs are kept' "$T/d/kilnd.err")" = 1

# ---- slurmctld starts again from its saved state ----
slurmctld -f "$SLURM_CONF"
for _ in $(seq 1 200); do ctld_up && break; sleep 0.1; done
check "slurmctld is back" ctld_up
check_eq "f1's allocation survived the restart" "$(alloc_of f1)" "$id1"
check "kilnd's log says Slurm answers again" wait_file "$T/d/kilnd.err" "kilnd: Slurm answers again, after [0-9]* s" 60
check "f2 RUNNING once Slurm answers" wait_state f2 RUNNING 90
check "f2 up" wait_file "$T/d/jobs/p1/f2/log.tsv" "	up$" 60
touch "$T/go.f1" "$T/go.f2"
check "f1 SUCCEEDED" wait_state f1 SUCCEEDED 60
check "f2 SUCCEEDED" wait_state f2 SUCCEEDED 60
check_eq "f1: still no restart" "$(kst f1 restarts)/$(kst f1 failures)" 0/0
check "f1 ran once" test "$(grep -c '	up$' "$T/d/jobs/p1/f1/log.tsv")" = 1
finish
