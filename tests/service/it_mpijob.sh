#!/bin/bash
# tests/service/it_mpijob.sh - MPIJobs (kubeflow.org/v1 and v2beta1) on a
# real kilnd, as processes: the launcher's unmodified `mpirun` (no
# --hostfile, no agent named: the operators' environment says both) starts
# an MPI all-reduce (mpijob/allreduce.c) over 2 Workers x 2 slots through
# kiln-mpi-agent, each rank on the worker the hostfile names; the job's state
# follows the launcher. Also: launcherCreationPolicy WaitForWorkersReady,
# runLauncherAsWorker, a failing launcher (Never: FAILED; v2beta1's
# OnFailure: restarted, then SUCCEEDED), a failing worker (its ranks go with
# it, the job FAILS), and cancel (no rank left running).
# Skipped (77) where OpenMPI is not installed.
PORT_RANGE=${PORT_RANGE:-15000-15099}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need openmpi
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/mpijob/lib.sh" # mpijob (the YAML), ranks_ok
mpicc -O1 -o "$T/allreduce" "$HERE/mpijob/allreduce.c" || {
    fail "cannot build the MPI program"
    finish
}
AR=$T/allreduce
# the ranks of a job of `$AR 300` (a pattern that matches no pgrep's own line)
RANKS="$T/[a]llreduce 300"
start_kilnd "$T/d"
# kilnd's tests run as root: OpenMPI wants to be told that is meant
ROOT=--allow-run-as-root

# ---- v1: the training operator's env, Workers without a command ----
mpijob v1 allreduce-v1 "[/bin/sh, -c, 'echo agent=\$OMPI_MCA_plm_rsh_agent; cat \$OMPI_MCA_orte_default_hostfile; exec mpirun $ROOT -np 4 $AR']" \
    "  cleanPodPolicy: Running" >"$T/v1.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/v1.yaml" >"$T/v1.out" 2>&1
check_eq "MPIJob v1 submitted" "$?" 0
check "MPIJob v1 SUCCEEDED" wait_state allreduce_v1 SUCCEEDED 120
"$KILN" jobs stream-logs allreduce_v1 >"$T/v1.logs" 2>&1
check "v1: 4 ranks summed to 10, 2 on each worker" ranks_ok allreduce_v1 "$T/v1.logs"
check "v1: the rsh agent is kiln-mpi-agent" grep -q "agent=.*/kiln-mpi-agent$" "$T/v1.logs"
check "v1: the hostfile's lines are the operator's" grep -q "	allreduce-v1-worker-1 slots=2$" "$T/v1.logs"
check "v1: each worker's log notes the ranks it hosted" \
    grep -q "kiln-mpi-agent: started the launcher's command" "$T/d"/jobs/*/allreduce_v1/replicas/worker-replica-1.log
check "v1: a worker without a command sleeps (as the operator makes it)" \
    grep -q "Started worker-replica-0 .*: sleep" "$T/v1.logs"

# ---- v2beta1: mpi-operator's env, WaitForWorkersReady ----
mpijob v2beta1 allreduce-v2 "[/bin/sh, -c, 'echo role=\$K_MPI_JOB_ROLE slots=\$OMPI_MCA_orte_set_default_slots; exec mpirun $ROOT -n 4 $AR']" \
    "  launcherCreationPolicy: WaitForWorkersReady
  mpiImplementation: OpenMPI" "[/bin/sh, -c, 'echo worker role=\$K_MPI_JOB_ROLE; exec sleep 300']" >"$T/v2.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/v2.yaml" >"$T/v2.out" 2>&1
check_eq "MPIJob v2beta1 submitted" "$?" 0
check "MPIJob v2beta1 SUCCEEDED" wait_state allreduce_v2 SUCCEEDED 120
"$KILN" jobs stream-logs allreduce_v2 >"$T/v2.logs" 2>&1
check "v2beta1: 4 ranks summed to 10, 2 on each worker" ranks_ok allreduce_v2 "$T/v2.logs"
check "v2beta1: K_MPI_JOB_ROLE and the default slots on the launcher" grep -q "role=launcher slots=2" "$T/v2.logs"
check "v2beta1: K_MPI_JOB_ROLE on the workers" grep -q "worker role=worker" "$T/v2.logs"
check "v2beta1: the launcher started once both workers ran" \
    grep -q "Every worker runs: starting the launcher" "$T/v2.logs"
check "v2beta1: ... and after them" test "$(grep -n 'Started master-replica-0' "$T/v2.logs" | head -1 | cut -d: -f1)" -gt \
    "$(grep -n 'Started worker-replica-1' "$T/v2.logs" | head -1 | cut -d: -f1)"

# ---- runLauncherAsWorker: the launcher hosts 2 ranks too (6 in all) ----
mpijob v2beta1 ralw "[mpirun, $ROOT, -n, '6', $AR]" "  runLauncherAsWorker: true" >"$T/ralw.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/ralw.yaml" >"$T/ralw.out" 2>&1
check "runLauncherAsWorker SUCCEEDED" wait_state ralw SUCCEEDED 120
"$KILN" jobs stream-logs ralw >"$T/ralw.logs" 2>&1
check "runLauncherAsWorker: 2 ranks on the launcher, sum 21" \
    test "$(grep -c "mpi rank [0-5] of 6 on ralw-launcher .*: sum 21$" "$T/ralw.logs")" = 2

# ---- launcher failure: v1's Never fails the job ----
mpijob v1 lfail "[/bin/sh, -c, 'mpirun $ROOT -np 4 $AR; exit 3']" >"$T/lfail.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/lfail.yaml" >"$T/lfail.out" 2>&1
check "a failing v1 launcher FAILS the job" wait_state lfail FAILED 120
check "... saying the launcher's status" sh -c "'$KILN' jobs describe lfail | grep -q 'master-replica-0 exited with a non-zero status of 3'"

# ---- v2beta1's launcher OnFailure: restarted (backoffLimit 1), then SUCCEEDED ----
mpijob v2beta1 lretry "[/bin/sh, -c, 'mpirun $ROOT -n 4 $AR || exit 1; test -e $T/retried || { touch $T/retried; exit 1; }']" \
    "  runPolicy: {backoffLimit: 1}" >"$T/lretry.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/lretry.yaml" >"$T/lretry.out" 2>&1
check "a v2beta1 launcher that fails once SUCCEEDS on its restart" wait_state lretry SUCCEEDED 120
"$KILN" jobs stream-logs lretry >"$T/lretry.logs" 2>&1
check "... having run the all-reduce twice" test "$(grep -c 'mpi rank 0 of 4 on lretry-worker-0 .*sum 10$' "$T/lretry.logs")" = 2

# ---- worker failure: its ranks are killed with it, the job FAILS ----
mpijob v1 wfail "[mpirun, $ROOT, -np, '4', $AR, '300']" "" \
    "[/bin/sh, -c, 'sleep 4; exit 3']" >"$T/wfail.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/wfail.yaml" >"$T/wfail.out" 2>&1
check "a failing worker FAILS the job" wait_state wfail FAILED 120
# the worker's exit ends its ranks, so mpirun fails too: whichever of the
# two kilnd sees first is the job's error; the worker's exit is in the log
check "... a worker's exit 3 is in its log" sh -c "'$KILN' jobs stream-logs wfail | grep -q 'worker-replica-[01] exited with status 3'"
check "... and the job's error is a replica's failure" sh -c "'$KILN' jobs describe wfail | grep -q 'replica-[01] exited with a non-zero status of'"
sleep 1
check "... and no rank of it runs on" sh -c "! pgrep -f '$RANKS' >/dev/null"

# ---- cancel: every rank goes ----
mpijob v2beta1 cancelme "[mpirun, $ROOT, -n, '4', $AR, '300']" >"$T/cancel.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/cancel.yaml" >"$T/cancel.out" 2>&1
for _ in $(seq 1 100); do
    [ "$(pgrep -fc "$RANKS")" -ge 4 ] && break
    sleep 0.2
done
check "4 ranks run before the cancel" test "$(pgrep -fc "$RANKS")" -ge 4
"$KILN" jobs cancel cancelme >/dev/null 2>&1
check "the cancelled MPIJob is CANCELLED" wait_state cancelme CANCELLED 60
sleep 1
check "no rank of it runs on" sh -c "! pgrep -f '$RANKS' >/dev/null"

# ---- kilnd killed (-9) while the ranks run: a new kilnd adopts the job ----
RANKS8="$T/[a]llreduce 8"
mpijob v2beta1 adoptme "[mpirun, $ROOT, -n, '4', $AR, '8']" "  launcherCreationPolicy: WaitForWorkersReady" >"$T/adopt.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/adopt.yaml" >"$T/adopt.out" 2>&1
for _ in $(seq 1 100); do
    [ "$(pgrep -fc "$RANKS8")" -ge 4 ] && break
    sleep 0.2
done
kill -9 "$KPID"
wait "$KPID" 2>/dev/null
start_kilnd "$T/d"
check "an adopted MPIJob SUCCEEDS (its ranks ran on under the new kilnd)" wait_state adoptme SUCCEEDED 120
"$KILN" jobs stream-logs adoptme >"$T/adopt.logs" 2>&1
check "... its 4 ranks summed to 10" test "$(grep -c 'mpi rank [0-3] of 4 on adoptme-worker-[01] .*: sum 10$' "$T/adopt.logs")" = 4
check "... and it was adopted" grep -q "kilnd restarted: adopted the job's 3 running replicas" "$T/adopt.logs"

# ---- the agent alone: a host of no replica, a name that is no host ----
AGENT=$BUILD/bin/kiln-mpi-agent
mkdir -p "$T/nompi/hosts"
KILN_MPI_DIR=$T/nompi KILN_MPI_AGENT_WAIT=1 "$AGENT" -o ConnectionAttempts=10 nohost-worker-0 true 2>"$T/agent.err"
check_eq "the agent exits 255 for a host no replica runs as (as ssh does)" "$?" 255
check "... saying so" grep -q "nohost-worker-0: no replica of this job runs under that name" "$T/agent.err"
KILN_MPI_DIR=$T/nompi "$AGENT" ../../etc true 2>"$T/agent.err"
check_eq "a path is no host name" "$?" 255
printf 'monitor %s\nlog %s\n' "$$" "$T/agent.log" >"$T/nompi/hosts/h-worker-0"
KILN_MPI_DIR=$T/nompi "$AGENT" h-worker-0 'echo "on $KILN_MPI_HOST shm $OMPI_MCA_btl_vader_backing_directory"; exit 7' >"$T/agent.out"
check_eq "the agent exits with its command's status" "$?" 7
check "... which ran with the host and its own shared-memory directory" \
    grep -q "on h-worker-0 shm $T/nompi/shm/h-worker-0" "$T/agent.out"
check "... noted in the replica's log" grep -q "kiln-mpi-agent: started the launcher's command" "$T/agent.log"

finish
