#!/bin/bash
# tests/service/it_mpijob_container.sh - MPIJobs whose Launcher and Workers
# run images, as the operators' example files have them, on a real kilnd
# with podman: the launcher's unmodified `mpirun`, in its container, starts
# an MPI all-reduce (mpijob/allreduce.c) over 2 Workers x 2 slots; each
# worker's daemon and ranks run in that worker's container (kiln-mpi-agent
# hands the command to the worker's monitor, which runs it with `podman
# exec`: src/exec/monitor/execsrv.h). Checked: the ranks' sum and where
# each ran (the worker containers' hostnames), v1 and v2beta1, a failing
# rank failing the job, and cancel leaving no rank running. The images hold
# only the links of Debian's merged /usr; the host's /usr is mounted
# read-only, so OpenMPI in them is the host's. Skipped (77) without podman
# or OpenMPI.
PORT_RANGE=${PORT_RANGE:-12000-12099}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../lib/probe.sh"
kiln_need openmpi podman
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/mpijob/lib.sh" # mpijob (the YAML), ranks_ok
mpicc -O1 -o "$T/allreduce" "$HERE/mpijob/allreduce.c" || {
    fail "cannot build the MPI program"
    finish
}
AR=$T/allreduce
IMG=localhost/kiln-mpi-host:it
host_image "$IMG" || {
    fail "cannot make the test image"
    finish
}
printf '{"nodes": [{"name": "local", "address": "127.0.0.1"}], %s}\n' \
    "$(host_runtime_config "$T")" >"$T/nodes.json"
start_kilnd "$T/d" --node-config "$T/nodes.json"
ROOT=--allow-run-as-root

# both roles run $IMG, the Workers idle where a job names no command
MPIJOB_IMAGE=$IMG
MPIJOB_WORKER_COMMAND="[sleep, infinity]"

# ---- v1 and v2beta1: the ranks in the workers' containers ----
for api in v1 v2beta1; do
    name=ctr-$api
    id=ctr_$api
    # each rank says which container it is in (its hostname)
    mpijob "$api" "$name" "[/bin/sh, -c, 'exec mpirun $ROOT -np 4 /bin/sh -c \"echo in-container=\\\$(hostname); exec $AR\"']" \
        >"$T/$api.yaml"
    "$KILN" jobs submit training --kubeflow-job "$T/$api.yaml" >"$T/$api.out" 2>&1
    check_eq "$api: submitted" "$?" 0
    check "$api: SUCCEEDED" wait_state "$id" SUCCEEDED 120
    "$KILN" jobs stream-logs "$id" >"$T/$api.logs" 2>&1
    check "$api: 4 ranks summed to 10, 2 on each worker" ranks_ok "$id" "$T/$api.logs"
    # the containers' hostnames (kiln_exec_container_hostname): the workers'
    # own, never the launcher's, which a rank started in the launcher's
    # container would print
    n_w=$(grep -c 'in-container=.*worker-replica-[01]' "$T/$api.logs")
    check_eq "$api: every rank ran in a worker's container" "$n_w" 4
    check "$api: the worker's log notes the container start" \
        grep -q "kiln-mpi-agent: starts the launcher's command in the replica's container" \
        "$T"/d/jobs/*/"$id"/replicas/worker-replica-0.log
done
if [ "$FAILS" -gt 0 ]; then
    for f in "$T"/*.logs; do echo "== $f" >&2; tail -30 "$f" >&2; done
fi

# ---- mpi-operator's shape: Workers that start sshd, probed ready on its
# port, the launcher waiting for them: kiln runs no sshd (the agent takes
# ssh's place), the ranks run all the same ----
# (the Workers' command is null, their args name sshd)
mpijob v2beta1 ctr-sshd "[mpirun]" "  launcherCreationPolicy: WaitForWorkersReady" "" \
    "            args: [$ROOT, -np, \"4\", $AR]" \
    "            command:
            args: [/usr/sbin/sshd, -De, -f, /home/mpiuser/.sshd_config]
            readinessProbe:
              tcpSocket:
                port: 2222
              initialDelaySeconds: 2" >"$T/sshd.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/sshd.yaml" >"$T/sshd.out" 2>&1
check_eq "sshd Workers: submitted" "$?" 0
check "sshd Workers: the note says sshd is not run" grep -q "/usr/sbin/sshd is not run" "$T/sshd.out"
check "sshd Workers: SUCCEEDED" wait_state ctr_sshd SUCCEEDED 120
"$KILN" jobs stream-logs ctr_sshd >"$T/sshd.logs" 2>&1
check "sshd Workers: 4 ranks summed to 10, 2 on each worker" ranks_ok ctr_sshd "$T/sshd.logs"

# ---- a rank that fails fails the job ----
mpijob v2beta1 ctr-fail "[/bin/sh, -c, 'exec mpirun $ROOT -np 4 /bin/sh -c \"exit 3\"']" >"$T/fail.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/fail.yaml" >/dev/null 2>&1
check "a failing rank: FAILED" wait_state ctr_fail FAILED 120

# ---- cancel: no rank left running in the workers' containers ----
mpijob v2beta1 ctr-cancel "[/bin/sh, -c, 'exec mpirun $ROOT -np 4 $AR 300']" >"$T/cancel.yaml"
"$KILN" jobs submit training --kubeflow-job "$T/cancel.yaml" >/dev/null 2>&1
ok_running() { [ "$(pgrep -fc "$T/[a]llreduce 300")" -ge 4 ]; }
for _ in $(seq 1 100); do ok_running && break; sleep 0.3; done
check "cancel: the 4 ranks run first" ok_running
"$KILN" jobs cancel ctr_cancel >/dev/null 2>&1
check "cancel: CANCELLED" wait_state ctr_cancel CANCELLED 60
none_left() { [ "$(pgrep -fc "$T/[a]llreduce 300")" = 0 ]; }
for _ in $(seq 1 50); do none_left && break; sleep 0.2; done
check "cancel: no rank left running" none_left
finish
