# tests/service/mpijob/lib.sh - shared by the MPIJob tests (it_mpijob.sh,
# it_mpijob_container.sh), which run mpijob/allreduce.c over 2 Workers x 2
# slots. Sourced after lib.sh.
#
# MPIJOB_IMAGE: unset or empty, the replicas run as processes (each role's
# one container named mpi); set, both roles run that image (containers
# launcher and worker, imagePullPolicy Never).
# MPIJOB_WORKER_COMMAND: the Workers' command (a YAML flow list) where a job
# names none; unset or empty, their containers have no command line (kiln
# runs `sleep`, as the operator does).

# mpijob API NAME LAUNCHER-COMMAND [SPEC-LINES] [WORKER-COMMAND]
#        [LAUNCHER-LINES] [WORKER-LINES]: an MPIJob of kubeflow.org/API,
# slotsPerWorker 2, 1 Launcher running LAUNCHER-COMMAND (a YAML flow list)
# and 2 Workers. SPEC-LINES: YAML lines (indented 2) added to the spec;
# WORKER-COMMAND: the Workers' command (given, even empty, in place of
# MPIJOB_WORKER_COMMAND; empty: no command line); LAUNCHER-LINES and
# WORKER-LINES: YAML lines (indented 12) added to each role's container
# after its command (args, a readinessProbe).
mpijob() {
    local lname=mpi wname=mpi img='' wcmd=${5-${MPIJOB_WORKER_COMMAND:-}}
    if [ -n "${MPIJOB_IMAGE:-}" ]; then
        lname=launcher wname=worker
        img="
            image: $MPIJOB_IMAGE
            imagePullPolicy: Never"
    fi
    cat <<YAML
apiVersion: kubeflow.org/$1
kind: MPIJob
metadata:
  name: $2
spec:
  slotsPerWorker: 2${4:+
$4}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: $lname$img
            command: $3${6:+
$6}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: $wname$img${wcmd:+
            command: $wcmd}${7:+
$7}
YAML
}

# ranks_ok JOB-ID FILE: the four ranks in FILE (the job's logs) summed to
# 10, two on each worker (in its container, where the Workers run an image)
ranks_ok() {
    local id=${1//_/-} f=$2
    [ "$(grep -c "mpi rank [0-3] of 4 on .*: sum 10$" "$f")" = 4 ] &&
        [ "$(grep -c "mpi rank [0-3] of 4 on $id-worker-0 " "$f")" = 2 ] &&
        [ "$(grep -c "mpi rank [0-3] of 4 on $id-worker-1 " "$f")" = 2 ]
}
