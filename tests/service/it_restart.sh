#!/bin/bash
# tests/service/it_restart.sh - restart policies (OnFailure, ExitCode 1-127
# permanent / 128-255 retried, Never, backoffLimit) restarting the whole
# group; kill -9 of a replica; cancel with SIGTERM, grace, SIGKILL; drain of
# a node (maintenance): stop, requeue, resume from the checkpoint, restarts
# counted; success when the master succeeds.
. "$(dirname "$0")/lib.sh"

start_kilnd "$T/d"
W=$T/w
mkdir -p "$W"
q() { printf '%s' "$1" | "$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))'; }

# two_role ID MASTER_CMD WORKER_CMD WORKER_POLICY [extra trainingInput members]
two_role() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"CUSTOM","region":"us-central1","masterType":"n1-standard-4","masterConfig":{"containerCommand":["sh","-c",%s]},"workerType":"n1-standard-4","workerCount":"1","workerConfig":{"restartPolicy":"%s","containerCommand":["sh","-c",%s]}%s}}' \
        "$1" "$(q "$2")" "$4" "$(q "$3")" "${5:-}"
}
restarts() {
    api GET "/v1/projects/p1/jobs/$1"
    printf '%s' "$BODY" | jget kilnStatus.restarts
}

# OnFailure: the worker fails once; the whole group restarts; then success
m="echo start >> $W/of.master; for i in \$(seq 1 100); do [ -e $W/of.ok ] && exit 0; sleep 0.05; done; exit 9"
# (the worker fails only once the master is up, so that the restart has a master to stop)
w="if [ -e $W/of.failed ]; then touch $W/of.ok; exit 0; fi; for i in \$(seq 1 100); do [ -e $W/of.master ] && break; sleep 0.05; done; touch $W/of.failed; exit 1"
api POST /v1/projects/p1/jobs "$(two_role onfail_1 "$m" "$w" OnFailure)"
check "OnFailure: SUCCEEDED after a restart" wait_state onfail_1 SUCCEEDED 20
check_eq "OnFailure: one restart counted" "$(restarts onfail_1)" 1
check_eq "OnFailure: the master restarted with the group" "$(wc -l <"$W/of.master")" 2

# ExitCode: 3 is permanent
api POST /v1/projects/p1/jobs "$(two_role exit_3 'sleep 20' 'exit 3' ExitCode)"
check "ExitCode 3: FAILED" wait_state exit_3 FAILED 10
check_eq "ExitCode 3: no restart" "$(restarts exit_3)" 0
api GET /v1/projects/p1/jobs/exit_3
check "ExitCode 3: reason" grep -q "worker-replica-0 exited with a non-zero status of 3 (restart policy ExitCode)" <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# ExitCode: 137 (SIGKILL) is retried
m="for i in \$(seq 1 100); do [ -e $W/ec.ok ] && exit 0; sleep 0.05; done; exit 9"
w="if [ -e $W/ec.once ]; then touch $W/ec.ok; exit 0; fi; touch $W/ec.once; kill -9 \$\$"
api POST /v1/projects/p1/jobs "$(two_role exit_137 "$m" "$w" ExitCode)"
check "ExitCode 137: retried, SUCCEEDED" wait_state exit_137 SUCCEEDED 20
check_eq "ExitCode 137: one restart" "$(restarts exit_137)" 1

# backoffLimit: OnFailure, always failing, limit 2 -> 2 restarts then FAILED
api POST /v1/projects/p1/jobs "$(two_role backoff_1 'sleep 20' 'exit 1' OnFailure ',"runPolicy":{"backoffLimit":"2"}')"
check "backoff: FAILED" wait_state backoff_1 FAILED 20
check_eq "backoff: 2 restarts" "$(restarts backoff_1)" 2
api GET /v1/projects/p1/jobs/backoff_1
check "backoff: reason" grep -q "backoff limit" <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# runPolicy.activeDeadlineSeconds (Kubeflow): FAILED with DeadlineExceeded
api POST /v1/projects/p1/jobs "$(two_role deadline_1 'sleep 30' 'sleep 30' Never ',"runPolicy":{"activeDeadlineSeconds":"1"}')"
check "deadline: FAILED" wait_state deadline_1 FAILED 10
api GET /v1/projects/p1/jobs/deadline_1
check "deadline: reason" grep -q DeadlineExceeded <<<"$(printf '%s' "$BODY" | jget errorMessage)"

# Never (the default): the first failure fails the job
api POST /v1/projects/p1/jobs "$(job_json never_1 'exit 1')"
check "Never: FAILED" wait_state never_1 FAILED 10
check_eq "Never: no restart" "$(restarts never_1)" 0

# kill -9 of a replica (ExitCode policy on the master): restarted, then runs
api POST /v1/projects/p1/jobs "$(printf '{"jobId":"k9","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"restartPolicy":"ExitCode","containerCommand":["sh","-c","echo up; sleep 30"]}}}')"
check "k9 running" wait_state k9 RUNNING 10
api GET /v1/projects/p1/jobs/k9
pid=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.pid)
check "k9 pid known ($pid)" test "${pid:-0}" -gt 0
kill -9 "$pid"
for _ in $(seq 1 100); do [ "$(restarts k9)" = 1 ] && break; sleep 0.05; done
check_eq "k9: restarted once" "$(restarts k9)" 1
check "k9: running again" wait_state k9 RUNNING 10
api GET /v1/projects/p1/jobs/k9
pid2=$(printf '%s' "$BODY" | jget kilnStatus.replicas.0.pid)
check "k9: a new process ($pid -> $pid2)" test "${pid2:-0}" -gt 0 -a "$pid2" != "$pid"

# cancel: a program that exits on SIGTERM, and one that ignores it (SIGKILL after 1 s)
api POST /v1/projects/p1/jobs "$(job_json polite "trap 'echo bye; exit 0' TERM; sleep 30 & wait")"
api POST /v1/projects/p1/jobs "$(job_json stubborn "trap '' TERM; echo \$\$ > $W/stubborn.pid; while :; do sleep 0.1; done")"
check "polite running" wait_state polite RUNNING 10
check "stubborn running" wait_state stubborn RUNNING 10
for _ in $(seq 1 100); do [ -s "$W/stubborn.pid" ] && break; sleep 0.05; done
api POST /v1/projects/p1/jobs/polite:cancel '{}'
api POST /v1/projects/p1/jobs/stubborn:cancel '{}'
check_eq "cancel -> CANCELLING" "$(job_state stubborn)" CANCELLING
check "polite CANCELLED" wait_state polite CANCELLED 10
check "stubborn CANCELLED after the grace period" wait_state stubborn CANCELLED 10
check "stubborn process gone" bash -c "! kill -0 $(cat "$W/stubborn.pid") 2>/dev/null"
"$KILN" jobs stream-logs polite >"$T/polite.log"
check "polite got SIGTERM" grep -qP '\tmaster-replica-0\tbye$' "$T/polite.log"

# drain: SIGTERM, the job is requeued (restart counted) and resumes from its checkpoint
api GET /v1/nodes
node=$(printf '%s' "$BODY" | jget nodes.0.name)
ck="$W/ckpt"
prog="n=0; [ -e $ck ] && n=\$(cat $ck) && echo resumed from \$n; trap 'echo \$n > $ck.tmp && mv $ck.tmp $ck; echo saved \$n; exit 0' TERM; while :; do n=\$((n+1)); sleep 0.05; done"
api POST /v1/projects/p1/jobs "$(job_json drain_1 "$prog")"
check "drain_1 running" wait_state drain_1 RUNNING 10
sleep 0.5
"$KILN" nodes drain "$node" >/dev/null 2>&1
check_eq "drain exit" "$?" 0
check "drained job requeued" wait_state drain_1 QUEUED 10
check_eq "drain counts a restart" "$(restarts drain_1)" 1
api GET /v1/nodes/"$node"
check_eq "node cordoned" "$(printf '%s' "$BODY" | jget cordoned)" true
sleep 0.3
check_eq "stays queued while cordoned" "$(job_state drain_1)" QUEUED
"$KILN" nodes uncordon "$node" >/dev/null 2>&1
check "runs again after uncordon" wait_state drain_1 RUNNING 10
wait_file "$T/d/jobs/p1/drain_1/log.tsv" 'resumed from'
check "resumed from the checkpoint" grep -qE 'master-replica-0	resumed from [1-9]' "$T/d/jobs/p1/drain_1/log.tsv"
check "drain event logged" grep -q "being drained" "$T/d/jobs/p1/drain_1/log.tsv"
api POST /v1/projects/p1/jobs/drain_1:cancel '{}'
check "drain_1 cancelled" wait_state drain_1 CANCELLED 10

finish
