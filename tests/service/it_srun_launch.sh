#!/bin/bash
# tests/service/it_srun_launch.sh - a replica whose step Slurm could not start
# leaves its job FAILED, not SUCCEEDED. Under --executor slurm a replica is
# "srun ... -- PROGRAM", and when slurmd cannot start the task (a node whose
# slurmstepd cannot reach srun: "Slurmd could not connect IO") srun prints
# "srun: error: task 0 launch failed: WHY" and exits 0 (Slurm's launch plugin
# takes its exit status only from tasks that ended). kiln-monitor watches a
# program called srun for those words. A stand-in srun that speaks them is
# the program here, run through a real kilnd: no Slurm cluster can be made to
# fail a launch on purpose. The same words from a program of another name,
# or on srun's stdout, are the replica's own output and fail nothing.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/bin" "$T/other"
# srun as Slurm 22.05 ends a step whose only task never started
cat >"$T/bin/srun" <<'SH'
#!/bin/sh
case $1 in
fail) echo "srun: error: task 0 launch failed: Slurmd could not connect IO" >&2; exit 0 ;;
stdout) echo "srun: error: task 0 launch failed: Slurmd could not connect IO"; exit 0 ;;
ran) echo "the step ran"; echo "srun: error: task 0: Exited with exit code 3" >&2; exit 3 ;;
*) echo "the step ran"; exit 0 ;;
esac
SH
chmod +x "$T/bin/srun"
cp "$T/bin/srun" "$T/other/notsrun"

start_kilnd "$T/data"

# cjob ID PROGRAM ARG: a master whose containerCommand is PROGRAM ARG
cjob() {
    printf '{"jobId":"%s","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["%s","%s"]}}}' "$1" "$2" "$3"
}

api POST /v1/projects/p1/jobs "$(cjob launch_failed "$T/bin/srun" fail)"
check_eq "create launch_failed" "$STATUS" 200
check "a step that never started: FAILED" wait_state launch_failed FAILED 20
api GET /v1/projects/p1/jobs/launch_failed
MSG=$(printf '%s' "$BODY" | jget errorMessage)
case $MSG in
*"Slurm could not start the replica's step"*"srun exited 0"*"task 0 launch failed: Slurmd could not connect IO"*) ok ;;
*) fail "the error says what Slurm said: $MSG" ;;
esac

api POST /v1/projects/p1/jobs "$(cjob step_ran "$T/bin/srun" ok)"
check "a step that ran and ended 0: SUCCEEDED" wait_state step_ran SUCCEEDED 20

api POST /v1/projects/p1/jobs "$(cjob step_exit3 "$T/bin/srun" ran)"
check "a step that ran and ended 3: FAILED" wait_state step_exit3 FAILED 20
api GET /v1/projects/p1/jobs/step_exit3
MSG=$(printf '%s' "$BODY" | jget errorMessage)
case $MSG in
*"status of 3"*) ok ;;
*) fail "its error is the exit status, not a launch failure: $MSG" ;;
esac
case $MSG in *"could not start"*) fail "a task's own exit is no launch failure: $MSG" ;; *) ok ;; esac

api POST /v1/projects/p1/jobs "$(cjob not_srun "$T/other/notsrun" fail)"
check "the words from a program not called srun: SUCCEEDED" wait_state not_srun SUCCEEDED 20

api POST /v1/projects/p1/jobs "$(cjob on_stdout "$T/bin/srun" stdout)"
check "the words on srun's stdout (the task's output): SUCCEEDED" wait_state on_stdout SUCCEEDED 20

finish
